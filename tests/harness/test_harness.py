"""attnlab's decoder through lm-evaluation-harness: a tiny multiple-choice task and a tiny generation
task of the test's own (local YAML, local JSON lines) are scored by ``lm_eval.simple_evaluate``, and
every number it reports is recomputed here from attnlab's own forward pass and greedy decoding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("lm_eval")

from attnlab.data.tokenizers import char_tokenizer
from attnlab.generate.decoder import generate
from attnlab.harness import evaluate
from attnlab.models import build_model
from attnlab.schema.model import GPTConfig

CHOICES = [
    {"question": "The sky is", "choices": [" blue", " green", " loud"], "label": 0},
    {"question": "Two and two make", "choices": [" four", " five"], "label": 0},
    {"question": "A cat says", "choices": [" meow", " moo", " quack"], "label": 0},
    {"question": "Ice is", "choices": [" cold", " hot"], "label": 0},
]
PROMPTS = [
    {"prompt": "ab", "answer": "abab"},
    {"prompt": "The ", "answer": "The"},
    {"prompt": "x", "answer": "y"},
]
TEXTS = [d["question"] + c for d in CHOICES for c in d["choices"]] + [
    d["prompt"] + d["answer"] for d in PROMPTS
]
TEXTS.append("\n")  # the generation task stops at a newline: the tokenizers must know it


def write_tasks(folder: Path) -> None:
    """Two tasks in the harness's YAML, each reading a JSON lines file beside it."""
    for name, rows in (("choice", CHOICES), ("gen", PROMPTS)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = {
        "dataset_path": "json",
        "test_split": "train",
        "output_type": "multiple_choice",
    }
    choice = {
        **common,
        "task": "attnlab_tiny_choice",
        "dataset_kwargs": {"data_files": str(folder / "choice.jsonl")},
        "doc_to_text": "{{question}}",
        "doc_to_choice": "{{choices}}",
        "target_delimiter": "",  # the choices carry their own space
        "doc_to_target": "{{label}}",
        "metric_list": [{"metric": "acc"}],
    }
    gen = {
        **common,
        "task": "attnlab_tiny_gen",
        "output_type": "generate_until",
        "dataset_kwargs": {"data_files": str(folder / "gen.jsonl")},
        "doc_to_text": "{{prompt}}",
        "doc_to_target": "{{answer}}",
        "generation_kwargs": {"until": ["\n"], "max_gen_toks": 5, "do_sample": False},
        "metric_list": [{"metric": "exact_match"}],
    }
    for task in (choice, gen):
        (folder / f"{task['task']}.yaml").write_text(json.dumps(task))  # JSON is YAML


def tiny_model() -> tuple[torch.nn.Module, object]:
    tokenizer = char_tokenizer(TEXTS)
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=tokenizer.vocab_size, d_model=32, n_layers=2, n_heads=2, max_seq_len=32)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model, tokenizer


@torch.no_grad()
def loglikelihood(model: torch.nn.Module, tokenizer, context: str, continuation: str) -> float:
    """attnlab's log-probability of ``continuation`` after ``context``, from one forward pass."""
    ctx, cont = tokenizer.encode(context), tokenizer.encode(continuation)
    ids = torch.tensor([ctx + cont])
    logp = model(ids).log_softmax(-1)[0, len(ctx) - 1 : -1]
    return logp.gather(-1, torch.tensor(cont)[:, None]).sum().item()


def test_a_tiny_task_scored_by_the_harness_matches_attnlabs_own_numbers(tmp_path: Path) -> None:
    write_tasks(tmp_path)
    model, tokenizer = tiny_model()
    results = evaluate(
        model, tokenizer, ["attnlab_tiny_choice", "attnlab_tiny_gen"], str(tmp_path), batch_size=3
    )

    choice = results["samples"]["attnlab_tiny_choice"]
    assert len(choice) == len(CHOICES)
    correct = 0
    for sample in choice:
        doc = sample["doc"]
        ours = [loglikelihood(model, tokenizer, doc["question"], c) for c in doc["choices"]]
        theirs = [resp[0][0] for resp in sample["resps"]]
        assert theirs == pytest.approx(ours, abs=1e-5)
        correct += int(max(range(len(ours)), key=ours.__getitem__) == doc["label"])
    assert results["results"]["attnlab_tiny_choice"]["acc,none"] == pytest.approx(correct / len(CHOICES))

    gen = results["samples"]["attnlab_tiny_gen"]
    matches = 0
    for sample in gen:
        doc = sample["doc"]
        ids = generate(model, [tokenizer.encode(doc["prompt"])], max_new_tokens=5, temperature=0.0)[0]
        text = tokenizer.decode(ids).split("\n")[0]
        assert sample["resps"][0][0] == text
        matches += int(text == doc["answer"])
    assert results["results"]["attnlab_tiny_gen"]["exact_match,none"] == pytest.approx(matches / len(PROMPTS))


