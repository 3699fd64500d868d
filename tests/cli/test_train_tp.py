"""``trainer=tp_sim``: tensor parallel over two CPU processes (gloo), each layer's projections split by
heads and hidden units, trains like one process step by step (a GPT with grouped-query attention, RoPE
and SwiGLU, and a sequence-to-sequence model; gradient clipping on); its sharded checkpoint (split
projections) consolidates to the one-process weights and resumes in one process; the settings it
cannot split are refused in one line before the run directory. With ``trainer.sequence_parallel=true``
(norms, residual adds and dropout on each process's part of the sequence), its layers' elementwise
ops recomputed in the backward pass, the GPT still trains like one process; async tensor parallel is
refused on the CPU and without what it needs.

The GPT reads prepared token shards (``data=tokens``, the corpus of test_tokens_everywhere.py, prepared
once per session): both processes of a tensor-parallel group read the same batch of windows.

The tensor-parallel runs are process contracts (``ranks``, ``kills``: Lightning starts the second rank
as a new interpreter); the one-process references, the refusals and the commands that read the
consolidated checkpoints run in the test's own process (``command_here``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from test_train_fsdp2 import ARGS, STEPS, kill_after_first_checkpoint, series
from test_train_fsdp2 import FAMILIES as FSDP2_FAMILIES
from test_train_fsdp2 import family_runs as fsdp2_runs
from test_train_tokens import prepared_corpus
from train_cli import check, cli, command_here

pytestmark = pytest.mark.slow
GPT = ["experiment=tiny_gpt", "data.seq_len=32", "model.n_heads=4", "model.n_kv_heads=2", "pos=rope"]
GPT = [*GPT, "model.activation=swiglu", "data.batch_size=8"]  # one tensor-parallel group: one batch
TP = ["trainer=tp_sim"]
FSDP2_GPT = FSDP2_FAMILIES["gpt"]


FAMILIES = {"gpt": GPT, "seq2seq": ["experiment=tiny_seq2seq", "data.batch_size=8"]}  # cross-attention too
# How each family's tensor-parallel run splits: the GPT's also along the sequence between the
# projections, its split layers' elementwise ops recomputed in the backward pass; the seq2seq's plainly.
SPLITS = {
    "gpt": [*TP, "trainer.sequence_parallel=true", "trainer.activation_checkpointing=selective"],
    "seq2seq": TP,
}


@pytest.fixture(scope="module")
def gpt_runs(built_once: Callable[..., Path]) -> tuple[Path, Path]:
    """``family_runs`` of the GPT: only for tests marked ``ranks`` or ``kills`` (the first starts the run)."""
    return family_runs("gpt", built_once)


def family_args(family: str, built_once: Callable[..., Path]) -> list[str]:
    """The settings of ``family``'s runs; the GPT's on the token shards that test_tokens_everywhere.py
    prepares (one corpus a session)."""
    if family != "gpt":
        return FAMILIES[family]
    shards = built_once("tokens-everywhere-corpus", prepared_corpus) / "shards"
    return [*FAMILIES[family], "data=tokens", f"data.path={shards}"]


def family_runs(family: str, built_once: Callable[..., Path]) -> tuple[Path, Path]:
    """(the tensor-parallel run, the one-process run, trained in this process) of ``family``, each
    built once per session."""
    args = [*ARGS, *family_args(family, built_once), "run_dir=run"]
    split = built_once(f"tp-{family}", lambda cwd: check(cli([*args, *SPLITS[family]], cwd, timeout=600)))
    single = built_once(f"tp-single-{family}", lambda cwd: check(command_here(args, cwd)))
    return split / "run", single / "run"


def assert_trains_like(run: Path, single: Path) -> None:
    """``run``'s per-step losses and clipped gradient norms are the one-process run's."""
    losses, expected = series(run, "train/loss"), series(single, "train/loss")
    assert sorted(losses) == sorted(expected) == list(range(1, STEPS + 1))
    for step in expected:
        assert losses[step] == pytest.approx(expected[step], abs=1e-5), f"{run}: step {step}"
    assert abs(expected[STEPS] - expected[1]) > 1e-3  # the steps moved the weights
    norms, expected_norms = series(run, "train/grad_norm"), series(single, "train/grad_norm")
    for step in expected_norms:
        assert norms[step] == pytest.approx(expected_norms[step], rel=1e-4), f"{run}: step {step}"


@pytest.mark.process_contract("ranks")
def test_each_family_trains_as_one_process_and_its_checkpoint_consolidates(
    built_once: Callable[..., Path], tmp_path: Path
) -> None:
    """GPT (grouped-query attention, RoPE, SwiGLU; sequence parallel: the residual stream split along
    the sequence between the projections, RoPE's positions, the causal mask and the loss over the whole
    sequence, with selective recomputation) and seq2seq (plain tensor parallel, cross-attention too):
    one process's per-step losses and clipped norms over 20 steps. The split projections (self-attention's q/k/v, cross-attention's
    k/v) joined back by attnlab-consolidate: the unsplit model's names and the one-process run's
    values, which attnlab-sample continues a prompt from and attnlab-compress writes as int8, read by
    attnlab-sample too. An FSDP2 checkpoint (fused projections, which tensor parallel's shards are not
    named by) is refused under tensor parallel in one line, before the run directory."""
    import torch

    from attnlab.training.sharded import consolidate

    for family in FAMILIES:
        split, single = family_runs(family, built_once)
        assert_trains_like(split, single)
        whole = consolidate(split / "checkpoints" / "last.ckpt")
        joined = torch.load(whole, weights_only=True)["state_dict"]
        reference = torch.load(single / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
        assert sorted(joined) == sorted(reference), family
        for name, value in reference.items():
            torch.testing.assert_close(joined[name], value, atol=1e-5, rtol=0, msg=f"{family}: {name}")
        cwd = tmp_path / family
        cwd.mkdir()
        sampled = command_here([f"ckpt_path={whole}", "prompt=ab", "max_new_tokens=4"], cwd, command="sample")
        assert sampled.returncode == 0 and sampled.stdout.strip(), sampled.stderr[-2000:]
        int8 = cwd / "int8.ckpt"
        compressed = command_here([f"ckpt_path={whole}", f"out={int8}"], cwd, command="compress")
        assert compressed.returncode == 0, compressed.stderr[-2000:]
        again = command_here([f"ckpt_path={int8}", "prompt=ab", "max_new_tokens=4"], cwd, command="sample")
        assert again.returncode == 0, again.stderr[-2000:]

    sharded, _ = fsdp2_runs("gpt", built_once)
    last = sharded / "checkpoints" / "last.ckpt"
    args = [*ARGS, *FSDP2_GPT, *TP, "data.batch_size=16", f"ckpt_path={last}", "run_dir=new"]
    refused = command_here(args, tmp_path)
    assert (refused.returncode, refused.stderr.strip()) == (
        2,
        f"error: trainer.tensor_parallel_size=2: the checkpoint {last} was written with "
        "trainer.tensor_parallel_size=1, its attention projections fused: resume with "
        "trainer.tensor_parallel_size=1",
    )
    assert not (tmp_path / "new").exists()


@pytest.mark.process_contract("kills")
def test_a_tensor_parallel_checkpoint_resumes_in_one_process(
    gpt_runs: tuple[Path, Path], built_once: Callable[..., Path], tmp_path: Path
) -> None:
    """Killed (kill -9) after its first checkpoint, whose attention projections are split, the run
    resumes in one process without sharding: the projections joined back, the optimizer state with
    them, and the next steps' losses are those of the uninterrupted tensor-parallel run."""
    split, _ = gpt_runs
    args = [*ARGS, *family_args("gpt", built_once), "run_dir=run"]
    kill_after_first_checkpoint([*args, *SPLITS["gpt"]], tmp_path)
    check(command_here([*args, "ckpt_path=last"], tmp_path))
    losses, expected = series(tmp_path / "run", "train/loss"), series(split, "train/loss")
    resumed = sorted(step for step in losses if step > 10)
    assert resumed == list(range(11, STEPS + 1))
    for step in resumed:
        assert losses[step] == pytest.approx(expected[step], abs=1e-5), f"step {step}"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["model.n_kv_heads=1"],
            "trainer.tensor_parallel_size=2: must divide model.n_kv_heads=1: each process runs whole heads",
        ),
        (
            ["trainer.devices=3"],
            "trainer.tensor_parallel_size=2: must divide the number of processes, 3 (devices x nodes)",
        ),
        (
            ["model.attn_backend=flex"],
            "model.attn_backend=flex: tensor parallel (trainer.tensor_parallel_size=2) runs only sdpa",
        ),
        (
            ["trainer.float8=emulated"],
            "trainer.float8=emulated: not composed with trainer.tensor_parallel_size=2: set it to false",
        ),
        (
            ["trainer.sequence_parallel=true", "data.seq_len=33"],
            "data.seq_len=33: must be a multiple of trainer.tensor_parallel_size=2 under "
            "trainer.sequence_parallel=true: each process takes an equal part of every sequence",
        ),
        (
            ["trainer.async_tensor_parallel=true", "compile=block"],
            "trainer.async_tensor_parallel=true: overlaps the all-gathers and reduce-scatters of "
            "trainer.sequence_parallel=true: set it",
        ),
        (
            ["trainer.async_tensor_parallel=true", "trainer.sequence_parallel=true"],
            "trainer.async_tensor_parallel=true: works inside compiled layers (inductor rewrites their "
            "collectives): set compile=block, not compile=false",
        ),
        (
            ["trainer.async_tensor_parallel=true", "trainer.sequence_parallel=true", "compile=block"],
            "trainer.async_tensor_parallel=true: runs on GPUs only (CUDA's symmetric memory), not "
            "trainer.accelerator=cpu: set it to false on this machine",
        ),
        (
            ["trainer=ddp_sim", "trainer.tensor_parallel_size=2"],
            "trainer.tensor_parallel_size=2: splits layers under trainer.strategy=fsdp2 (trainer=tp or "
            "tp_sim), not ddp",
        ),
    ],
)
def test_what_tensor_parallel_cannot_split_is_refused_before_the_run(
    overrides: list[str], message: str, tmp_path: Path
) -> None:
    args = [*ARGS, *GPT, *TP, *overrides, "run_dir=run"]
    refused = command_here(args, tmp_path)
    assert (refused.returncode, refused.stderr.strip()) == (2, f"error: {message}")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            [*GPT, "trainer.sequence_parallel=true"],
            "trainer.sequence_parallel=true: splits the sequence over the tensor-parallel processes: set "
            "trainer.tensor_parallel_size > 1",
        ),
        (
            ["experiment=tiny_seq2seq", *TP, "trainer.sequence_parallel=true"],
            "trainer.sequence_parallel=true: splits fixed-length windows of decoder-only models (model=gpt); "
            "model.family=seq2seq's batches are padded to their longest row: set it to false",
        ),
        (
            [*GPT, "trainer.async_tensor_parallel=true"],
            "trainer.async_tensor_parallel=true: overlaps tensor parallel's collectives: set "
            "trainer.tensor_parallel_size > 1",
        ),
    ],
)
def test_sequence_and_async_tensor_parallel_without_what_they_need_are_refused(
    overrides: list[str], message: str, tmp_path: Path
) -> None:
    refused = command_here([*ARGS, *overrides, "run_dir=run"], tmp_path)
    assert (refused.returncode, refused.stderr.strip()) == (2, f"error: {message}")
    assert not (tmp_path / "run").exists()
