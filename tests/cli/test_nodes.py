"""Two torchrun "nodes" on this machine (one process each, gloo): they train as one process with the
doubled batch and write one run; a dead or frozen node ends the other within ``trainer.timeout``; and
torchrun's elastic restart continues from ``last.ckpt`` with the losses of an uninterrupted run.

Each test is a process contract (``ranks``: torchrun's agents and workers are real interpreters)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from nodes import DDP, Node, elastic_rendezvous, free_port, static_rendezvous, wait_for
from train_cli import TEXT, TINY, train_in_process, wandb_run

pytestmark = pytest.mark.slow
TIMEOUT_S = 20  # trainer.timeout of these runs
# trainer.timeout of the runs whose node 1 dies: the frozen case waits all of it (idle) before node 0 learns
# of the loss; long enough for any step, checkpoint or validation of these tiny runs on a busy machine
FAULT_TIMEOUT_S = 8
ARGS = [
    *TINY,
    *TEXT,
    "model=gpt-tiny",
    "trainer.max_steps=8",
    "trainer.val_every_n_steps=4",
    "checkpoint.every_n_steps=2",
    "sample.max_new_tokens=0",
]
NODES = [*ARGS, *DDP, "trainer.precision=32", f"trainer.timeout={TIMEOUT_S}", "data.batch_size=8"]


def losses(run_dir: Path, key: str = "train/loss") -> dict[int, float]:
    """{step: value} of ``key`` in the run's metrics.jsonl (each step must appear once)."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if key in r]
    assert len(steps) == len(set(steps)), f"a step logged twice: {steps}"
    return {r["step"]: r[key] for r in records if key in r}


@pytest.fixture
def started() -> Iterator[list[Node]]:
    """The nodes a test starts; every process of them is killed at the end, whatever happened."""
    nodes: list[Node] = []
    yield nodes
    for node in nodes:
        node.kill()


def run_nodes(nodes: list[Node], rendezvous: list[str], args: list[str], cwd: Path) -> list[int | None]:
    nodes += [Node(rank, rendezvous, args, cwd) for rank in (0, 1)]
    return [node.wait(timeout=600) for node in nodes]


@pytest.fixture(scope="module")
def uninterrupted(built_once: Callable[..., Path]) -> Path:
    """The run directory of two nodes started by hand with a static rendezvous (a fixed master address and port); built once
    for the whole session, however many pytest-xdist workers run this module's tests."""
    return built_once("two-nodes", run_two_nodes) / "run"


def run_two_nodes(cwd: Path) -> None:
    """Two nodes training ``NODES`` into ``cwd / "run"``; both must succeed."""
    nodes: list[Node] = []
    try:
        codes = run_nodes(nodes, static_rendezvous(free_port()), [*NODES, "run_dir=run"], cwd)
        assert codes == [0, 0], "\n".join(n.output() for n in nodes)
    finally:
        for node in nodes:
            node.kill()


