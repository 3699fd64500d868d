"""``trainer=fsdp2_sim``: FSDP2 over two CPU processes (gloo) trains like one process with the doubled
batch, step by step, with gradient clipping on, and reports one process's val and test metrics on
splits of odd size, whose shards give the processes different numbers of batches; its layers compiled
one by one train like eager ones; a run killed mid-way (kill -9 of both processes) resumes with
``ckpt_path=last`` to the losses of the uninterrupted run, from its one-file checkpoint or from a
sharded one (``checkpoint.sharded=true``), also on another number of processes (2 -> 1, 1 -> 2), which
the commands that read weights refuse in one line naming ``attnlab-consolidate``, and read once
consolidated.

The tests that start processes are process contracts (``ranks``, or ``kills``): Lightning starts the
second rank as a new interpreter. One two-process run a family serves every check of that family; the
one-process references, the one-process FSDP2 run (a process group of one) and the commands that read
the checkpoints run in the test's own process (``command_here``)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from train_cli import TEST_PRESETS, check, cli, command_here, copy_of_run_built_once, start_cli

pytestmark = pytest.mark.slow
STEPS = 20
CLIP = 0.5
ARGS = [
    TEST_PRESETS,
    f"trainer.max_steps={STEPS}",
    "trainer.val_every_n_steps=10",
    "checkpoint.every_n_steps=10",
    "trainer.limit_val_batches=2",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    f"trainer.gradient_clip_val={CLIP}",
    "optim.lr=3e-3",  # large enough that 20 steps move the loss: a wrong step shows
    "optim.warmup_steps=2",
    "sample.max_new_tokens=0",
    "logger=none",
    "test_after_fit=false",
]
# The classifier's and seq2seq's runs also check the metrics that must not depend on the number of
# processes: 33 validation and 35 test samples (uneven shards of 17 and 16, 18 and 17), read whole, and
# the test of the best checkpoint after fit. The validation shards make 3 and 2 batches of 8: under FSDP2
# every forward gathers each layer's weights from all processes, so the second process ends with a
# padding batch that it runs and scores nowhere (without it the first would wait until gloo's timeout).
ODD_SPLITS = ["data.num_val=33", "data.num_test=35", "trainer.limit_val_batches=1.0", "test_after_fit=true"]
# A learning rate at which 20 steps already make seq2seq decode text that shares characters with the
# references (chrF > 0).
DECODES = ["optim.lr=1e-2", "optim.warmup_steps=0", "optim.schedule=constant"]
# The token families (BERT's and seq2seq's losses average over masked or unpadded tokens, a number that
# differs by process); the ViT's plan on two ranks (a batch mean) is tests/models/test_parallel.py's.
FAMILIES = {
    "gpt": ["experiment=tiny_gpt", "data.seq_len=32"],
    "bert": ["experiment=tiny_bert", *ODD_SPLITS],
    "seq2seq": ["experiment=tiny_seq2seq", *ODD_SPLITS, *DECODES],
}
# What each family's val and test report (the gpt's: test_train_ddp.py, which compares whole runs)
METRIC_NAMES = {
    "bert": {"loss", "acc", "f1"},
    "seq2seq": {"loss", "ppl", "acc", "exact_match", "bleu", "chrf"},
}
FSDP2 = ["trainer=fsdp2_sim", "data.batch_size=8"]  # 2 processes x 8 = one process's 16


def series(run_dir: Path, key: str) -> dict[int, float]:
    """{step: value} of ``key`` in the run's metrics.jsonl (each step must appear once)."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if key in r]
    assert len(steps) == len(set(steps)), f"a step logged twice: {steps}"
    return {r["step"]: r[key] for r in records if key in r}


def assert_same_losses(run: Path, reference: Path, **tolerance: float) -> None:
    """``run`` logged a training loss at exactly ``reference``'s steps, each within ``tolerance``."""
    losses, expected = series(run, "train/loss"), series(reference, "train/loss")
    assert sorted(losses) == sorted(expected)
    for step in expected:
        assert losses[step] == pytest.approx(expected[step], **tolerance), f"{run.name}: step {step}"


def family_runs(family: str, built_once: Callable[..., Path]) -> tuple[Path, Path]:
    """(the FSDP2 run, the one-process run with the doubled batch, trained in this process) of
    ``family``, each built once per session; beside the FSDP2 run, ``console.txt``: what its ranks
    printed."""
    args = [*ARGS, *FAMILIES[family]]

    def fsdp2(cwd: Path) -> None:
        result = check(cli([*args, *FSDP2, "run_dir=run"], cwd, timeout=600))
        (cwd / "console.txt").write_text(result.stdout + result.stderr)

    sharded = built_once(f"fsdp2-{family}", fsdp2)
    return sharded / "run", single_run(family, built_once)


