"""FSDP2 on one device trains, clips and resumes exactly: ``python -m benchmarks.gpu_fsdp2 [--device cpu]``.

Three ``attnlab-train trainer=fsdp2`` runs of the default GPT on the embedded corpus, deterministic,
with gradient clipping: 40 steps straight through; 20 steps; then the second resumed from its
``last.ckpt`` to 40 (the schedule's length fixed at 40 by ``optim.max_steps``, so both see the same
rates). Printed: the largest difference of the logged training loss and gradient norm over steps 21-40
between the straight and the resumed run (0 when the resume is exact) and each run's wall time.
On a GPU it runs with ``trainer=fsdp2 trainer.devices=1 trainer.deterministic=true``; ``--device cpu``
runs the same on one CPU process (gloo), for the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEPS = 40


def train(run_dir: Path, device: str, steps: int, extra: list[str], timeout: float) -> float:
    """One attnlab-train run into ``run_dir``; its wall time in seconds."""
    args = [
        "trainer=fsdp2",
        "trainer.devices=1",
        f"trainer.accelerator={'gpu' if device == 'cuda' else 'cpu'}",
        *(["trainer.precision=32"] if device == "cpu" else []),
        "trainer.deterministic=true",
        "trainer.gradient_clip_val=0.5",
        f"trainer.max_steps={steps}",
        "trainer.log_every_n_steps=1",
        "trainer.val_every_n_steps=20",
        "trainer.limit_val_batches=2",
        "checkpoint.every_n_steps=20",
        f"optim.max_steps={STEPS}",
        "test_after_fit=false",
        "sample.max_new_tokens=0",
        "logger=csv",
        "trainer.enable_progress_bar=false",
        f"run_dir={run_dir}",
        *extra,
    ]
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "attnlab.train", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "WANDB_MODE": "offline"},
    )
    if done.returncode != 0:
        raise SystemExit(f"attnlab-train {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def logged(run_dir: Path, key: str) -> dict[int, float]:
    """``key`` at each step of the run's metrics.jsonl."""
    lines = (json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines())
    return {r["step"]: r[key] for r in lines if key in r}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        straight, halves = Path(work, "straight"), Path(work, "halves")
        times = {
            "40 steps": train(straight, args.device, STEPS, [], args.timeout),
            "20 steps": train(halves, args.device, STEPS // 2, [], args.timeout),
            "resumed to 40": train(halves, args.device, STEPS, ["ckpt_path=last"], args.timeout),
        }
        print(f"| FSDP2, one {args.device} process, deterministic | max difference, steps 21-{STEPS} |")
        print("|---|---|")
        for key in ("train/loss", "train/grad_norm"):
            a, b = logged(straight, key), logged(halves, key)
            steps = [s for s in a if s > STEPS // 2 and s in b]
            if not steps:
                raise SystemExit(f"no {key} logged after step {STEPS // 2} in both runs")
            print(f"| {key} | {max(abs(a[s] - b[s]) for s in steps):.3g} (over {len(steps)} steps) |")
        for name, seconds in times.items():
            print(f"| wall time, {name} | {seconds:.1f} s |")


if __name__ == "__main__":
    main()
