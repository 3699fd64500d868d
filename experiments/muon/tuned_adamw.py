"""Muon against AdamW at its tuned learning rate: the rate sweep's table, the tuned rate (the lowest
final val loss on seed 1), the steps-to-loss table against that rate's runs (``steps_to_loss.py``),
and the two comparisons the README's claim rests on, with their intervals over seeds:

- the share of AdamW's wall time Muon needs to reach the tuned AdamW's final val loss (mean over its
  seeds): steps to that loss x a Muon step's cost in AdamW steps (the benchmark's
  ``results/step_time.json``, float32 Newton-Schulz) / AdamW's steps;
- the final val loss of Muon minus that of the tuned AdamW, seed by seed (paired).

    .venv/bin/python experiments/muon/tuned_adamw.py experiments/muon/runs/tuned --out experiments/muon/results/adamw_tuned

Reads ``<runs>/adamw-lr<rate>-seed<N>/`` and ``<runs>/muon-seed<N>/``; a rate of the sweep not run
there is read from the earlier results that hold its runs (``EARLIER``). Writes ``sweep.md``,
``wall_time_share.md``, ``wall_time_share.json`` and ``steps_to_loss.py``'s files into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import numpy as np
from scipy import stats
from steps_to_loss import finished, markdown, plot, seed_of, steps_to, study

from attnlab.report.runs import read_run
from attnlab.report.significance import LEVEL, RESAMPLES, compare, one_sample_p

HERE = Path(__file__).resolve().parent
# Rates whose AdamW runs were measured before this sweep, and the results file that holds their final losses.
EARLIER = {"1e-3": "results/steps_to_loss.json", "4e-3": "results/adamw_lr4e-3/steps_to_loss.json"}
STEP_COST = ("results/step_time.json", "muon_float32")  # a Muon step in AdamW steps, as run here


def rate_of(run_dir: Path) -> str:
    """The learning rate in a sweep run's folder name: ``adamw-lr<rate>-seed<N>``."""
    return run_dir.name.removeprefix("adamw-lr").rpartition("-seed")[0]


def sweep(runs: Path) -> list[dict]:
    """Every AdamW run of the sweep (rate, seed, final val loss, wall time, where it was read), by
    rate and seed: the runs under ``runs``, then the earlier results' runs this sweep did not rerun."""
    rows = []
    for run_dir in sorted(runs.glob("adamw-lr*-seed*")):
        if run_dir.is_dir() and finished(run_dir):
            run = read_run(run_dir)
            final = max((m["step"], m["val/loss"]) for m in run.metrics if "val/loss" in m)[1]
            rows.append(
                {
                    "rate": rate_of(run_dir),
                    "seed": seed_of(run_dir.name),
                    "final_val_loss": final,
                    "wall_time_s": run.summary["wall_time_s"],
                    "source": f"runs/{run_dir.name}",
                }
            )
    rerun = {(row["rate"], row["seed"]) for row in rows}
    rows += [row for row in earlier_runs() if (row["rate"], row["seed"]) not in rerun]
    return sorted(rows, key=lambda row: (float(row["rate"]), row["seed"]))


def earlier_runs() -> list[dict]:
    """The AdamW runs (``adamw-seed<N>``) of the earlier results files, at their rates (``EARLIER``);
    those files keep no wall time."""
    rows = []
    for rate, file in EARLIER.items():
        saved = json.loads((HERE / file).read_text(encoding="utf-8"))["runs"]
        for name, run in saved.items():
            if name.startswith("adamw-seed"):
                final = run["final_val_loss"]
                rows.append(
                    {
                        "rate": rate,
                        "seed": seed_of(name),
                        "final_val_loss": final,
                        "wall_time_s": None,
                        "source": file,
                    }
                )
    return rows


def tuned_rate(rows: list[dict]) -> str:
    """The rate with the lowest final val loss on seed 1 (the other seeds ran at it afterwards)."""
    seed_one = [row for row in rows if row["seed"] == 1]
    if not seed_one:
        raise SystemExit("error: the sweep has no seed-1 AdamW run (adamw-lr<rate>-seed1/)")
    return min(seed_one, key=lambda row: row["final_val_loss"])["rate"]