def test_tasks_all_in_the_folder_are_scored_without_indexing_the_harness_own(tmp_path: Path) -> None:
    """Indexing lm-eval's 14.7k built-in tasks costs every evaluation 10-12 CPU-seconds: when the folder
    defines every task asked for, only the folder is indexed."""
    from attnlab.harness.names import task_manager

    write_tasks(tmp_path)
    index = task_manager(["attnlab_tiny_choice", "attnlab_tiny_gen"], str(tmp_path))
    assert sorted(index.all_tasks) == ["attnlab_tiny_choice", "attnlab_tiny_gen"]


@pytest.mark.parametrize(
    ("name", "may_be_one"),
    [
        ("hellaswag", True),  # a task
        ("mmlu", True),  # a group
        ("mmlu_*", True),  # a glob pattern
        ("no_such_task", False),
    ],
)
def test_only_a_name_written_in_the_harness_task_files_is_looked_up_in_its_index(
    name: str, may_be_one: bool
) -> None:
    """A plain name that no file of lm-eval's task folder holds is unknown without indexing its 14.7k
    tasks (10-12 CPU-seconds); every name of the index is written in those files."""
    from attnlab.harness.names import may_name_a_harness_task

    assert may_name_a_harness_task(name) is may_be_one


def test_rolling_loglikelihood_is_the_sum_over_the_text(tmp_path: Path) -> None:
    from lm_eval.api.instance import Instance

    from attnlab.harness.lm import AttnlabLM

    model, tokenizer = tiny_model()
    text = "The sky is blue and ice is cold"  # one window of max_seq_len=32
    lm = AttnlabLM(model, tokenizer, batch_size=2)
    request = Instance("loglikelihood_rolling", {}, (text,), 0)
    [theirs] = lm.loglikelihood_rolling([request])
    ids = torch.tensor([tokenizer.encode(text)])  # no <bos> or <eos>: the first character is given
    with torch.no_grad():
        ours = model(ids).log_softmax(-1)[0, :-1].gather(-1, ids[0, 1:, None]).sum().item()
    assert theirs == pytest.approx(ours, abs=1e-5)


def test_the_harness_hf_backend_on_the_exported_model_gives_the_same_scores(tmp_path: Path) -> None:
    """The model exported by attnlab-export's writer and scored by the harness's own Hugging Face
    backend: the same log-likelihood for every choice, within 1e-4, and the same generated text."""
    pytest.importorskip("accelerate")
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from attnlab.export import write_hf

    write_tasks(tmp_path)
    tokenizer = char_tokenizer(TEXTS, roles=("pad", "eos"))  # the HF backend pads, and needs a prefix token
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=tokenizer.vocab_size, d_model=32, n_layers=2, n_heads=2, max_seq_len=32)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    write_hf(model, tmp_path / "hf", tokenizer)

    tasks = ["attnlab_tiny_choice", "attnlab_tiny_gen"]
    ours = evaluate(model, tokenizer, tasks, str(tmp_path), batch_size=3)
    hf = HFLM(pretrained=str(tmp_path / "hf"), device="cpu", batch_size=3, dtype="float32")
    theirs = simple_evaluate(
        model=hf,
        tasks=tasks,
        task_manager=TaskManager(include_path=str(tmp_path), include_defaults=False),  # the two tasks alone
        log_samples=True,
        bootstrap_iters=0,
    )
    for a, b in zip(
        ours["samples"]["attnlab_tiny_choice"], theirs["samples"]["attnlab_tiny_choice"], strict=True
    ):
        assert [r[0][0] for r in a["resps"]] == pytest.approx([r[0][0] for r in b["resps"]], abs=1e-4)
        assert [r[0][1] for r in a["resps"]] == [r[0][1] for r in b["resps"]]  # greedy agreement too
    for a, b in zip(ours["samples"]["attnlab_tiny_gen"], theirs["samples"]["attnlab_tiny_gen"], strict=True):
        assert a["resps"] == b["resps"]