def single_run(family: str, built_once: Callable[..., Path]) -> Path:
    """The one-process run of ``family`` with the doubled batch, trained in this process once per session."""
    args = [*ARGS, *FAMILIES[family], "data.batch_size=16", "run_dir=run"]
    return built_once(f"fsdp2-single-{family}", lambda cwd: check(command_here(args, cwd))) / "run"


@pytest.mark.process_contract("ranks")
def test_every_family_trains_under_fsdp2_as_one_process_with_the_doubled_batch(
    built_once: Callable[..., Path], tmp_path: Path
) -> None:
    """Per step, the same losses and the same clipped norms (that of the global gradient, all shards);
    the checkpoint, gathered on rank 0, is one file of the one-process run's names and shapes; the
    classifier's and seq2seq's val and test metrics are one process's (``assert_one_process_metrics``).
    A resume on one process with the 2-process run's per-process batch is refused in one line, before
    its run directory (data.batch_size is per process). No rank prints Lightning's "Initializing
    distributed" line (train.log keeps rank 0's)."""
    import torch

    for family in FAMILIES:
        sharded, single = family_runs(family, built_once)
        console = (sharded.parent / "console.txt").read_text()
        assert "Initializing distributed" not in console, console
        assert "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2" in (sharded / "train.log").read_text()
        losses, expected = series(sharded, "train/loss"), series(single, "train/loss")
        assert sorted(losses) == sorted(expected) == list(range(1, STEPS + 1)), family
        for step in expected:
            assert losses[step] == pytest.approx(expected[step], abs=1e-5), f"{family}: step {step}"
        assert abs(expected[STEPS] - expected[1]) > 1e-3, family  # the steps moved the weights
        norms, expected_norms = series(sharded, "train/grad_norm"), series(single, "train/grad_norm")
        assert max(expected_norms.values()) > CLIP, family  # clipping changed some steps
        for step in expected_norms:
            assert norms[step] == pytest.approx(expected_norms[step], rel=1e-4), f"{family}: step {step}"
        ours, theirs = (
            torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
            for run in (sharded, single)
        )
        assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in theirs.items()}, family
        if family in METRIC_NAMES:
            assert_one_process_metrics(sharded, family, tmp_path / family)

    last = family_runs("gpt", built_once)[0] / "checkpoints" / "last.ckpt"
    args = [*ARGS, *FAMILIES["gpt"], "data.batch_size=8", f"ckpt_path={last}", "run_dir=new"]
    refused = command_here(args, tmp_path)
    assert (refused.returncode, refused.stderr.strip()) == (
        2,
        f"error: data.batch_size=8: the checkpoint {last} was trained with data.batch_size=8 on 2 "
        "data-parallel process(es), 16 samples a step: resume with data.batch_size times those "
        "processes (1 here) equal to 16",
    )
    assert not (tmp_path / "new").exists()


def assert_one_process_metrics(run: Path, family: str, cwd: Path) -> None:
    """The val and test metrics that ``run``'s two processes logged on the odd splits are, to rel 1e-6,
    those of ``attnlab-eval`` (in this process) of the same weights: the checkpoint that the test after
    fit read, the best, and the validation of its step. They are compared with an evaluation rather
    than with the one-process run, as a token-mean loss (seq2seq's) would train differently on two
    data-parallel processes under DDP. What makes them one process's does not depend on the strategy:
    the data module gives rank r of W the samples r, r + W, ... of a split (W and r Lightning's
    data-parallel ones, under DDP as under FSDP2) and torchmetrics sums each metric's states over the
    processes before computing it; so FSDP2's runs check DDP's too (the causal LM's under DDP, whole
    runs compared: test_train_ddp.py)."""
    tested = json.loads((run / "test_metrics.json").read_text())
    ckpt = Path(tested["ckpt_path"])
    step = int(ckpt.stem.removeprefix("best-step"))  # a validation's: 10 or 20
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    (validated,) = [r for r in records if r["step"] == step and "val/loss" in r]
    two = {"val": {k: v for k, v in validated.items() if k.startswith("val/")}, "test": tested["metrics"]}
    cwd.mkdir()
    for split, metrics in two.items():
        out = cwd / split
        evaluated = command_here(
            [f"ckpt_path={ckpt}", f"split={split}", f"hydra.run.dir={out}"], cwd, command="eval"
        )
        assert evaluated.returncode == 0, evaluated.stderr[-2000:]
        one = json.loads((out / "metrics.json").read_text())["metrics"]
        assert set(metrics) == {f"{split}/{name}" for name in METRIC_NAMES[family]}, (family, split)
        assert metrics == pytest.approx(one, rel=1e-6, abs=0), (family, split)
    if family == "seq2seq":  # decoded text to score, not two empty corpora:
        assert two["val"]["val/chrf"] > 0 < two["test"]["test/chrf"]