def sweep_markdown(rows: list[dict], tuned: str) -> str:
    """The sweep's runs one per row, then each rate's mean and sd over the seeds it ran."""
    lines = [
        f"AdamW's tuned rate (the lowest final val loss on seed 1): **{tuned}**.",
        "",
        "| lr | seed | final val loss (last step) | wall time (s) | read from |",
        "|---|---:|---:|---:|---|",
    ]
    for row in rows:
        wall = f"{row['wall_time_s']:.0f}" if row["wall_time_s"] is not None else "(not in that file)"
        lines.append(
            f"| {row['rate']} | {row['seed']} | {row['final_val_loss']:.4f} | {wall} | {row['source']} |"
        )
    lines += [
        "",
        "| lr | seeds | final val loss (mean ± sd) | minus the tuned rate's, paired by seed (95% interval, p) |",
        "|---|---:|---:|---:|",
    ]
    by_rate = {
        rate: {r["seed"]: r["final_val_loss"] for r in rows if r["rate"] == rate} for rate in rates(rows)
    }
    for rate, finals in by_rate.items():
        sd = statistics.stdev(finals.values()) if len(finals) > 1 else 0.0
        lines.append(
            f"| {rate} | {len(finals)} | {statistics.mean(finals.values()):.4f} ± {sd:.4f} "
            f"| {against(by_rate[tuned], finals) if rate != tuned else 'the tuned rate'} |"
        )
    return "\n".join(lines) + "\n"


def rates(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(row["rate"] for row in rows))


def against(tuned: dict[int, float], other: dict[int, float]) -> str:
    """Another rate's final losses minus the tuned rate's, where both ran two seeds or more in common."""
    if len(set(tuned) & set(other)) < 2:
        return "(one seed in common)"
    found = compare(tuned, other)
    return f"{found.difference:+.4f} ({found.low:+.4f} to {found.high:+.4f}, p {found.p_value:.3g})"


def step_cost() -> float:
    file, key = STEP_COST
    return json.loads((HERE / file).read_text(encoding="utf-8"))["ratio_to_adamw"][key]


def shares(result: dict, cost: float) -> dict[int, float]:
    """Per Muon seed: the share of AdamW's wall time it needs to reach the target (inf: never)."""
    out = {}
    for name, row in result["runs"].items():
        if row["optim"] == "muon":
            steps = row["steps_to_target"]
            out[seed_of(name)] = math.inf if steps is None else steps * cost / row["final_step"]
    return out


def measured_step_cost(result: dict) -> float:
    """A Muon step in AdamW steps as these runs measured it (their mean training s/step): one run at a
    time on a shared machine, so the load the runs met is in it, which the benchmark's ratio leaves out."""
    means = result["means"]
    return means["muon"]["s_per_step"] / means["adamw"]["s_per_step"]


