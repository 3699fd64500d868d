"""What attnlab-train costs per training step beyond the step itself, in one package:

- here, the step-cost section: attnlab-train's own cost per step against a bare ``pl.Trainer`` and a
  plain PyTorch loop, over rounds (``rounds``) of the three taking turns step by step (``relay``);
- ``references``: the bare Trainer and the plain loop, training what attnlab-train trains;
- ``lightning``: the Lightning-overhead section (the attnlab-train path against a bare loop).

Each round is one process (``benchmarks.step_cost.rounds``) in which the three contenders train the same
tiny GPT (1 layer, d 32, batch 4 x 16, the default corpus) for ``LAST + 1`` steps at once, taking
turns one training step each (``benchmarks.step_cost.relay``), and the steps ``FIRST`` to ``LAST - 1`` of
each are timed. On a small shared machine the speed of one program drifts by 30-40% within a few
hundred steps, so runs timed one after another (as this section did before) compared moments of the
machine as much as programs (the same program's median moved by 0.1x from one set of five rounds to
the next); in turns, a drift slows all three alike. ``attnlab-train`` runs with its defaults, as a
user gets them: the wandb logger (offline), checkpoints every 100 steps, every callback, progress
lines; the window holds their work. Validation is the only default held out
(``trainer.val_every_n_steps`` beyond the run): it is work the user asked for, which the references
would have to do as well. The references are ``benchmarks.step_cost.references``. The turn order rotates every
round; the ratio is computed per round, by the wall clock (what a user waits for) and in CPU time of
each contender's own thread (which leaves out what attnlab hands to background threads: the
checkpoint writer, wandb's sender). One torch thread each.
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
from benchmarks.step_cost.rounds import CONTENDERS

SECTION = "step cost"
TARGET = 1.1  # attnlab-train's per-step cost ÷ the bare Trainer's, at most
CLOCKS = ("wall time", "CPU time")


def command(first: int, last: int, order: list[str], out: Path) -> list[str]:
    """The command line of one round: the contenders taking turns in ``order``, their times to ``out``."""
    return [
        sys.executable,
        "-m",
        "benchmarks.step_cost.rounds",
        f"--first={first}",
        f"--last={last}",
        f"--order={','.join(order)}",
        f"--out={out}",
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


def round_times(first: int, last: int, order: list[str], threads: int, timeout: float = 1800.0) -> dict:
    """``{contender: {"steps", "wall", "cpu"}}`` of one round; its output is piped, as in a batch job
    (progress lines, no bar)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "round.json"
        done = subprocess.run(
            command(first, last, order, out),
            cwd=tmp,
            env=environment(threads),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0 or not out.exists():
            last_line = (done.stderr.strip().splitlines() or [""])[-1][:300]
            raise RuntimeError(f"the step-cost round exited {done.returncode} without its times: {last_line}")
        return json.loads(out.read_text())


def turn_order(round_index: int) -> list[str]:
    """The contenders' order in a round: rotated by one every round."""
    k = round_index % len(CONTENDERS)
    return [*CONTENDERS[k:], *CONTENDERS[:k]]


def per_step_costs(first: int, last: int, rounds: int, threads: int) -> dict[str, dict[str, list[float]]]:
    """{clock: {contender: seconds per step in each round}}, by the wall clock and in CPU time."""
    costs: dict[str, dict[str, list[float]]] = {clock: {name: [] for name in CONTENDERS} for clock in CLOCKS}
    for r in range(rounds):
        times = round_times(first, last, turn_order(r), threads)
        for name in CONTENDERS:
            for clock, key in zip(CLOCKS, ("wall", "cpu")):
                costs[clock][name].append(times[name][key] / times[name]["steps"])
        done = ", ".join(f"{name} {1e3 * costs['wall time'][name][-1]:.2f} ms" for name in CONTENDERS)
        ratio = costs["wall time"]["attnlab-train"][-1] / costs["wall time"]["bare Trainer"][-1]
        print(
            f"[step cost] round {r + 1}: per step (wall) {done}; attnlab-train ÷ bare {ratio:.3f}", flush=True
        )
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
                f"per step over steps {first}-{last - 1}, the contenders in turns, one process a round, "
                f"median of {len(ratios)} rounds: "
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
