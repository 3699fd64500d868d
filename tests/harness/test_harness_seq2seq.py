"""attnlab's encoder-decoder through lm-evaluation-harness: the tiny multiple-choice and generation
tasks of ``test_harness`` (the context is the source, the continuation the target), every number
recomputed from attnlab's teacher-forced forward pass and greedy decoding; the same model exported
as T5 and scored by the harness's own ``hf`` backend (seq2seq) gives the same numbers within 1e-4;
a perplexity task (rolling log-likelihood) is refused before any scoring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("lm_eval")

from test_harness import CHOICES, PROMPTS, TEXTS, write_tasks

from attnlab.data.tokenizers import char_tokenizer
from attnlab.generate import greedy_decode
from attnlab.harness import TaskRefused, evaluate
from attnlab.models import build_model
from attnlab.schema.model import Seq2SeqConfig
from attnlab.schema.pos import RelativePos

TASKS = ["attnlab_tiny_choice", "attnlab_tiny_gen"]


def tiny_t5() -> tuple[torch.nn.Module, object]:
    """A T5-layout encoder-decoder trained (Adam, 150 steps) to answer the generation prompts and the
    right choices, so that its greedy answers end with ``<eos>`` well within the length limit."""
    tokenizer = char_tokenizer(TEXTS, roles=("pad", "bos", "eos"))
    torch.manual_seed(0)
    cfg = Seq2SeqConfig(
        vocab_size=tokenizer.vocab_size,
        d_model=32,
        n_layers=2,
        n_decoder_layers=2,
        n_heads=4,
        norm="rmsnorm",
        bias=False,
        attn_scale=1.0,
        embed_scale=False,
        tied_output_scale=True,
        dropout=0.0,
        max_seq_len=32,
        pos=RelativePos(num_buckets=8, max_distance=16),
    )
    model = build_model(cfg)
    pairs = [(d["prompt"], d["answer"]) for d in PROMPTS]
    pairs += [(d["question"], d["choices"][d["label"]]) for d in CHOICES]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    bos, eos = tokenizer.bos_id, tokenizer.eos_id
    for _ in range(150):
        loss = 0.0
        for src, tgt in pairs:
            s, t = tokenizer.encode(src), tokenizer.encode(tgt)
            logits = model(torch.tensor([s]), torch.tensor([[bos, *t]]))
            loss = loss + torch.nn.functional.cross_entropy(logits[0], torch.tensor([*t, eos]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def t5() -> tuple[torch.nn.Module, object]:
    return tiny_t5()


@torch.no_grad()
def loglikelihood(model: torch.nn.Module, tokenizer, source: str, target: str) -> float:
    """attnlab's log-probability of ``target`` given ``source``, teacher-forced from ``<bos>``."""
    src, tgt = tokenizer.encode(source), tokenizer.encode(target)
    logp = model(torch.tensor([src]), torch.tensor([[tokenizer.bos_id, *tgt[:-1]]])).log_softmax(-1)[0]
    return logp.gather(-1, torch.tensor(tgt)[:, None]).sum().item()


def test_a_tiny_task_scored_by_the_harness_matches_attnlabs_own_numbers(t5, tmp_path: Path) -> None:
    model, tokenizer = t5
    write_tasks(tmp_path)
    results = evaluate(model, tokenizer, TASKS, str(tmp_path), batch_size=3)

    correct = 0
    for sample in results["samples"]["attnlab_tiny_choice"]:
        doc = sample["doc"]
        ours = [loglikelihood(model, tokenizer, doc["question"], c) for c in doc["choices"]]
        assert [r[0][0] for r in sample["resps"]] == pytest.approx(ours, abs=1e-5)
        correct += int(max(range(len(ours)), key=ours.__getitem__) == doc["label"])
    assert results["results"]["attnlab_tiny_choice"]["acc,none"] == pytest.approx(correct / len(CHOICES))
    assert correct == len(CHOICES)  # trained on the right choices: not vacuous

    matches = 0
    for sample in results["samples"]["attnlab_tiny_gen"]:
        doc = sample["doc"]
        src = [tokenizer.encode(doc["prompt"])]
        ids = greedy_decode(model, src, bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id, max_new_tokens=5)[0]
        text = tokenizer.decode(ids).split("\n")[0]
        assert sample["resps"][0][0] == text
        matches += int(text == doc["answer"])
    assert matches == len(PROMPTS)  # every answer ends with <eos> before the length limit
    assert results["results"]["attnlab_tiny_gen"]["exact_match,none"] == 1.0


def test_the_harness_hf_backend_on_the_exported_t5_gives_the_same_scores(t5, tmp_path: Path) -> None:
    """The model written by attnlab-export's writer as T5ForConditionalGeneration and scored by the
    harness's own Hugging Face backend as a seq2seq model: every choice's log-likelihood within 1e-4,
    the same greedy agreement and the same generated text."""
    pytest.importorskip("accelerate")
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from attnlab.export import write_hf

    model, tokenizer = t5
    write_tasks(tmp_path)
    assert write_hf(model, tmp_path / "hf", tokenizer) == "T5ForConditionalGeneration"
    ours = evaluate(model, tokenizer, TASKS, str(tmp_path), batch_size=3)
    hf = HFLM(pretrained=str(tmp_path / "hf"), backend="seq2seq", device="cpu", batch_size=3, dtype="float32")
    theirs = simple_evaluate(
        model=hf,
        tasks=TASKS,
        task_manager=TaskManager(include_path=str(tmp_path), include_defaults=False),  # the two tasks alone
        log_samples=True,
        bootstrap_iters=0,
    )
    pairs = zip(ours["samples"]["attnlab_tiny_choice"], theirs["samples"]["attnlab_tiny_choice"], strict=True)
    for a, b in pairs:
        assert [r[0][0] for r in a["resps"]] == pytest.approx([r[0][0] for r in b["resps"]], abs=1e-4)
        assert [r[0][1] for r in a["resps"]] == [r[0][1] for r in b["resps"]]
    for a, b in zip(ours["samples"]["attnlab_tiny_gen"], theirs["samples"]["attnlab_tiny_gen"], strict=True):
        assert a["resps"] == b["resps"]
    for task, metric in (("attnlab_tiny_choice", "acc,none"), ("attnlab_tiny_gen", "exact_match,none")):
        assert ours["results"][task][metric] == theirs["results"][task][metric]


def test_a_perplexity_task_is_refused_before_scoring(t5, tmp_path: Path) -> None:
    model, tokenizer = t5
    (tmp_path / "texts.jsonl").write_text(json.dumps({"text": "The sky is blue"}) + "\n")
    task = {
        "task": "attnlab_tiny_ppl",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": str(tmp_path / "texts.jsonl")},
        "test_split": "train",
        "output_type": "loglikelihood_rolling",
        "doc_to_text": "",
        "doc_to_target": "{{text}}",
        "metric_list": [{"metric": "word_perplexity"}],
    }
    (tmp_path / "ppl.yaml").write_text(json.dumps(task))
    with pytest.raises(TaskRefused) as err:
        evaluate(model, tokenizer, ["attnlab_tiny_ppl"], str(tmp_path))
    assert str(err.value) == (
        "task attnlab_tiny_ppl asks for loglikelihood_rolling: an encoder-decoder scores a target given a "
        "source; a text scored whole (loglikelihood_rolling: perplexity tasks such as wikitext) has no "
        "source: score it with a decoder-only model"
    )