def test_layers_compiled_one_by_one_train_sharded_like_eager(
    built_once: Callable[..., Path], tmp_path: Path
) -> None:
    """FSDP2 over a process group of one, in this process, each sharded layer compiled on its own
    (``compile=block``: inductor on the CPU): per step, the eager one-process run's losses and clipped
    norms. The layers are compiled before they are sharded (``attnlab.run.prepared.speed_up``, then the
    task's ``configure_model``), whatever the number of processes; two processes sharding the layers
    is the test above."""
    args = [*ARGS, *FAMILIES["bert"], "trainer=fsdp2_sim", "trainer.devices=1", "data.batch_size=16"]
    args += ["compile=block", "trainer.limit_val_batches=1", "test_after_fit=false", "run_dir=run"]
    check(command_here(args, tmp_path))
    run, single = tmp_path / "run", single_run("bert", built_once)
    assert "MEMBER: 1/1" in (run / "train.log").read_text()  # FSDP2 over a group of one
    assert_same_losses(run, single, abs=1e-5)
    norms, expected_norms = series(run, "train/grad_norm"), series(single, "train/grad_norm")
    assert max(expected_norms.values()) > CLIP  # clipping changed some steps
    for step in expected_norms:
        assert norms[step] == pytest.approx(expected_norms[step], rel=1e-4), f"step {step}"


def kill_after_first_checkpoint(args: list[str], cwd: Path) -> None:
    """Start ``attnlab-train args`` (both processes in one new session) and SIGKILL them all once the
    first last.ckpt exists."""
    last = cwd / "run" / "checkpoints" / "last.ckpt"
    start_cli(args, cwd).kill_when(last.exists)


@pytest.fixture(scope="module")
def gpt_runs(built_once: Callable[..., Path]) -> tuple[Path, Path]:
    """``family_runs`` of the gpt family: the reference of the checks that do not depend on the family
    (resuming, checkpoints, the engines on the same shared blocks). Only for tests marked ``ranks`` or
    ``kills``: the first to ask starts the FSDP2 run."""
    return family_runs("gpt", built_once)


@pytest.mark.process_contract("kills")
def test_a_killed_run_resumes_to_the_uninterrupted_losses(
    gpt_runs: tuple[Path, Path], tmp_path: Path
) -> None:
    """Killed (kill -9 of both processes) after its first one-file checkpoint, ``ckpt_path=last``: every
    step's loss is the uninterrupted run's. This run recomputes each sharded layer whole in the backward
    pass (``trainer.activation_checkpointing=full``), which keeps the losses (the reference runs without;
    the selective mode on two processes is test_train_tp.py's, under sequence parallel)."""
    sharded, _ = gpt_runs
    args = [*ARGS, *FAMILIES["gpt"], *FSDP2, "trainer.activation_checkpointing=full", "run_dir=run"]
    kill_after_first_checkpoint(args, tmp_path)
    check(cli([*args, "ckpt_path=last"], tmp_path, timeout=600))
    resumed, expected = series(tmp_path / "run", "train/loss"), series(sharded, "train/loss")
    assert sorted(resumed) == list(range(1, STEPS + 1))
    for step in expected:
        assert resumed[step] == pytest.approx(expected[step], abs=1e-6), f"step {step}"


def copy_killed_sharded_run(built_once: Callable[..., Path], cwd: Path) -> None:
    """Into ``cwd / "run"``: a copy of the 2-process FSDP2 gpt run with sharded checkpoints, killed after
    its first (``kill_after_first_checkpoint``), which is run once for the two resumes (on two processes
    and on one); its ``last.ckpt`` is a relative link, so the copy is a run of its own."""
    args = [*ARGS, *FAMILIES["gpt"], *FSDP2, "checkpoint.sharded=true", "run_dir=run"]
    kill = functools.partial(kill_after_first_checkpoint, args)
    copy_of_run_built_once(built_once, "fsdp2-killed-sharded", kill, cwd)


