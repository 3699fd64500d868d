"""The synthetic tasks (copy, passkey, recall, addition, repeated segments): exact answers, configured lengths and depths,
examples fixed by the seed alone, bad settings refused."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import default_collate

from attnlab.data.sampling import ResumableLoader, SampleBatches
from attnlab.data.synthetic import FILLER
from attnlab.schema.data import IGNORE_INDEX, data_config
from attnlab.schema.errors import ConfigError
from attnlab.schema.optim import AdamWConfig
from attnlab.schema.task import task_config
from attnlab.tasks import build_task
from attnlab.tasks.causal_lm import exact_answers

KINDS = ("copy", "passkey", "recall", "addition", "repeated_segments")
SEQ_LEN = 40  # of the rows the oracle solves


def solve(kind: str, prompt: str) -> str:
    """The answer worked out from the prompt alone, by the task's rule (not by its generator)."""
    if kind == "copy":
        return prompt.removesuffix("=")
    if kind == "passkey":
        return re.search(r"k:(\d+);", prompt).group(1)
    if kind == "recall":
        pairs, asked = prompt.split("?")
        return dict((pairs[i : i + 2], pairs[i + 2]) for i in range(0, len(pairs), 3))[asked]
    if kind == "repeated_segments":  # the row is SEQ_LEN + 1 letters: the segment's length follows
        length = SEQ_LEN + 2 - len(prompt)
        segment = prompt[-length - 1 : -1]
        assert prompt[-1] == segment[0]  # the repeat has begun
        return segment[1:]
    a, b = prompt.removesuffix("=").split("+")
    return str(int(a) + int(b)).zfill(len(a) + 1)


def score(dataset, predict) -> float:
    """Exact match of a model that gives each row's answer ``predict(prompt)``, as CausalLMTask scores it."""
    rows = [dataset[i] for i in range(len(dataset))]
    hits = []
    for i, row in enumerate(rows):
        prompt, _ = dataset.example(i)
        ids = [dataset.ids[c] for c in prompt + predict(prompt)][1:]
        logits = F.one_hot(torch.tensor(ids), len(dataset.ids) + 1).float()
        hits.append(exact_answers(logits[None], row["labels"][None]))
    return torch.cat(hits).float().mean().item()


@pytest.mark.parametrize("kind", KINDS)
def test_the_labels_are_the_exact_answer_and_an_oracle_scores_100(make_dm, kind: str) -> None:
    dm = make_dm(kind, seq_len=SEQ_LEN, num_train=8, num_val=200, num_test=8)
    val = dm.datasets["val"]
    for i in range(20):
        prompt, answer = val.example(i)
        row = val[i]
        assert solve(kind, prompt) == answer
        answer_ids = row["labels"][row["labels"] != IGNORE_INDEX]
        assert dm.tokenizer.decode(answer_ids.tolist()) == answer  # the labels are the answer only
        assert row["labels"][-len(answer) :].tolist() == answer_ids.tolist()
    assert score(val, lambda p: solve(kind, p)) == 1.0


def test_a_model_that_ignores_the_context_scores_chance(make_dm) -> None:
    """Recall's values are one of ten digits: a constant answer is right about a tenth of the time;
    passkey's and copy's chance is (1/10)^5 and (1/26)^20: never."""
    recall = make_dm("recall", seq_len=40, num_train=8, num_val=2000, num_test=8).datasets["val"]
    assert 0.08 < score(recall, lambda p: "7") < 0.12
    for kind in ("passkey", "copy"):
        val = make_dm(kind, seq_len=40, num_train=8, num_val=200, num_test=8).datasets["val"]
        fixed = val.example(0)[1]
        assert score(val, lambda p, fixed=fixed: fixed) < 0.02  # one example's answer, always


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seq_len", [16, 61, 256])
def test_rows_fill_the_configured_length(make_dm, kind: str, seq_len: int) -> None:
    if seq_len < data_config(kind).min_seq_len:
        pytest.skip("too short for the task")
    val = make_dm(kind, seq_len=seq_len, num_train=8, num_val=8, num_test=8).datasets["val"]
    for i in range(8):
        row = val[i]
        assert seq_len - 3 <= len(row["input_ids"]) == len(row["labels"]) <= seq_len


def test_repeated_segments_vary_in_length_and_start(make_dm) -> None:
    """No fixed offset between the two occurrences: a model must find the earlier one by content."""
    val = make_dm("repeated_segments", seq_len=64, num_train=8, num_val=200, num_test=8).datasets["val"]
    lengths = {len(val.example(i)[1]) + 1 for i in range(200)}
    assert min(lengths) == 16 and max(lengths) == 32 and len(lengths) > 10


