"""The figures the README derives from the seeds' files (ranges over the seeds, differences, tests),
each computed here from ``results/seed<N>.json`` and ``results/learned_positions/seed<N>.json``.

usage: python experiments/induction_heads/derived.py      # writes results/derived.md

The comparisons use the report's significance (attnlab.report.significance: paired by seed, the
mean per-seed difference, its 95% bootstrap interval over the seeds, the paired t-test's p-value and
the seeds per side that 80% power would need) and, for the count of seeds that form the circuit,
Fisher's exact test (scipy).
"""

from __future__ import annotations

import json
from pathlib import Path

from scipy.stats import fisher_exact

from attnlab.report.significance import compare

RESULTS = Path(__file__).resolve().parent / "results"
THRESHOLD = 0.3  # an induction or previous-token head scores this or more (study.py)


def load(folder: Path) -> dict[int, dict]:
    seeds = {int(p.stem[4:]): json.loads(p.read_text()) for p in sorted(folder.glob("seed*.json"))}
    if not seeds:
        raise SystemExit(f"no seed<N>.json in {folder}")
    return seeds


def at_step(seed: dict, step: int, key: str) -> float:
    return next(point[key] for point in seed["curve"] if point["step"] == step)


def steepest(seed: dict) -> tuple[int, float, float]:
    """The evaluation step ending the largest drop of the repeat loss, the loss before and after."""
    curve = seed["curve"]
    i = max(range(1, len(curve)), key=lambda i: curve[i - 1]["repeat_loss"] - curve[i]["repeat_loss"])
    return curve[i]["step"], curve[i - 1]["repeat_loss"], curve[i]["repeat_loss"]


def main() -> None:
    seeds, learned = load(RESULTS), load(RESULTS / "learned_positions")
    rows: list[tuple[str, float]] = []

    def span(name: str, values: list[float]) -> None:
        rows.extend([(f"{name}: min", min(values)), (f"{name}: max", max(values))])

    drops = {s: steepest(d) for s, d in seeds.items()}
    span("steepest drop of the repeat loss (nats)", [before - after for _, before, after in drops.values()])
    for step in (250, 350):  # the evaluations either side of every seed's phase change
        span(f"repeat loss at step {step}", [at_step(d, step, "repeat_loss") for d in seeds.values()])
        span(
            f"top induction score at step {step}",
            [at_step(d, step, "top_induction_score") for d in seeds.values()],
        )
    span("final repeat loss", [d["final_repeat_loss"] for d in seeds.values()])
    span("layer-1 induction score", [x for d in seeds.values() for x in d["induction_scores"][1]])
    span("layer-0 induction score", [x for d in seeds.values() for x in d["induction_scores"][0]])
    span(
        "strongest layer-0 previous-token score", [max(d["previous_token_scores"][0]) for d in seeds.values()]
    )
    span("layer-1 previous-token score", [x for d in seeds.values() for x in d["previous_token_scores"][1]])
    layer1_previous = [x for d in seeds.values() for x in d["previous_token_scores"][1]]
    rows.append(("layer-1 previous-token score: mean", sum(layer1_previous) / len(layer1_previous)))
    span("layer-0 patching share", [x for d in seeds.values() for x in d["patching_restored"][0]])
    span("layer-1 patching share", [x for d in seeds.values() for x in d["patching_restored"][1]])
    both = [
        d["ablation"][kind][group]
        for d in seeds.values()
        for kind in ("zero", "mean")
        for group in ("induction_heads", "previous_token_heads")
    ]
    span("loss with the induction or previous-token heads ablated (zero and mean)", both)
    span(
        "loss with the induction heads ablated (zero and mean)",
        [d["ablation"][k]["induction_heads"] for d in seeds.values() for k in ("zero", "mean")],
    )
    span(
        "loss with the induction heads zero-ablated",
        [d["ablation"]["zero"]["induction_heads"] for d in seeds.values()],
    )
    alone = [
        x
        for d in seeds.values()
        for k in ("zero", "mean")
        for x in d["ablation"][k]["each_induction_head"].values()
    ]
    span("loss with one induction head ablated (zero and mean)", alone)
    span(
        "rise with one induction head ablated (zero and mean)",
        [
            x - d["ablation"][k]["before"]
            for d in seeds.values()
            for k in ("zero", "mean")
            for x in d["ablation"][k]["each_induction_head"].values()
        ],
    )
    for s, d in seeds.items():
        span(
            f"seed {s}: rise with the control heads ablated (zero and mean)",
            [d["ablation"][k]["control_heads"] - d["ablation"][k]["before"] for k in ("zero", "mean")],
        )
    for s, d in seeds.items():
        for layer, head in d["control_heads"]:
            rows.append(
                (
                    f"seed {s}: previous-token score of the control head L{layer}H{head}",
                    d["previous_token_scores"][layer][head],
                )
            )
    rows.append(("uniform guess among the letters (ln 26)", seeds[0]["uniform_loss"]))
    batch = seeds[0]["size"]["batch_size"]
    span("rows seen by the phase change", [d["phase_change_step"] * batch for d in seeds.values()])
    # learned positions: its induction heads' scores and the two seeds that formed none
    for s, d in learned.items():
        top = max(max(layer) for layer in d["induction_scores"])
        rows += [
            (f"learned positions, seed {s}: final repeat loss", d["final_repeat_loss"]),
            (f"learned positions, seed {s}: top induction score", top),
        ]
    for layer, head in learned[0]["induction_heads"]:
        rows.append(
            (
                f"learned positions, seed 0: induction score of L{layer}H{head}",
                learned[0]["induction_scores"][layer][head],
            )
        )

    lines = ["# Figures derived from the seeds' files", "", "| quantity | value |", "|---|---|"]
    lines += [f"| {name} | {value:.4g} |" for name, value in rows]

    lines += ["", "Comparisons (paired by seed; rise of the repeat loss over the unablated model, nats):", ""]
    lines += ["| comparison | difference | 95% interval | p | seeds needed |", "|---|---|---|---|---|"]
    for kind in ("zero", "mean"):
        for group in ("induction_heads", "previous_token_heads"):
            rise = {s: d["ablation"][kind][group] - d["ablation"][kind]["before"] for s, d in seeds.items()}
            control = {
                s: d["ablation"][kind]["control_heads"] - d["ablation"][kind]["before"]
                for s, d in seeds.items()
            }
            c = compare(control, rise)
            lines.append(
                f"| {kind}: {group} - control heads | {c.difference:+.3f} | [{c.low:+.3f}, {c.high:+.3f}] | {c.p_value:.2g} | {c.seeds_needed} |"
            )
    formed = {
        name: sum(bool(d["induction_step"]) for d in group.values())
        for name, group in (("rotary", seeds), ("learned", learned))
    }
    table = [
        [formed["rotary"], len(seeds) - formed["rotary"]],
        [formed["learned"], len(learned) - formed["learned"]],
    ]
    lines += [
        "",
        f"Seeds whose top induction score reached {THRESHOLD}: rotary {formed['rotary']} of {len(seeds)}, learned positions "
        f"{formed['learned']} of {len(learned)} (not a matched comparison: another rate and twice the steps); "
        f"Fisher's exact test, two-sided: p = {fisher_exact(table)[1]:.2g}",
    ]
    (RESULTS / "derived.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