@pytest.mark.process_contract("ranks")
def test_two_nodes_write_one_run_and_train_as_one_process_with_the_doubled_batch(
    uninterrupted: Path, tmp_path: Path
) -> None:
    made = [p.name for p in uninterrupted.parent.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert made == ["run"]  # no outputs/ of a rank that chose its own directory
    assert sorted(p.name for p in uninterrupted.glob("*.log")) == ["train.log", "train_rank1.log"]
    assert len(list((uninterrupted / "wandb").glob("offline-run-*"))) == 1
    assert wandb_run(uninterrupted)["run_id"]
    single = tmp_path / "single"
    train_in_process([*ARGS, "data.batch_size=16", "logger=csv"], single)  # the reference: one process
    assert sorted(losses(uninterrupted)) == list(range(1, 9))
    assert losses(uninterrupted) == pytest.approx(losses(single), abs=1e-5)
    assert losses(uninterrupted, "val/loss") == pytest.approx(losses(single, "val/loss"), abs=1e-5)


@pytest.mark.process_contract("ranks")
def test_a_dead_or_frozen_node_ends_the_other_within_the_timeout(tmp_path: Path, started: list[Node]) -> None:
    """SIGKILL of node 1 (its agent and worker: the machine is gone) or SIGSTOP (it hangs, its
    connections stay open): node 0 exits non-zero within trainer.timeout + 30 s, with one line that
    says a peer was lost and how to continue, in place of gloo's error (also in torchrun's report)."""
    for fault in ("killed", "frozen"):
        cwd = tmp_path / fault
        cwd.mkdir()
        pair: list[Node] = []
        try:
            assert_the_survivor_ends(fault, cwd, pair)
        finally:
            started += pair


def assert_the_survivor_ends(fault: str, tmp_path: Path, started: list[Node]) -> None:
    """Two nodes training into ``tmp_path / "run"``, node 1 then ``fault`` (killed or frozen): node 0
    ends within the timeout, in one line (``started`` gets the nodes, for the fixture to kill)."""
    args = [
        *NODES,
        f"trainer.timeout={FAULT_TIMEOUT_S}",
        "trainer.max_steps=100000",
        "logger=csv",
        "run_dir=run",
    ]
    rendezvous = static_rendezvous(free_port())
    started += [Node(rank, rendezvous, args, tmp_path) for rank in (0, 1)]
    survivor, victim = started
    wait_for(tmp_path / "run" / "checkpoints" / "last.ckpt", started)  # both are training
    if fault == "killed":
        victim.kill()
    else:
        for pid in [victim.agent.pid, *victim.workers()]:
            os.kill(pid, signal.SIGSTOP)
    begin = time.monotonic()
    code = survivor.wait(timeout=FAULT_TIMEOUT_S + 30)
    assert code is not None, f"node 0 still runs {FAULT_TIMEOUT_S + 30} s after node 1 was {fault}"
    assert code != 0
    print(f"node 1 {fault}: node 0 exited {code} after {time.monotonic() - begin:.1f} s")
    said = survivor.log.read_text(errors="replace")
    cause = (
        r"[^)]*(closed|reset) by peer"
        if fault == "killed"
        else rf"(Timed out waiting {FAULT_TIMEOUT_S * 1000}ms for (recv|send)|Application timeout caused pair closure)"
    )
    line = r"error: PeerLost: a process of this distributed run died or stopped answering \("
    assert re.search(line + cause, said), said[-3000:]  # gloo's words vary with where the peer was
    command = f"the same torchrun or srun command with run_dir={tmp_path / 'run'} ckpt_path=auto "
    assert command in said
    assert "traceback : PeerLost: " in said  # torchrun's report names it too
    assert "GLHF" not in said and "Traceback" not in said.split("error: PeerLost")[0]


@pytest.mark.process_contract("ranks")
def test_an_elastic_restart_continues_from_the_last_checkpoint(
    uninterrupted: Path, tmp_path: Path, started: list[Node]
) -> None:
    """torchrun --max-restarts 1 (c10d rendezvous): rank 1 dies before step 6; both nodes restart the
    same command, ckpt_path=auto resumes last.ckpt of step 4, and every step's loss is the
    uninterrupted run's."""
    marker = tmp_path / "killed-once"
    kill = (
        f"+callbacks.kill={{_target_: fault_injection.KillOnceAtStep, step: 5, rank: 1, marker: '{marker}'}}"
    )
    args = [*NODES, "logger=csv", "run_dir=run", "ckpt_path=auto", kill]
    codes = run_nodes(started, elastic_rendezvous(free_port(), restarts=1), args, tmp_path)
    assert codes == [0, 0], "\n".join(n.output() for n in started)
    run = tmp_path / "run"
    assert marker.exists()  # rank 1 was killed once
    log = (run / "train.log").read_text()
    assert f"Restoring states from the checkpoint path at {run / 'checkpoints' / 'last.ckpt'}" in log
    assert (run / "csv" / "resumed-1").is_dir()
    assert losses(run) == losses(uninterrupted)
    assert losses(run, "val/loss") == losses(uninterrupted, "val/loss")
