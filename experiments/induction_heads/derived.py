"""The figures the README derives from the seeds' files (ranges over the seeds, differences, tests),
each computed here from ``results/seed<N>.json`` and ``results/learned_positions/seed<N>.json``, or,
for a run with random controls and composition scores (``results/heads8``), from its own seeds.

usage: python experiments/induction_heads/derived.py                # writes results/derived.md
       python experiments/induction_heads/derived.py results/heads8 # writes results/heads8/derived.md

The comparisons use the report's significance (attnlab.report.significance: paired by seed, the
mean per-seed difference, its 95% bootstrap interval over the seeds, the paired t-test's p-value and
the seeds per side that 80% power would need) and, for the count of seeds that form the circuit,
Fisher's exact test (scipy).
"""

from __future__ import annotations

import json
import statistics
import sys
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


def transition(seed: dict) -> tuple[int, int]:
    """The last evaluated step with the repeat loss above 3/4 of ln 26 and the first after it below 1/4
    of ln 26: the span of the phase change at the evaluations' resolution."""
    curve, uniform = seed["curve"], seed["uniform_loss"]
    last_high = max(p["step"] for p in curve if p["repeat_loss"] > 0.75 * uniform)
    first_low = next(p["step"] for p in curve if p["step"] > last_high and p["repeat_loss"] < 0.25 * uniform)
    return last_high, first_low


def at_least(observed: int, chances: list[float]) -> float:
    """P(at least ``observed`` successes) among independent trials with these chances (exact)."""
    counts = [1.0]  # counts[k]: the probability of k successes so far
    for p in chances:
        counts = [a * (1 - p) + b * p for a, b in zip([*counts, 0.0], [0.0, *counts])]
    return sum(counts[observed:])


def block_mean(matrix: list[list[float]], rows: list[int], columns: list[int]) -> float:
    """The mean of ``matrix`` over the given rows and columns (NaN where either is empty)."""
    cells = [matrix[i][j] for i in rows for j in columns]
    return statistics.mean(cells) if cells else float("nan")


def composition_blocks(d: dict) -> dict[str, float]:
    """One seed's mean composition scores between head groups: the induction heads (rows) with the
    previous-token heads and with layer 0's other heads, trained (K and Q) and untrained (K: the level
    of random weights)."""
    induction = [h for layer, h in d["induction_heads"] if layer == 1]
    previous = [h for _, h in d["previous_token_heads"]]
    others = [h for h in range(len(d["induction_scores"][0])) if h not in previous]
    k, untrained = d["k_composition"], d["k_composition_untrained"]
    return {
        "K, induction x previous-token": block_mean(k["offset_0"], induction, previous),
        "K, induction x other layer-0": block_mean(k["offset_0"], induction, others),
        "K over offsets, induction x previous-token": block_mean(k["mean_over_offsets"], induction, previous),
        "K over offsets, induction x other layer-0": block_mean(k["mean_over_offsets"], induction, others),
        "Q, induction x previous-token": block_mean(k["q_composition_offset_0"], induction, previous),
        "Q, induction x other layer-0": block_mean(k["q_composition_offset_0"], induction, others),
        "K untrained, induction x previous-token": block_mean(untrained, induction, previous),
        "K untrained, induction x other layer-0": block_mean(untrained, induction, others),
    }


def control_rises(seeds: dict[int, dict], group: str, mode: str) -> tuple[dict[int, float], dict[int, float]]:
    """By seed (those with control sets): the rise of the repeat loss with ``group``'s chosen set
    ablated, and the mean rise with its random size-matched sets ablated."""
    chosen, controls = {}, {}
    for s, d in seeds.items():
        c = d["random_controls"].get(group)
        if c and c[mode]["controls"]:
            before = d["ablation"][mode]["before"]
            chosen[s] = c[mode]["chosen"] - before
            controls[s] = statistics.mean(c[mode]["controls"]) - before
    return chosen, controls


def comparison_row(name: str, baseline: dict[int, float], other: dict[int, float]) -> str:
    c = compare(baseline, other)
    return f"| {name} | {c.difference:+.3f} | [{c.low:+.3f}, {c.high:+.3f}] | {c.p_value:.2g} | {c.seeds_needed} | {c.n_other} |"


