"""A run killed (SIGKILL) at any write, rename or removal of a checkpoint, the final step's best and
last checkpoints and ``test_metrics.json`` included, resumes to the uninterrupted run's result: the same
per-step losses, validations, best checkpoint and test metrics, and no temporary file left behind.

The write points are not guessed: an uninterrupted run records them (fault_injection.InjectFaults).
Each KIND of event (a write, rename or removal of a best or last checkpoint or of the test metrics) is
its own case: one run is killed at it and resumed in place. A kind recurs (last.ckpt is written at steps
2, 3 and 4); its latest occurrence is the case, as the most state is on disk then (an older best and
last.ckpt to keep), plus the first rename of last.ckpt, before which no checkpoint exists to resume
from: the rerun (``ckpt_path=auto``) starts afresh over the leftovers. Every write of step 3, saved at
the end of its batch (``last.ckpt.pending``, published once the step's row is written), is a case too.
Each resumed run's ``metrics.jsonl`` equals the uninterrupted run's line for line (but its clocks).

Each killed run is a process of its own (SIGKILL: no ``finally`` runs, what it left on disk is what a
crash leaves), forked from the preloaded fork server (``train_cli.killed_cli``: the imports paid once,
not in each of the 21 runs); the uninterrupted runs that record the events and every resume run in this
process (``command_here``; ``in_process.restored`` takes back what the recording callback replaced).
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from in_process import restored
from train_cli import TEXT, check, command_here, csv_series, killed_cli

pytestmark = pytest.mark.slow
STEPS = 4
ARGS = [
    *TEXT,
    "model=gpt-tiny",
    "model.dropout=0.1",
    "logger=csv",
    f"trainer.max_steps={STEPS}",
    "trainer.val_every_n_steps=2",
    "checkpoint.every_n_steps=3",  # step 3 is saved at the end of its batch, steps 2 and 4 after validation
    "checkpoint.save_top_k=1",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    "optim.warmup_steps=0",
    "optim.lr=3e-3",
    "data.batch_size=8",
    "sample.max_new_tokens=0",
]


# Each kind of checkpoint event, and which of its occurrences a case kills at.
CASES = {
    "write best": -1,
    "rename best": -1,
    "remove best": -1,
    "write last": -1,
    "rename last": -1,
    "rename last (the first, nothing to resume from)": 0,
    "write test_metrics": -1,
    "rename test_metrics": -1,
}


def kind(event: str) -> str:
    """``"7 rename best-step000004.ckpt.tmp best-step000004.ckpt"`` -> ``"rename best"``."""
    _, operation, name, *_ = event.split(" ")
    return f"{operation} {'best' if name.startswith('best-') else name.split('.')[0]}"


def faults(record: Path, kill_at: int = -1, after: bool = False) -> str:
    settings = f"record:'{record}',kill_at:{kill_at},after:{str(after).lower()}"
    return f"+callbacks.faults={{_target_:fault_injection.InjectFaults,{settings}}}"


def newest_csv(run_dir: Path) -> Path:
    resumed = sorted((run_dir / "csv").glob("resumed-*"), key=lambda p: int(p.name.split("-")[1]))
    return resumed[-1] if resumed else run_dir / "csv"


def saved_test_metrics(run_dir: Path) -> dict:
    saved = json.loads((run_dir / "test_metrics.json").read_text())
    return {"ckpt": Path(saved["ckpt_path"]).name, **saved["metrics"]}


def train_here(args: list[str], cwd: Path) -> None:
    """attnlab-train ``args`` in this process, in ``cwd``; it must succeed."""
    with restored():
        check(command_here(args, cwd))


@pytest.fixture(scope="module")
def uninterrupted(built_once: Callable[..., Path]) -> tuple[Path, list[str]]:
    """The run that is never killed, in this process, and the checkpoint events it recorded."""
    cwd = built_once(
        "kill-safety", lambda cwd: train_here([*ARGS, "run_dir=full", faults(cwd / "events.txt")], cwd)
    )
    return cwd / "full", (cwd / "events.txt").read_text().splitlines()


def test_every_write_is_recorded(uninterrupted: tuple[Path, list[str]]) -> None:
    """The events of the final step are among them: its best and last checkpoints, the test metrics."""
    _, events = uninterrupted
    assert f"write best-step{STEPS:06d}.ckpt.tmp" in [e.split(" ", 1)[1] for e in events], events
    assert events[-1].split(" ", 1)[1] == "rename test_metrics.json.tmp test_metrics.json", events
    assert any(e.endswith("rename last.ckpt.tmp last.ckpt") for e in events[-4:]), events
    assert {kind(e) for e in events} == {case.split(" (")[0] for case in CASES}, events  # a new kind: add it


def metrics_rows(run_dir: Path) -> list[dict]:
    """``metrics.jsonl`` without what a clock measures (the time, the throughput)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k != "time_s" and not k.endswith("_per_s")} for row in rows]


