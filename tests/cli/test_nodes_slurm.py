"""SLURM's warning signal before a requeue (SIGUSR1, ``sbatch --signal=USR1@<s>``), tried without SLURM:
a run whose environment says it is SLURM job 4242 stops at the end of a step with ``last.ckpt`` of that
step, requeues the job with ``scontrol`` (a stand-in on PATH that records its arguments), and the
requeued job, the same command with ``ckpt_path=auto``, continues from that checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from train_cli import TEXT, TINY, check, cli_env

import processes

pytestmark = pytest.mark.slow
SLURM = {  # what srun sets for one task of job 4242
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NAME": "attnlab",
    "SLURM_NTASKS": "1",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NODELIST": "localhost",
}
SIGNAL = "+callbacks.signal={_target_: fault_injection.SignalAtStep, step: 2, signal: SIGUSR1}"
ARGS = [
    *TINY,
    *TEXT,
    "model=gpt-tiny",
    "logger=csv",
    "sample.max_new_tokens=0",
    "run_dir=run",
    "ckpt_path=auto",
]


def slurm_job(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``python -m attnlab.train *args`` as a task of SLURM job 4242, with a stand-in ``scontrol``
    (a new interpreter with that environment)."""
    bin_dir = cwd / "bin"
    bin_dir.mkdir(exist_ok=True)
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {cwd / "scontrol.calls"}\n')
    scontrol.chmod(0o755)
    env = {**cli_env(cwd), **SLURM, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return processes.run(processes.python_module("attnlab.train", args), cwd, env, timeout=300)


@pytest.mark.process_contract("signals")
def test_the_requeue_signal_saves_the_step_requeues_and_the_job_continues(tmp_path: Path) -> None:
    stopped = slurm_job([*ARGS, SIGNAL], tmp_path)
    assert stopped.returncode == 128 + signal.SIGUSR1, stopped.stderr[-3000:]
    assert "SIGUSR1 at step 2" in stopped.stderr
    assert "requeued SLURM job 4242" in stopped.stderr
    assert (tmp_path / "scontrol.calls").read_text().split() == ["requeue", "4242"]
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 2
    assert not list((tmp_path / "run").glob("hpc_ckpt_*.ckpt"))  # Lightning's mid-step requeue checkpoint

    check(slurm_job(ARGS, tmp_path))  # the requeued job: the same command
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 6
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "train/loss" in r] == [1, 2, 3, 4, 5, 6]  # each step once
    assert (tmp_path / "run" / "csv" / "resumed-1").is_dir()
