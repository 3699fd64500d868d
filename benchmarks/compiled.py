"""``torch.compile`` on vs off: the attnlab decoder's training step, eager vs compiled (inductor).

Compilation runs in a child process with a time limit (it can take minutes on 2 cores, and a
failing compiler toolchain must not take the suite down); a timeout or error becomes a note.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time

import torch

from benchmarks import models
from benchmarks.common import ROOT, Row, Settings, interleaved, ratio_row, speedup
from benchmarks.train_step import lm_loss, train_step

SECTION = "attention"


def measure(size_name: str, warmup: int, repeats: int) -> dict:
    """Eager and compiled training steps of the same model, interleaved; also the compile time."""
    size = {s.name: s for s in (models.GPT_4L, models.GPT_TINY)}[size_name]
    eager = models.attnlab_like(models.gpt2_config(size), "GPT2LMHeadModel")
    compiled = copy.deepcopy(eager)
    compiled.compile()
    ids, labels = models.gpt_batch(size)
    steps = {
        "eager": train_step(eager, lm_loss(eager, ids, labels)),
        "compiled": train_step(compiled, lm_loss(compiled, ids, labels)),
    }
    start = time.perf_counter()
    steps["compiled"]()  # compiles forward and backward
    compile_s = time.perf_counter() - start
    times = interleaved(steps, repeats=repeats, warmup=warmup)
    return {"times": times, "compile_s": compile_s, "config": str(size)}


def run(settings: Settings) -> list[Row]:
    if settings.tiny:
        settings.notes.append("torch.compile: not run at the smoke-test size")
        return []
    size = models.GPT_4L
    warmup, repeats, limit = settings.pick(full=(3, 20, 480), quick=(2, 6, 300), tiny=(0, 0, 0))
    print(f"[attention] torch.compile on {size.name} (limit {limit} s)", flush=True)
    args = [
        sys.executable,
        "-m",
        "benchmarks.compiled",
        size.name,
        str(warmup),
        str(repeats),
        str(settings.threads),
    ]
    try:
        done = subprocess.run(
            args,
            cwd=ROOT,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            capture_output=True,
            text=True,
            timeout=limit,
        )
    except subprocess.TimeoutExpired:
        settings.notes.append(f"torch.compile: skipped, compiling took longer than {limit} s on this machine")
        return []
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1][:200]
        settings.notes.append(f"torch.compile: skipped, compilation failed ({last})")
        return []
    result = json.loads(done.stdout.strip().splitlines()[-1])
    times = result["times"]
    ms = {k: 1e3 * sorted(v)[len(v) // 2] for k, v in times.items()}
    detail = (
        f"eager {ms['eager']:.1f} ms, compiled {ms['compiled']:.1f} ms per step; "
        f"first compiled step (compilation) {result['compile_s']:.0f} s"
    )
    return [
        ratio_row(
            SECTION,
            "train step, compiled ÷ eager speed (torch.compile on vs off)",
            f"{result['config']} ({size.name}), attnlab",
            speedup(times, "compiled", "eager"),
            detail,
        )
    ]


if __name__ == "__main__":
    name, warm, reps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    print(json.dumps(measure(name, warm, reps)))
