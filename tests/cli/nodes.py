"""Two torchrun "nodes" on this machine, each an agent (``torchrun``) with one worker, as the tests of
node failures start them; and the kill of a whole node.

torchrun starts its workers in sessions of their own, so killing an agent's process group leaves its
workers running: a dead node is the agent and all its descendants, found in ``/proc`` (Linux).

The agents and their workers are real interpreters (``torchrun``, then ``python -u -m attnlab.train``),
started through ``tests/processes.py``: only in a test marked ``process_contract("ranks")``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from train_cli import cli_env

import processes

TORCHRUN = Path(sys.executable).with_name("torchrun")
DDP = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=1", "trainer.num_nodes=2"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def static_rendezvous(port: int) -> list[str]:
    """torchrun's arguments of a fixed pair of nodes whose rank 0 listens on ``port``."""
    return ["--master-addr", "127.0.0.1", "--master-port", str(port)]


def elastic_rendezvous(port: int, restarts: int) -> list[str]:
    """torchrun's arguments of an elastic pair (c10d rendezvous on ``port``) restarted up to ``restarts`` times."""
    return [
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        "attnlab-test",
        "--max-restarts",
        str(restarts),
        "--monitor-interval",
        "0.5",
    ]


class Node:
    """``torchrun --nnodes 2 --node-rank <rank> --nproc-per-node 1 <rendezvous> -m attnlab.train <args>``,
    its output in ``<cwd>/node<rank>.log``."""

    def __init__(self, rank: int, rendezvous: list[str], args: list[str], cwd: Path) -> None:
        self.log = cwd / f"node{rank}.log"
        command = [str(TORCHRUN), "--nnodes", "2", "--node-rank", str(rank), "--nproc-per-node", "1"]
        env = cli_env(cwd)
        # torch's agents share one store across rendezvous rounds by default; a restarted round can then
        # read the dead round's addresses (pytorch/pytorch#135712): a fresh store per round.
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        argv = [*command, *rendezvous, "-m", "attnlab.train", *args]
        self.agent = processes.start(argv, cwd, env, log=self.log).process

    def workers(self) -> list[int]:
        """The agent's descendants (its workers and theirs), by process id."""
        found, todo = [], [self.agent.pid]
        while todo:
            children = self.children(todo.pop())
            found += children
            todo += children
        return found

    def children(self, pid: int) -> list[int]:
        """The children of ``pid`` in ``/proc``."""
        try:
            return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:  # gone meanwhile
            return []

    def kill(self) -> None:
        """SIGKILL to the agent and every descendant, as when the machine dies."""
        for pid in [self.agent.pid, *self.workers()]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.agent.wait()

    def wait(self, timeout: float) -> int | None:
        """The agent's exit status, or None if it is still running after ``timeout`` seconds."""
        try:
            return self.agent.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def output(self) -> str:
        return self.log.read_bytes().decode(errors="replace")[-4000:]


def wait_for(path: Path, nodes: list[Node], timeout: float = 300) -> None:
    """Until ``path`` exists (AssertionError if a node ends first or ``timeout`` passes)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        ended = [n for n in nodes if n.agent.poll() is not None]
        assert not ended and time.monotonic() < deadline, f"no {path}:\n" + "\n".join(
            n.output() for n in nodes
        )
        time.sleep(0.1)
