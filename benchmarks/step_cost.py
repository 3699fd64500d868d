"""attnlab-train's own cost per step against a bare ``pl.Trainer`` and a plain PyTorch loop (issue 19).

Each contender trains the same tiny GPT (1 layer, d 32, batch 4 x 16, the default corpus) in a fresh
process for ``LAST + 1`` steps, and times, from inside the run, the steps from ``FIRST`` to ``LAST``
(``benchmarks.step_window``): the interpreter's start, imports, config, data, the first steps and the
end of the run lie outside that window, so their noise stays out of the figure (subtracting a short
whole run from a long one, as this section did before, let a second of startup noise move the
per-step figure by half a millisecond on a busy machine). ``attnlab-train`` runs with its defaults, as
a user gets them: the wandb logger (offline), checkpoints every 100 steps, every callback, progress
lines; the window holds their work (20 checkpoint saves, 200 logged steps). Validation is the only
default held out (``trainer.val_every_n_steps`` beyond the run): it is work the user asked for, which
the references would have to do as well. The references are ``benchmarks.bare_fit``. The contenders
take turns, the order reversed every round; the ratio is computed per round, by the wall clock (the
issue's measure) and in CPU time (the process's, all threads: on a shared machine, time spent waiting
for a core is left out; each process has one torch thread).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import ROOT, Row, Settings
from benchmarks.startup import train_command

SECTION = "step cost"
TARGET = 1.1  # attnlab-train's per-step cost ÷ the bare Trainer's, at most
SIZE = ["model.n_layers=1", "model.d_model=32", "data.batch_size=4", "data.seq_len=16"]
CONTENDERS = ("attnlab-train", "bare Trainer", "plain loop")
CLOCKS = ("wall time", "CPU time")


def command(contender: str, first: int, last: int, window_file: Path, run_dir: Path) -> list[str]:
    """The command line that trains the tiny GPT for ``last + 1`` steps, timing steps ``first`` to ``last``."""
    steps = last + 1
    if contender == "attnlab-train":
        window = (
            f"{{_target_:benchmarks.step_window.StepWindow,first:{first},last:{last},out:'{window_file}'}}"
        )
        return [
            *train_command(),
            *SIZE,
            f"trainer.max_steps={steps}",
            f"trainer.val_every_n_steps={10 * steps}",
            f"run_dir={run_dir}",
            f"+callbacks.step_window={window}",
        ]
    kind = "trainer" if contender == "bare Trainer" else "loop"
    return [
        sys.executable,
        "-m",
        "benchmarks.bare_fit",
        kind,
        f"--steps={steps}",
        "--window",
        str(first),
        str(last),
        str(window_file),
        *SIZE,
    ]


def environment(threads: int) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": str(threads),
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
    }


def window_seconds(contender: str, first: int, last: int, threads: int, timeout: float = 900.0) -> dict:
    """``{"steps", "wall", "cpu"}`` of the window of one run; its output is piped, as in a batch job
    (progress lines, no bar)."""
    with tempfile.TemporaryDirectory() as tmp:
        window_file = Path(tmp) / "window.json"
        done = subprocess.run(
            command(contender, first, last, window_file, Path(tmp) / "run"),
            cwd=tmp,
            env=environment(threads),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0 or not window_file.exists():
            last_line = (done.stderr.strip().splitlines() or [""])[-1][:300]
            raise RuntimeError(f"{contender} exited {done.returncode} without its window: {last_line}")
        return json.loads(window_file.read_text())


def per_step_costs(first: int, last: int, rounds: int, threads: int) -> dict[str, dict[str, list[float]]]:
    """{clock: {contender: seconds per step in each round}}, by the wall clock and in CPU time."""
    costs: dict[str, dict[str, list[float]]] = {clock: {name: [] for name in CONTENDERS} for clock in CLOCKS}
    for r in range(rounds):
        for name in CONTENDERS if r % 2 == 0 else CONTENDERS[::-1]:
            window = window_seconds(name, first, last, threads)
            for clock, key in zip(CLOCKS, ("wall", "cpu")):
                costs[clock][name].append(window[key] / window["steps"])
            done = ", ".join(f"{c} {1e3 * costs[c][name][-1]:.2f} ms" for c in CLOCKS)
            print(f"[step cost] round {r + 1}: {name} per step {done}", flush=True)
    return costs


def rows_of(costs: dict[str, list[float]], clock: str, first: int, last: int, load: str) -> list[Row]:
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
                f"per step over steps {first}-{last} timed inside the run, median of {len(ratios)} rounds: "
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
    first, last, rounds = settings.pick(full=(400, 2400, 5), quick=(200, 1200, 3), tiny=(2, 12, 1))
    print(f"[step cost] {rounds} rounds, steps {first} to {last} timed", flush=True)
    costs = per_step_costs(first, last, rounds, settings.threads)
    return [row for clock in CLOCKS for row in rows_of(costs[clock], clock, first, last, load_average())]