def t_interval(values: list[float], level: float = LEVEL) -> tuple[float, float]:
    """Student's t interval (1 - ``level``) of the mean of ``values``."""
    mean, half = statistics.mean(values), 0.0
    if len(values) > 1:
        half = stats.t.ppf(1 - level / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean - half, mean + half


def bootstrap_share(result: dict, cost: float, level: float = LEVEL) -> tuple[float, float]:
    """The percentile interval of the mean share when the seeds are resampled with replacement, each
    resample setting its own target (the mean final loss of its AdamW seeds): the target's own
    seed-to-seed spread included, which the t interval leaves out."""
    runs = result["runs"]
    adamw = {seed_of(n): r["final_val_loss"] for n, r in runs.items() if r["optim"] == "adamw"}
    muon = {seed_of(n): result["curves"]["muon"][n] for n, r in runs.items() if r["optim"] == "muon"}
    seeds = sorted(set(adamw) & set(muon))
    final_step = max(r["final_step"] for r in runs.values())
    rng, means = np.random.default_rng(0), []
    for picked in rng.choice(seeds, (RESAMPLES, len(seeds))):
        target = statistics.mean(adamw[s] for s in picked)
        crossings = [steps_to(muon[s], target)[1] for s in picked]
        means.append(math.inf if None in crossings else statistics.mean(crossings) * cost / final_step)
    low, high = np.quantile(means, [level / 2, 1 - level / 2])
    return float(low), float(high)


def finals_by_seed(result: dict, optim: str) -> dict[int, float]:
    return {seed_of(n): r["final_val_loss"] for n, r in result["runs"].items() if r["optim"] == optim}


def comparisons(result: dict, cost: float) -> dict:
    """The wall-time share (per seed, mean, t and bootstrap intervals, one-sided p of a share below 1)
    and the paired final-loss difference Muon minus AdamW (mean, bootstrap interval, paired t-test p)."""
    by_seed = shares(result, cost)
    values = list(by_seed.values())
    own_cost = measured_step_cost(result)
    at_measured_cost = list(shares(result, own_cost).values())
    finals = compare(finals_by_seed(result, "adamw"), finals_by_seed(result, "muon"))
    return {
        "target": result["target"],
        "muon_step_cost": cost,
        "share_by_seed": by_seed,
        "share_mean": statistics.mean(values),
        "share_t_interval": t_interval(values),
        "share_bootstrap_interval": bootstrap_share(result, cost),
        "share_below_one_p": one_sample_p(np.array(values), 1.0, alternative="less"),
        "measured_step_cost": own_cost,
        "share_at_measured_cost_mean": statistics.mean(at_measured_cost),
        "share_at_measured_cost_t_interval": t_interval(at_measured_cost),
        "final_loss_difference": {
            "seeds": finals.n_baseline,
            "paired": finals.paired,
            "muon_minus_adamw": finals.difference,
            "interval": (finals.low, finals.high),
            "p_value": finals.p_value,
        },
    }


def comparisons_markdown(found: dict, tuned: str) -> str:
    final = found["final_loss_difference"]
    t_low, t_high = found["share_t_interval"]
    b_low, b_high = found["share_bootstrap_interval"]
    o_low, o_high = found["share_at_measured_cost_t_interval"]
    seeds = len(found["share_by_seed"])
    level = f"{1 - LEVEL:.0%}"
    lines = [
        f"Against AdamW at lr {tuned}: target = its final val loss, mean over its seeds: {found['target']:.4f}; "
        f"a Muon step costs {found['muon_step_cost']} AdamW steps ({STEP_COST[0]}).",
        "",
        "| comparison | seeds | value | interval | p |",
        "|---|---:|---:|---:|---:|",
        f"| Muon's share of AdamW's wall time to the target (mean) | {seeds} "
        f"| {found['share_mean']:.3f} | {level} t: {t_low:.3f} to {t_high:.3f}; seed bootstrap: {b_low:.3f} to {b_high:.3f} "
        f"| {found['share_below_one_p']:.3g} (one-sided, share < 1) |",
        f"| the same share at these runs' own step-time ratio ({found['measured_step_cost']:.2f}) "
        f"| {seeds} | {found['share_at_measured_cost_mean']:.3f} | {level} t: {o_low:.3f} to {o_high:.3f} | |",
        f"| final val loss, Muon minus AdamW (paired by seed) | {final['seeds']} | {final['muon_minus_adamw']:.4f} "
        f"| {level} paired bootstrap: {final['interval'][0]:.4f} to {final['interval'][1]:.4f} "
        f"| {final['p_value']:.3g} (paired t, two-sided) |",
        "",
        "| Muon seed | share of AdamW's wall time |",
        "|---|---:|",
    ]
    lines += [f"| {seed} | {share:.3f} |" for seed, share in sorted(found["share_by_seed"].items())]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--out", type=Path, help="where the tables go (required unless --tuned-rate)")
    parser.add_argument("--tuned-rate", action="store_true", help="print the tuned rate only and stop")
    args = parser.parse_args()
    rows = sweep(args.runs)
    tuned = tuned_rate(rows)
    if args.tuned_rate:
        print(tuned)
        return
    if args.out is None:
        parser.error("--out is required unless --tuned-rate")
    result = study(args.runs, f"adamw-lr{tuned}")
    found = comparisons(result, step_cost())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sweep.md").write_text(sweep_markdown(rows, tuned), encoding="utf-8")
    (args.out / "steps_to_loss.md").write_text(markdown(result), encoding="utf-8")
    saved = {k: v for k, v in result.items() if k != "curves"}
    (args.out / "steps_to_loss.json").write_text(json.dumps(saved, indent=1) + "\n", encoding="utf-8")
    plot(result, args.out / "plots" / "val_loss_adamw_vs_muon.png")
    (args.out / "wall_time_share.md").write_text(comparisons_markdown(found, tuned), encoding="utf-8")
    (args.out / "wall_time_share.json").write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    print(sweep_markdown(rows, tuned), markdown(result), comparisons_markdown(found, tuned), sep="\n")


if __name__ == "__main__":
    main()