def kill_and_resume(full: Path, k: int, event: str, after: bool = False, extra: tuple[str, ...] = ()) -> None:
    """Kill a run at its k-th checkpoint event (or right ``after`` it), resume it in place, compare it
    with the full run."""
    cwd, run_dir = (
        full.parent,
        full.parent / f"killed-{k}{'-after' if after else ''}{'-sync' if extra else ''}",
    )
    args = [*ARGS, *extra]
    killed = killed_cli([*args, f"run_dir={run_dir.name}", faults(cwd / f"events-{k}.txt", k, after)], cwd)
    assert killed.returncode == -signal.SIGKILL, f"{event}: exit {killed.returncode}\n{killed.stderr}"
    last = run_dir / "checkpoints" / "last.ckpt"
    resume_step = torch.load(last, weights_only=True)["global_step"] if last.exists() else 0
    train_here([*args, f"run_dir={run_dir.name}", "ckpt_path=auto"], cwd)

    where = f"killed {'after' if after else 'at'} {event}, resumed from step {resume_step}"
    loss, val = csv_series(newest_csv(run_dir), "train/loss"), csv_series(newest_csv(run_dir), "val/loss")
    full_loss, full_val = csv_series(full, "train/loss"), csv_series(full, "val/loss")
    assert sorted(loss) == list(range(resume_step, STEPS)), where
    assert loss == {s: full_loss[s] for s in loss}, where  # bit for bit
    assert val == {s: v for s, v in full_val.items() if s > resume_step}, where
    assert saved_test_metrics(run_dir) == saved_test_metrics(full), where
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert checkpoints == sorted(p.name for p in (full / "checkpoints").iterdir()), where
    assert not list(run_dir.rglob("*.tmp")) and not list(run_dir.rglob("*.pending")), where
    assert metrics_rows(run_dir) == metrics_rows(full), where


@pytest.mark.process_contract("kills")
def test_a_kill_at_any_kind_of_write_resumes_to_the_same_result(
    uninterrupted: tuple[Path, list[str]],
) -> None:
    """Each case of CASES in turn (a killed process each); a failure names its event."""
    full, events = uninterrupted
    for case, occurrence in CASES.items():
        of_kind = [k for k, event in enumerate(events) if kind(event) == case.split(" (")[0]]
        k = of_kind[occurrence]
        kill_and_resume(full, k, events[k])


@pytest.mark.process_contract("kills")
def test_a_kill_at_every_write_of_a_step_saved_at_its_end_resumes_to_the_same_result(
    uninterrupted: tuple[Path, list[str]],
) -> None:
    """Step 3 is saved when its batch ends, before Lightning writes its row: written as
    ``last.ckpt.pending`` and published at the next step. A kill at each of its writes, and right after
    each, loses no row (published at once, a kill right after left the row unwritten for good). The
    writes are synchronous here (``checkpoint.async_save=false``), so that the rename happens when the
    step ends, not whenever the background writer gets to it."""
    full, events = uninterrupted
    of_step = [k for k, event in enumerate(events) if ".pending" in event]
    assert [events[k].split(" ", 1)[1] for k in of_step] == [
        "write last.ckpt.pending.tmp",
        "rename last.ckpt.pending.tmp last.ckpt.pending",
        "rename last.ckpt.pending last.ckpt",
    ], events
    synchronous = ("checkpoint.async_save=false",)
    for k in of_step:
        kill_and_resume(full, k, events[k], extra=synchronous)
        if "rename" in events[k]:
            kill_and_resume(full, k, events[k], after=True, extra=synchronous)


FSDP2 = ["trainer=fsdp2_sim", "trainer.devices=1", "checkpoint.sharded=true"]  # one process, sharded


@pytest.fixture(scope="module")
def uninterrupted_fsdp2(built_once: Callable[..., Path]) -> tuple[Path, list[str]]:
    """The sharded run that is never killed, in this process, and the events it recorded."""
    cwd = built_once(
        "kill-safety-fsdp2",
        lambda cwd: train_here([*ARGS, *FSDP2, "run_dir=full", faults(cwd / "events.txt")], cwd),
    )
    return cwd / "full", (cwd / "events.txt").read_text().splitlines()


@pytest.mark.process_contract("kills")
def test_a_kill_at_every_write_of_a_sharded_step_saved_at_its_end_loses_no_row(
    uninterrupted_fsdp2: tuple[Path, list[str]],
) -> None:
    """The same under FSDP2 with sharded checkpoints: step 3's shards are published as
    ``last.ckpt.pending`` (a link to their version), which becomes ``last.ckpt`` at the next step."""
    full, events = uninterrupted_fsdp2
    of_step = [k for k, event in enumerate(events) if ".pending" in event]
    assert [events[k].split(" ", 1)[1] for k in of_step] == [
        "remove last.ckpt.pending.tmp",  # a staging folder a kill left (none here)
        "remove last.ckpt.pending.link.tmp",
        "rename last.ckpt.pending.link.tmp last.ckpt.pending",
        "rename last.ckpt.pending last.ckpt",
    ], events
    cwd = full.parent
    for k, after in [(k, after) for k in of_step for after in (False, True)]:
        run_dir = cwd / f"killed-{k}{'-after' if after else ''}"
        fault = faults(cwd / f"events-{k}-{after}.txt", k, after)
        killed = killed_cli([*ARGS, *FSDP2, f"run_dir={run_dir.name}", fault], cwd)
        assert killed.returncode == -signal.SIGKILL, f"{events[k]}: exit {killed.returncode}\n{killed.stderr}"
        train_here([*ARGS, *FSDP2, f"run_dir={run_dir.name}", "ckpt_path=auto"], cwd)
        assert metrics_rows(run_dir) == metrics_rows(full), events[k]
        assert saved_test_metrics(run_dir) == saved_test_metrics(full), events[k]
        leftovers = [p for p in (run_dir / "checkpoints").iterdir() if p.name.endswith((".tmp", ".pending"))]
        assert not leftovers, events[k]