def controls_and_composition(seeds: dict[int, dict]) -> list[str]:
    """derived.md of a run with random controls and composition scores: ranges over the seeds, the
    chosen head sets against their size-matched controls and the composition comparisons."""
    rows: list[tuple[str, float]] = []

    def span(name: str, values: list[float]) -> None:
        rows.extend([(f"{name}: min", min(values)), (f"{name}: max", max(values))])

    formed = [
        d for d in seeds.values() if d["induction_step"] is not None and d["phase_change_step"] is not None
    ]
    rows += [("seeds", len(seeds)), ("seeds that formed the circuit", len(formed))]
    span("phase change step", [d["phase_change_step"] for d in formed])
    span(
        "induction step minus phase change step",
        [d["induction_step"] - d["phase_change_step"] for d in formed],
    )
    spans = [transition(d) for d in formed]
    span("phase change span (steps)", [b - a for a, b in spans])
    span(
        "steepest drop of the repeat loss in one evaluation interval (nats)",
        [b - a for _, b, a in map(steepest, formed)],
    )
    span("final repeat loss", [d["final_repeat_loss"] for d in seeds.values()])
    span(
        "induction heads in layer 1",
        [sum(layer == 1 for layer, _ in d["induction_heads"]) for d in seeds.values()],
    )
    span("layer-1 induction score", [x for d in seeds.values() for x in d["induction_scores"][1]])
    span("previous-token heads in layer 0", [len(d["previous_token_heads"]) for d in seeds.values()])
    rows.append(
        ("seeds where patching names the induction heads", sum(d["same_heads"] for d in seeds.values()))
    )
    for mode in ("zero", "mean"):
        for group in ("induction_heads", "previous_token_heads", "control_heads"):
            values = [
                d["ablation"][mode][group] for d in seeds.values() if d["ablation"][mode][group] is not None
            ]
            span(f"loss with the {group.replace('_', ' ')} {mode}-ablated", values)
    blocks = {s: composition_blocks(d) for s, d in seeds.items()}
    for name in blocks[next(iter(blocks))]:
        span(f"mean {name}", [b[name] for b in blocks.values()])
    for key in ("offset_0", "mean_over_offsets"):
        hits, chances = 0, []
        for d in seeds.values():
            partners = d["k_composition"]["partners"][key]
            hits += sum(p["is_previous_token_head"] for p in partners.values())
            chances += [len(d["previous_token_heads"]) / len(d["induction_scores"][0])] * len(partners)
        rows += [
            (f"induction heads whose top K partner ({key}) is a previous-token head", hits),
            (f"induction heads ({key})", len(chances)),
            (f"expected by chance ({key})", sum(chances)),
            (f"P(as many by chance) ({key})", at_least(hits, chances)),
        ]

    lines = ["# Figures derived from the seeds' files", "", "| quantity | value |", "|---|---|"]
    lines += [f"| {name} | {value:.4g} |" for name, value in rows]
    lines += [
        "",
        "Random size-matched controls, by seed (rise of the repeat loss over the unablated model, nats):",
        "",
    ]
    lines += [
        "| set, ablation | seeds with controls | drawn disjoint | rank 1 | median p | largest p |",
        "|---|---|---|---|---|---|",
    ]
    groups = sorted({g for d in seeds.values() for g in d["random_controls"]})
    for group in groups:
        for mode in ("zero", "mean"):
            entries = [d["random_controls"][group] for d in seeds.values() if group in d["random_controls"]]
            entries = [c for c in entries if c[mode]["controls"]]
            if entries:
                ps = [c[mode]["p"] for c in entries]
                lines.append(
                    f"| {group}, {mode} | {len(entries)} | {sum(c['kind'] == 'disjoint' for c in entries)} | "
                    f"{sum(c[mode]['rank'] == 1 for c in entries)} | {statistics.median(ps):.3g} | {max(ps):.3g} |"
                )
    lines += ["", "Comparisons (paired by seed):", ""]
    lines += [
        "| comparison | difference | 95% interval | p | seeds needed | seeds |",
        "|---|---|---|---|---|---|",
    ]
    for group in groups:
        for mode in ("zero", "mean"):
            chosen, controls = control_rises(seeds, group, mode)
            if len(chosen) >= 2:
                lines.append(comparison_row(f"{mode}: {group} - random size-matched sets", controls, chosen))
    for mode in ("zero", "mean"):
        rise = {
            s: d["ablation"][mode]["induction_heads"] - d["ablation"][mode]["before"]
            for s, d in seeds.items()
        }
        other = {
            s: d["ablation"][mode]["control_heads"] - d["ablation"][mode]["before"]
            for s, d in seeds.items()
            if d["ablation"][mode]["control_heads"] is not None
        }
        lines.append(comparison_row(f"{mode}: induction_heads - every head in neither role", other, rise))
    by = {name: {s: b[name] for s, b in blocks.items()} for name in blocks[next(iter(blocks))]}
    for other, base in (
        ("K, induction x previous-token", "K, induction x other layer-0"),
        ("K over offsets, induction x previous-token", "K over offsets, induction x other layer-0"),
        ("K, induction x previous-token", "K untrained, induction x previous-token"),
        ("K, induction x previous-token", "Q, induction x previous-token"),
        ("Q, induction x previous-token", "K untrained, induction x previous-token"),
        ("Q, induction x other layer-0", "Q, induction x previous-token"),
        # at initialisation a Q score has the K score's distribution (the same random matrices, transposed)
        ("Q, induction x other layer-0", "K untrained, induction x other layer-0"),
    ):
        lines.append(comparison_row(f"{other} - {base}", by[base], by[other]))
    return lines


def main() -> None:
    folder = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else RESULTS
    seeds = load(folder)
    with_controls = sum("random_controls" in d for d in seeds.values())
    if with_controls:
        if with_controls < len(seeds):
            raise SystemExit(
                f"{folder}: {len(seeds) - with_controls} seeds lack the random controls; rerun them"
            )
        lines = controls_and_composition(seeds)
        (folder / "derived.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        return
    four_heads()


def four_heads() -> None:
    """The 4-head run's ranges and tests (results/derived.md), with the learned-position runs."""
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