@pytest.mark.parametrize("depth", [0.0, 0.25, 0.5, 1.0])
def test_the_passkey_sits_at_the_configured_depth(make_dm, depth: float) -> None:
    val = make_dm(
        "passkey", seq_len=128, passkey_depth=depth, passkey_digits=4, num_train=8, num_val=20, num_test=8
    ).datasets["val"]
    for i in range(20):
        prompt, key = val.example(i)
        assert len(prompt) + len(key) == 129 and prompt.endswith("?k:") and len(key) == 4
        filler = prompt[: -len("?k:")].replace(f"k:{key};", "")
        assert len(filler) == 129 - 14 and set(filler) <= set(FILLER)
        assert prompt.index(f"k:{key};") == round(depth * len(filler))


def test_the_same_seed_gives_the_same_examples_in_any_order_and_process(make_dm) -> None:
    """Each example is a function of (seed, split, index): two modules (two ranks, two workers) read
    the same rows in any order, a pinned example holds in every process, another seed differs."""
    one = make_dm("copy", seq_len=16, num_train=50, num_val=8, num_test=8).datasets["train"]
    two = make_dm("copy", seq_len=16, num_train=50, num_val=8, num_test=8).datasets["train"]
    forward = [one[i]["input_ids"].tolist() for i in range(50)]
    assert forward == [two[i]["input_ids"].tolist() for i in reversed(range(50))][::-1]
    assert one.example(0) == ("hlgfmxbm=", "hlgfmxbm")  # string seeds are hashed with SHA-512, not hash()
    other = make_dm("copy", seq_len=16, num_train=50, num_val=8, num_test=8, seed=1).datasets["train"]
    assert [other[i]["input_ids"].tolist() for i in range(50)] != forward


