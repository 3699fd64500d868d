"""SLURM requeue: the scheduler's warning signal ends the run as SIGTERM does (at the end of a step, with
``last.ckpt`` of that step), then rank 0 requeues the job, which continues with ``ckpt_path=auto``.

Lightning's ``SLURMEnvironment`` still gives the ranks and addresses, with its own requeue handler off
(``auto_requeue=False``): that handler writes an ``hpc_ckpt`` from inside the signal handler, in the
middle of a step (under DDP between two collectives), which a resume could not continue exactly.
"""

from __future__ import annotations

import os
import re
import subprocess

from lightning_fabric.plugins.environments import SLURMEnvironment

from attnlab.training.signals import REQUEUE_SIGNAL

__all__ = ["REQUEUE_SIGNAL", "requeue_job", "slurm_job_id", "slurm_plugins"]


def slurm_plugins() -> list[SLURMEnvironment]:
    """Lightning's SLURM environment without its mid-step requeue handler, when running under SLURM."""
    return [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []


def slurm_job_id() -> str | None:
    """The id ``scontrol requeue`` takes (``<array job>_<task>`` for a job of an array), or None outside SLURM."""
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array_job is not None:
        return f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID")


def requeue_job() -> str:
    """Requeue this SLURM job (``scontrol requeue``); one line saying what happened."""
    job = slurm_job_id()
    if job is None or not re.fullmatch(r"[0-9_]+", job):
        return f"not requeued: not a SLURM job (SLURM_JOB_ID={job})"
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"requeueing SLURM job {job} failed: {err}"
    if done.returncode != 0:
        return f"requeueing SLURM job {job} failed: {done.stderr.strip() or done.returncode}"
    return f"requeued SLURM job {job}: it continues from last.ckpt with ckpt_path=auto"