@pytest.mark.process_contract("kills")
def test_a_sharded_checkpoint_resumes_exactly_on_two_processes_or_one_and_consolidates(
    gpt_runs: tuple[Path, Path], built_once: Callable[..., Path], tmp_path: Path
) -> None:
    """Each process writes its shards (torch.distributed.checkpoint); a kill -9 after the first one,
    ``ckpt_path=last``: the uninterrupted (one-file) run's losses; consolidated, its weights, which
    attnlab-eval and attnlab-export read (the sharded checkpoint itself refused in one line). Resumed
    by one process without sharding and the doubled batch (every shard read there, no process group):
    the same weights and optimizer state, so the next steps' losses are the 2-process continuation's."""
    import torch

    from attnlab.cli.consolidate import main as consolidate

    sharded, _ = gpt_runs
    two, one = tmp_path / "two", tmp_path / "one"
    for cwd in (two, one):
        cwd.mkdir()
        copy_killed_sharded_run(built_once, cwd)
    args = [*ARGS, *FAMILIES["gpt"], "run_dir=run"]
    check(command_here([*args, "data.batch_size=16", "ckpt_path=last"], one))
    for step, (loss, expected) in continuation(one / "run", sharded).items():
        assert loss == pytest.approx(expected, abs=1e-5), f"one process: step {step}"

    check(cli([*args, *FSDP2, "checkpoint.sharded=true", "ckpt_path=last"], two, timeout=600))
    resumed, expected = series(two / "run", "train/loss"), series(sharded, "train/loss")
    assert sorted(resumed) == list(range(1, STEPS + 1))
    for step in expected:
        assert resumed[step] == pytest.approx(expected[step], abs=1e-6), f"step {step}"

    last = two / "run" / "checkpoints" / "last.ckpt"
    assert last.is_symlink() and len(list(last.glob("__*_0.distcp"))) == 2  # one file of shards a process
    refused = command_here([f"ckpt_path={last}"], two, command="eval")
    assert (refused.returncode, refused.stderr.strip()) == (
        2,
        f"error: ckpt_path={last}: is a sharded checkpoint (trainer.strategy=fsdp2 checkpoint.sharded=true): "
        f"write it as one file first with: attnlab-consolidate {last}",
    )
    consolidate([str(last)])
    whole = torch.load(last.with_name("whole-last.ckpt"), map_location="cpu", weights_only=True)
    reference = torch.load(sharded / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert whole["global_step"] == reference["global_step"] == STEPS
    assert whole["state_dict"].keys() == reference["state_dict"].keys()
    for name, value in reference["state_dict"].items():
        torch.testing.assert_close(whole["state_dict"][name], value, atol=1e-6, rtol=0, msg=name)
    evaluated = command_here(
        [f"ckpt_path={last.with_name('whole-last.ckpt')}", "logger=none"], two, command="eval"
    )
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert_exports_with_its_logits(last.with_name("whole-last.ckpt"), two / "hf")


def assert_exports_with_its_logits(ckpt: Path, out: Path) -> None:
    """``attnlab-export`` of a consolidated checkpoint: transformers loads it and computes its logits."""
    import torch
    import transformers

    from attnlab.checkpoint import load_checkpoint

    exported = command_here([f"ckpt_path={ckpt}", f"out={out}"], out.parent, command="export")
    assert exported.returncode == 0, exported.stderr[-2000:]
    ours = load_checkpoint(ckpt).model.eval()
    theirs = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.randint(0, ours.cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (theirs(ids).logits - ours(ids)).abs().max().item() < 1e-5


def continuation(run: Path, reference: Path) -> dict[int, tuple[float, float]]:
    """{step: (loss, reference's loss)} of every step ``run`` trained after its resume (the steps past
    its checkpoint at step 10), which must be the reference's last steps."""
    losses, expected = series(run, "train/loss"), series(reference, "train/loss")
    resumed = {step: loss for step, loss in losses.items() if step > 10}
    assert sorted(resumed) == list(range(11, STEPS + 1))
    return {step: (loss, expected[step]) for step, loss in resumed.items()}


@pytest.mark.process_contract("kills")
def test_one_process_sharded_checkpoint_resumes_in_two(gpt_runs: tuple[Path, Path], tmp_path: Path) -> None:
    """Saved by one FSDP2 process, resumed by two, each loading the halves its shards cover
    (torch.distributed.checkpoint reshards): the uninterrupted 2-process run's losses."""
    sharded, _ = gpt_runs
    args = [*ARGS, *FAMILIES["gpt"], "trainer=fsdp2_sim", "checkpoint.sharded=true", "run_dir=run"]
    kill_after_first_checkpoint([*args, "trainer.devices=1", "data.batch_size=16"], tmp_path)
    check(cli([*args, "data.batch_size=8", "ckpt_path=last"], tmp_path, timeout=600))
    for step, (loss, expected) in continuation(tmp_path / "run", sharded).items():
        assert loss == pytest.approx(expected, abs=1e-5), f"step {step}"


def test_float8_emulated_trains_as_float32_does(built_once: Callable[..., Path], tmp_path: Path) -> None:
    """torchao's float8 training, its rounding emulated on the CPU: every step's loss within 2% of the
    float32 run's, in this process. Under FSDP2 (the shards all-gathered as float8, the scales per
    process) the same holds for 200 steps of the model on two ranks: tests/models/test_parallel.py."""
    args = [*ARGS, *FAMILIES["gpt"], "trainer.float8=emulated", "data.batch_size=16", "run_dir=one"]
    check(command_here(args, tmp_path))
    assert_same_losses(tmp_path / "one", single_run("gpt", built_once), rel=0.02)
