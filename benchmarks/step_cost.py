"""attnlab-train's own cost per step against a bare ``pl.Trainer`` and a plain PyTorch loop (issue 19).

Each contender trains the same tiny GPT (1 layer, d 32, batch 4 x 16, the default corpus) in a fresh
process, twice: for ``SHORT`` and for ``LONG`` steps. The per-step cost is the difference of the two
wall times over the difference of steps, so that everything a run does once (interpreter start,
imports, config, data, the end-of-run test and sample) cancels. ``attnlab-train`` runs with its
defaults, as a user gets them: the wandb logger (offline), checkpoints every 100 steps, every callback,
progress lines. Validation is the only default held out (``trainer.val_every_n_steps`` beyond the run:
the one validation at the end is in both runs and cancels): it is work the user asked for, which the
references would have to do as well, and at this size one pass over the validation split costs as
much as 200 training steps. The references are ``benchmarks.bare_fit``. The contenders take turns,
the order reversed every round; the ratio is computed per round, by the wall clock (the issue's
measure) and in CPU time (user + system: on a shared machine, time spent waiting for a core is left
out; each process has one torch thread).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, Row, Settings
from benchmarks.startup import train_command

SECTION = "step cost"
TARGET = 1.1  # attnlab-train's per-step cost ÷ the bare Trainer's, at most
SIZE = ["model.n_layers=1", "model.d_model=32", "data.batch_size=4", "data.seq_len=16"]
CONTENDERS = ("attnlab-train", "bare Trainer", "plain loop")
CLOCKS = ("wall time", "CPU time")


def command(contender: str, steps: int, run_dir: Path) -> list[str]:
    """The command line that trains ``steps`` steps of the tiny GPT."""
    if contender == "attnlab-train":
        return [
            *train_command(),
            *SIZE,
            f"trainer.max_steps={steps}",
            f"trainer.val_every_n_steps={10 * steps}",
            f"run_dir={run_dir}",
        ]
    kind = "trainer" if contender == "bare Trainer" else "loop"
    return [sys.executable, "-m", "benchmarks.bare_fit", kind, f"--steps={steps}", *SIZE]


def environment(threads: int) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": str(threads),
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
    }


def run_seconds(contender: str, steps: int, threads: int, timeout: float = 900.0) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, of the process and the children it waited for) of a whole
    run; its output is piped, as in a batch job (progress lines, no bar). On a shared machine the CPU
    time is the steadier figure: waiting for a core counts in the wall time only."""
    with tempfile.TemporaryDirectory() as tmp:
        before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        done = subprocess.run(
            command(contender, steps, Path(tmp) / "run"),
            cwd=tmp,
            env=environment(threads),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [""])[-1][:300]
        raise RuntimeError(f"{contender} ({steps} steps) exited {done.returncode}: {last}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def per_step_costs(short: int, long: int, rounds: int, threads: int) -> dict[str, dict[str, list[float]]]:
    """{clock: {contender: seconds per step in each round}}, (t_long - t_short) / (long - short) by
    the wall clock and in CPU time."""
    costs: dict[str, dict[str, list[float]]] = {clock: {name: [] for name in CONTENDERS} for clock in CLOCKS}
    for r in range(rounds):
        for name in CONTENDERS if r % 2 == 0 else CONTENDERS[::-1]:
            t_short, t_long = run_seconds(name, short, threads), run_seconds(name, long, threads)
            for i, clock in enumerate(CLOCKS):
                costs[clock][name].append((t_long[i] - t_short[i]) / (long - short))
            done = ", ".join(f"{c} {1e3 * costs[c][name][-1]:.2f} ms" for c in CLOCKS)
            print(f"[step cost] round {r + 1}: {name} per step {done}", flush=True)
    return costs


def rows_of(costs: dict[str, list[float]], clock: str, short: int, long: int, load: str) -> list[Row]:
    """The ratios to the two references of one clock's per-step costs."""
    ms = {name: 1e3 * statistics.median(c) for name, c in costs.items()}
    absolute = ", ".join(f"{name} {ms[name]:.2f} ms" for name in CONTENDERS)
    config = "L1 H4 d32 T16 B4, default corpus; attnlab-train with its defaults (validation held out)"
    rows = []
    for reference, target in (("bare Trainer", TARGET), ("plain loop", None)):
        ratios = [a / b for a, b in zip(costs["attnlab-train"], costs[reference])]
        rows.append(
            Row(
                SECTION,
                f"{clock} per step, attnlab-train ÷ {reference}",
                config,
                statistics.median(ratios),
                min(ratios),
                max(ratios),
                "×",
                f"per step (t{long} - t{short}) / {long - short}, median of {len(ratios)} rounds: "
                f"{absolute}; load {load}",
                target,
                f"≤ {target:g}×" if target else "",
                higher_is_better=False,
            )
        )
    return rows


def load_average() -> str:
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def run(settings: Settings) -> list[Row]:
    short, long, rounds = settings.pick(full=(400, 2400, 3), quick=(200, 1200, 2), tiny=(2, 12, 1))
    print(f"[step cost] {rounds} rounds of {short} and {long} steps", flush=True)
    costs = per_step_costs(short, long, rounds, settings.threads)
    return [row for clock in CLOCKS for row in rows_of(costs[clock], clock, short, long, load_average())]