@pytest.mark.parametrize(
    ("kind", "settings", "message"),
    [
        ("passkey", {"passkey_depth": 1.5}, "data.passkey_depth=1.5: must be in [0, 1], or null (uniform)"),
        (
            "passkey",
            {"seq_len": 14},
            "data.seq_len=14: is too short for data.kind=passkey; it needs at least 15",
        ),
        ("copy", {"seq_len": 1}, "data.seq_len=1: is too short for data.kind=copy; it needs at least 2"),
        ("recall", {"seq_len": 5}, "data.seq_len=5: is too short for data.kind=recall; it needs at least 6"),
        (
            "addition",
            {"seq_len": 4},
            "data.seq_len=4: is too short for data.kind=addition; it needs at least 5",
        ),
        (
            "repeated_segments",
            {"seq_len": 6},
            "data.seq_len=6: is too short for data.kind=repeated_segments; it needs at least 7",
        ),
    ],
)
def test_bad_settings_are_refused_in_one_line(kind: str, settings: dict, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        data_config(kind, **settings).check()
    assert str(error.value) == message


@pytest.mark.parametrize("kind", KINDS)
def test_an_encoder_decoder_reads_the_prompt_as_source_and_the_answer_as_target(make_dm, kind: str) -> None:
    dm = make_dm(kind, task="seq2seq", seq_len=40, num_train=8, num_val=8, num_test=8)
    val, tok = dm.datasets["val"], dm.tokenizer
    batch = dm.eval_collate_fn()([val[i] for i in range(8)])
    for i in range(8):
        prompt, answer = val.example(i)
        src = batch["src_ids"][i][batch["src_mask"][i].bool()].tolist()
        labels = [t for t in batch["labels"][i].tolist() if t != IGNORE_INDEX]
        assert tok.decode(src) == prompt and labels == [*tok.encode(answer), tok.eos_id]
        assert batch["tgt_in"][i][0] == tok.bos_id


def test_two_ranks_and_a_worker_read_what_one_process_reads(make_dm) -> None:
    """Rank r of two (batch 4, each with its own data module, one read in a worker process) gets rows
    [4r, 4r + 4) of one process's batch of 8, at every stream position."""
    fields = {"seq_len": 32, "num_train": 64, "num_val": 8, "num_test": 8}
    dm = make_dm("passkey", **fields)
    one = SampleBatches(dm.datasets["train"], dm.collate_fn(), seed=0, batch_size=8, rank=0, world_size=1)
    ranks = []
    for rank in (0, 1):
        own = make_dm("passkey", **fields)
        ranks.append(
            SampleBatches(
                own.datasets["train"], own.collate_fn(), seed=0, batch_size=4, rank=rank, world_size=2
            )
        )
    for position in (0, 8, 64, 120):
        rows = torch.cat([r[position]["input_ids"] for r in ranks])
        assert torch.equal(rows, one[position]["input_ids"])
    in_worker = next(iter(ResumableLoader(ranks[1], num_workers=1)))
    assert torch.equal(in_worker["input_ids"], one[0]["input_ids"][4:])


def test_a_causal_lm_scores_exact_match_on_answer_batches_only(make_dm, tiny_model) -> None:
    """``val/exact_match`` is the share of rows whose answer tokens are all the argmax; a text batch
    (no ``answer_rows``) updates no exact match, so text runs log none."""
    dm = make_dm("recall", seq_len=24, num_train=8, num_val=16, num_test=8)
    module = build_task(
        task_config("causal_lm"), AdamWConfig(), tiny_model("gpt", vocab_size=dm.vocab_size), max_steps=1
    )
    rows = [dm.datasets["val"][i] for i in range(16)]
    metrics = module.build_metrics()
    module.evaluate(default_collate(rows), metrics)
    assert not metrics["exact_match"].update_called and metrics["loss"].update_called
    batch = dm.eval_collate_fn()(rows)
    module.evaluate(batch, metrics)
    expected = exact_answers(module.logits(batch), batch["labels"]).float().mean()
    assert metrics["exact_match"].compute() == pytest.approx(expected.item())


@pytest.mark.parametrize("kind", KINDS)
def test_train_min_len_gives_each_training_example_its_own_length(make_dm, kind: str) -> None:
    """``data.train_min_len``: training rows of every length from it to seq_len (so copy's offset
    between a letter and its copy varies), each still answered by the task's rule; validation stays at
    seq_len, and without the option the training examples are those of before."""
    low = data_config(kind).min_seq_len
    dm = make_dm(kind, seq_len=SEQ_LEN, train_min_len=low, num_train=400, num_val=50, num_test=8)
    train, val = dm.datasets["train"], dm.datasets["val"]
    lengths = set()
    for i in range(400):
        prompt, answer = train.example(i)
        if kind != "repeated_segments":  # its oracle reads the segment's length from SEQ_LEN
            assert solve(kind, prompt) == answer
        lengths.add(len(prompt) + len(answer))
    assert min(lengths) <= low + 3 and max(lengths) >= SEQ_LEN - 2 and len(lengths) > 10
    assert {len(val[i]["input_ids"]) for i in range(50)} <= set(range(SEQ_LEN - 3, SEQ_LEN + 1))
    fixed = make_dm(kind, seq_len=SEQ_LEN, num_train=400, num_val=50, num_test=8)
    assert [val.example(i) for i in range(50)] == [fixed.datasets["val"].example(i) for i in range(50)]
    if kind == "copy":
        offsets = {len(train.example(i)[0]) for i in range(400)}  # the copy is that far behind
        assert len(offsets) == (SEQ_LEN - low) // 2 + 1
        plain = make_dm(kind, seq_len=16, num_train=50, num_val=8, num_test=8).datasets["train"]
        assert plain.example(0) == ("hlgfmxbm=", "hlgfmxbm")  # unchanged without train_min_len


def test_rows_of_several_lengths_are_padded_without_changing_a_causal_models_outputs(
    make_dm, tiny_model
) -> None:
    """The training batch pads the shorter rows on the right (labels IGNORE_INDEX there); a causal
    model's logits at each row's own positions are those of the row alone, so the loss is unchanged."""
    dm = make_dm("copy", seq_len=24, train_min_len=6, num_train=64, num_val=8, num_test=8)
    batches = SampleBatches(dm.datasets["train"], dm.collate_fn(), seed=0, batch_size=8, rank=0, world_size=1)
    batch = batches[0]
    assert batch["input_ids"].shape == batch["labels"].shape
    module = build_task(
        task_config("causal_lm"), AdamWConfig(), tiny_model("gpt", vocab_size=dm.vocab_size), max_steps=1
    )
    module.eval()
    sizes = set()
    with torch.no_grad():
        together = module.logits(batch)
        for row in range(8):
            n = int((batch["labels"][row] != IGNORE_INDEX).nonzero().max()) + 1  # the row's last label
            alone = module.logits({"input_ids": batch["input_ids"][row : row + 1, :n]})
            torch.testing.assert_close(together[row, :n], alone[0])
            assert (batch["labels"][row, n:] == IGNORE_INDEX).all()
            sizes.add(n)
    assert len(sizes) > 1  # the batch really held rows of several lengths


@pytest.mark.parametrize(("value", "message"), [(3, "from 5"), (41, "to data.seq_len=40")])
def test_a_train_min_len_outside_the_task_and_seq_len_is_refused(value: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        data_config("addition", seq_len=40, train_min_len=value).check()
