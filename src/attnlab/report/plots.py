"""The plots of a report (matplotlib, written as PNG without a display):

- the best value of each monitored metric against each swept config key, one line per combination
  of the other swept keys, mean ± std over seeds;
- learning curves of each monitored metric and its training counterpart against the optimizer step
  (and tokens and FLOPs where known), one style per configuration, the mean over its seeds with a
  ± std band;
- for evaluations at other lengths (``data.seq_len`` overridden), the evaluated loss against the
  evaluation length on a log2 axis, one line per configuration, a mean ± std band over seeds.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, NullLocator

from attnlab.report.compute import AXES as CURVE_AXES
from attnlab.report.compute import curve_axes
from attnlab.report.files import write_whole
from attnlab.report.sweep import SEED, Sweep
from attnlab.report.table import FINISHED, as_text, configuration_labels, shown_keys

UNITS = {
    "loss": "nats per token",
    "acc": "fraction correct",
    "exact_match": "fraction exact",
    "f1": "macro F1",
    "bleu": "BLEU, 0-100",
    "chrf": "chrF, 0-100",
}
# The least height of a y axis, by the metric's unit: a gap of 0.01 nats is a tenth of the axis, not
# all of it, where autoscaling would stretch the means of a few close runs over the whole plot.
MIN_SPANS = {"loss": 0.1, "bpb": 0.1, "acc": 0.05, "exact_match": 0.05, "f1": 0.05, "bleu": 5.0, "chrf": 5.0}
MAX_LEGEND = 16  # more lines than this get no legend: the tables name them
WIDE_LABEL = 32  # characters; a legend with longer labels goes below the plot
LABEL_CHAR_INCHES = 0.065  # the mean width of a character of a legend label (fontsize "small")
LENGTH_KEY = "data.seq_len"


def metric_label(metric: str) -> str:
    """``val/loss (nats per token)``: the metric with its unit, where it has one."""
    unit = UNITS.get(metric.rsplit("/", 1)[-1])
    return f"{metric} ({unit})" if unit else metric


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


def write_plots(sweep: Sweep, out_dir: Path, baseline: str | None = None) -> list[Path]:
    """Every plot the sweep has data for, written into ``out_dir`` (the ``baseline`` configuration's
    learning curves drawn bold); their paths."""
    return [
        *metric_vs_key_plots(sweep, out_dir),
        *learning_curve_plots(sweep, out_dir, baseline),
        *length_plots(sweep, out_dir),
    ]


def metric_vs_key_plots(sweep: Sweep, out_dir: Path) -> list[Path]:
    keys, _ = shown_keys(sweep.configs)
    swept = [k for k in keys if k != SEED]
    paths = []
    for monitor in sweep.monitors:
        column = f"{monitor} best" if f"{monitor} best" in sweep.runs else monitor
        if column not in sweep.runs:
            continue  # runs made before metrics.jsonl existed
        runs = sweep.runs[(sweep.runs["monitor"] == monitor) & sweep.runs["status"].isin(FINISHED)]
        runs = runs[runs[column].notna()]
        if runs.empty:
            continue
        for key in swept:
            if as_text(sweep.configs.loc[runs.index, key]).nunique() < 2:
                continue  # all the runs with results share one value (the others failed)
            others = [k for k in swept if k != key]
            lines = configuration_labels(sweep.configs.loc[runs.index], others)
            fig, ax = new_figure()
            plot_by_key(ax, sweep.configs.loc[runs.index, key], runs[column], lines)
            what = "best " + monitor if column != monitor else monitor
            spread = " (mean ± std over seeds)" if SEED in keys else ""
            ax.set_title(f"{what} by {key}{spread}")
            ax.set_xlabel(key)
            ax.set_ylabel(metric_label(what))
            floor_span(ax, monitor)
            legend(ax, ", ".join(others))
            paths.append(save(fig, out_dir / f"{slug(monitor)}_by_{slug(key)}.png"))
    return paths


def plot_by_key(ax: Axes, x: pd.Series, y: pd.Series, lines: pd.Series) -> None:
    """Mean ± std of ``y`` at each value of ``x``, one line per value of ``lines``."""
    positions, categorical = x_axis(ax, x)
    n_lines = lines.nunique()
    for i, (label, index) in enumerate(lines.groupby(lines, sort=True).groups.items()):
        stats = y[index].groupby(positions[index]).agg(["mean", "std"]).sort_index()
        offset = 0.06 * (i - (n_lines - 1) / 2) if categorical and n_lines <= 8 else 0.0  # bars apart
        ax.errorbar(
            stats.index.to_numpy(float) + offset,
            stats["mean"].to_numpy(float),
            yerr=stats["std"].fillna(0).to_numpy(float),
            marker=MARKERS[i % len(MARKERS)],
            capsize=3,
            # categories have no order to draw a line along
            linestyle="none" if categorical else LINE_STYLES[i % len(LINE_STYLES)],
            label=label,
        )


def x_axis(ax: Axes, x: pd.Series) -> tuple[pd.Series, bool]:
    """Where each value of ``x`` goes on the axis, and whether the values are categories. Names
    (pos=rope, alibi) sit at evenly spaced ticks; numbers on a numeric axis, logarithmic when they
    span 8x or more (layers 1..8, learning rates 1e-4..1e-2), ticked at the values swept."""
    numeric = pd.to_numeric(x, errors="coerce")
    if numeric.isna().any() or x.map(lambda v: isinstance(v, bool)).any():
        text = as_text(x)
        names = sorted(text.unique())
        ax.set_xticks(range(len(names)), names, rotation=30 if len(names) > 4 else 0)
        ax.set_xlim(-0.5, len(names) - 0.5)  # half a slot beside the outer names, not the frame's edge
        return text.map({name: i for i, name in enumerate(names)}).astype(float), True
    values = sorted(numeric.unique())
    if values[0] > 0 and values[-1] >= 8 * values[0]:
        ax.set_xscale("log", base=2 if all(float(v).is_integer() for v in values) else 10)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(values, [f"{v:g}" for v in values])
    return numeric, False


def learning_curve_plots(sweep: Sweep, out_dir: Path, baseline: str | None = None) -> list[Path]:
    """Per monitored metric, its curve and the matching training metric's (``val/loss`` with
    ``train/loss``) against the optimizer step, and against tokens, FLOPs and wall time where the
    runs record them (``report.compute.curve_axes``): one style per configuration, the mean over its
    seeds with a ± std band, the ``baseline`` configuration's line bold."""
    keys, _ = shown_keys(sweep.configs)
    labels = configuration_labels(sweep.configs, keys)
    paths = []
    for monitor in sweep.monitors:
        if monitor not in sweep.curves:
            continue
        jobs = sweep.runs.index[sweep.runs["monitor"] == monitor]
        curves = sweep.curves[sweep.curves["job"].isin(jobs)]
        if curves[monitor].isna().all():
            continue
        train = "train/" + monitor.rsplit("/", 1)[-1]
        train = train if train in curves and train != monitor else None
        for axis, x in curve_axes(sweep, curves).items():
            fig, ax = new_figure()
            singles = draw_curves(
                ax, curves.assign(x=x, label=labels[curves["job"]].to_numpy()), monitor, train, baseline
            )
            seeds = " (mean ± std over seeds)" if SEED in keys else ""
            shown = f"{monitor} and {train}" if train else monitor
            ax.set_title(f"{shown} during training{seeds}")
            ax.set_xlabel(CURVE_AXES[axis])
            if axis == "step":
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            elif axis != "time":
                ax.set_xscale("log")
            ax.set_ylabel(metric_label(monitor))
            if singles:
                note(ax, single_point_note(singles, labels[curves["job"]].nunique()))
            legend(ax, "configuration")
            suffix = "" if axis == "step" else f"_by_{axis}"
            paths.append(save(fig, out_dir / f"{slug(monitor)}_curves{suffix}.png"))
    return paths


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINE_STYLES = ("-", "--", "-.", ":")
MAX_MARKERS = 12  # markers along a line, however many points it has


def series_style(i: int) -> dict[str, str]:
    """The marker and dash of the i-th line: with the colour, no two of the first 8 lines look alike,
    and a line drawn exactly over another still shows its markers and gaps."""
    return {"marker": MARKERS[i % len(MARKERS)], "linestyle": LINE_STYLES[i % len(LINE_STYLES)]}


def draw_curves(
    ax: Axes, curves: pd.DataFrame, metric: str, train: str | None, baseline: str | None = None
) -> list[str]:
    """One line per ``label`` of ``metric`` against ``x``: at each step, the mean over its runs of the
    metric (± std band) and of ``x`` (the seeds of a configuration reach a step at different wall
    times); thin lines of ``train`` in the same colour, the ``baseline`` label's line bold and black,
    named so in the legend; the labels whose line has a single point."""
    singles = []
    for i, (label, rows) in enumerate(curves.groupby("label", sort=True)):
        stats = mean_by_step(rows, metric)
        stats = stats.assign(std=rows.dropna(subset=[metric]).groupby("step")[metric].std())
        x = stats["x"].to_numpy(float)
        every = max(1, len(x) // MAX_MARKERS)
        style = series_style(i)
        if label == baseline:
            style.update(color="black", linewidth=2.8, zorder=4)
            label = f"{label} (baseline)"
        (line,) = ax.plot(x, stats["mean"], label=label, markevery=every, **{"zorder": 3, **style})
        std = stats["std"].fillna(0).to_numpy(float)
        if std.any():
            ax.fill_between(x, stats["mean"] - std, stats["mean"] + std, color=line.get_color(), alpha=0.2)
        if len(x) == 1:
            singles.append(str(label))
        if train is not None:
            trained = mean_by_step(rows, train)
            ax.plot(trained["x"], trained["mean"], color=line.get_color(), linewidth=0.8, alpha=0.6)
    if train is not None:
        ax.plot([], [], color="grey", linewidth=0.8, label=f"{train} (thin, each in its line's colour)")
    return singles


def mean_by_step(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per step where ``metric`` was logged, the mean ``x`` and the ``mean`` of the metric, in order of x."""
    logged = rows.dropna(subset=[metric]).groupby("step")
    return pd.DataFrame({"x": logged["x"].mean(), "mean": logged[metric].mean()}).sort_values("x")


def single_point_note(singles: list[str], lines: int) -> str:
    """Which lines have a single point (a validation at the end only): named when short, else counted."""
    named = f"one point only: {', '.join(singles)}"
    return (
        named if len(named) <= 60 else f"one point only: {len(singles)} of {lines} lines (a final validation)"
    )


def note(ax: Axes, text: str) -> None:
    """A small grey remark in the plot's lower left corner."""
    ax.text(0.01, 0.01, text, transform=ax.transAxes, fontsize="x-small", color="dimgrey", va="bottom")


def length_plots(sweep: Sweep, out_dir: Path) -> list[Path]:
    """One plot per split and monitored metric evaluated at several ``data.seq_len``."""
    if LENGTH_KEY not in sweep.evals:
        return []
    all_lengths = eval_lengths(sweep)
    evals = sweep.evals[all_lengths.notna()]
    keys, _ = shown_keys(sweep.configs)
    lines = length_line_labels(sweep, evals)
    paths = []
    for split in evals["split"].dropna().unique():
        for name in sorted({m.rsplit("/", 1)[-1] for m in sweep.monitors}):
            metric = f"{split}/{name}"
            rows = evals[(evals["split"] == split) & evals.get(metric, pd.Series(dtype=float)).notna()]
            if rows.empty:
                continue
            fig, ax = new_figure()
            lengths = all_lengths[rows.index]
            plot_length_lines(ax, lengths, rows[metric], lines[rows.index])
            trained = pd.to_numeric(sweep.configs.loc[rows["job"].unique(), LENGTH_KEY], errors="coerce")
            for i, length in enumerate(sorted(trained.dropna().unique())):
                ax.axvline(length, color="grey", linestyle=":", label="training length" if i == 0 else None)
            ticks = sorted(lengths.unique())
            ax.set_xscale("log", base=2)
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xticks(ticks, [f"{v:g}" for v in ticks])
            spread = " (mean ± std over seeds)" if SEED in keys else ""
            ax.set_title(f"{metric} by evaluation length{spread}")
            ax.set_xlabel(f"evaluation length {LENGTH_KEY} (tokens, log2 scale)")
            ax.set_ylabel(metric_label(metric))
            floor_span(ax, metric)
            legend(ax, "configuration")
            paths.append(save(fig, out_dir / f"{slug(metric)}_by_length.png"))
    return paths


def eval_lengths(sweep: Sweep) -> pd.Series:
    """The length of each evaluation: its ``data.seq_len`` override, else its run's own ``data.seq_len``
    (attnlab-eval records only what it changed, so an evaluation at the training length has none)."""
    given = pd.to_numeric(sweep.evals[LENGTH_KEY], errors="coerce")
    if LENGTH_KEY not in sweep.configs:
        return given
    own = pd.to_numeric(sweep.configs[LENGTH_KEY], errors="coerce")
    return given.fillna(pd.Series(own[sweep.evals["job"]].to_numpy(), index=sweep.evals.index))


def length_line_labels(sweep: Sweep, evals: pd.DataFrame) -> pd.Series:
    """The line of each evaluation: its run's configuration, and the evaluation settings other than
    the length that differ between the evaluations (``model.pos.rope_scaling=yarn``; the checkpoint
    where both best and last were used), except those the length sets (``model.pos.rope_factor`` =
    length / trained length: one line across the lengths, not a point per factor)."""
    keys, _ = shown_keys(sweep.configs)
    labels = configuration_labels(sweep.configs, keys)[evals["job"]].set_axis(evals.index)
    lengths = eval_lengths(sweep)[evals.index]
    settings = [
        k
        for k in sweep.eval_keys
        if k != LENGTH_KEY and as_text(evals[k]).nunique() > 1 and not follows_length(evals[k], lengths)
    ]
    settings += ["ckpt"] if evals["ckpt"].nunique() > 1 else []
    for key in settings:
        given = evals[key].notna()
        labels[given] = labels[given] + f", eval {key}=" + as_text(evals.loc[given, key])
    return labels


def follows_length(values: pd.Series, lengths: pd.Series) -> bool:
    """Whether, where ``values`` is given, each evaluation length goes with a single value of it."""
    given = values.notna()
    pairs = pd.DataFrame({"length": lengths[given], "value": as_text(values[given])}).drop_duplicates()
    return bool(given.any()) and pairs["length"].is_unique


def plot_length_lines(ax: Axes, lengths: pd.Series, values: pd.Series, labels: pd.Series) -> None:
    for i, (label, index) in enumerate(labels.groupby(labels, sort=True).groups.items()):
        stats = values[index].groupby(lengths[index]).agg(["mean", "std"]).sort_index()
        (line,) = ax.plot(stats.index, stats["mean"], label=label, **series_style(i))
        std = stats["std"].fillna(0)
        ax.fill_between(
            stats.index, stats["mean"] - std, stats["mean"] + std, color=line.get_color(), alpha=0.2
        )


def floor_span(ax: Axes, metric: str) -> None:
    """Widen the y axis around its middle to the metric's least height (``MIN_SPANS``), and say so."""
    span = MIN_SPANS.get(metric.rsplit("/", 1)[-1])
    low, high = ax.get_ylim()
    if span is None or high - low >= span:
        return
    middle = (low + high) / 2
    ax.set_ylim(middle - span / 2, middle + span / 2)
    unit = UNITS.get(metric.rsplit("/", 1)[-1], "")
    note(ax, f"y axis at least {span:g} {unit.split(',')[0]} tall: close values stay close")


def new_figure() -> tuple[Figure, Axes]:
    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.add_subplot()
    ax.grid(alpha=0.3)
    return fig, ax


def legend(ax: Axes, title: str) -> None:
    """A legend beside the plot (below it when its labels are long, so the plot keeps its width),
    unless there is only the one line of all runs, or too many lines to read one by one (the tables of
    report.md list them)."""
    handles, labels = ax.get_legend_handles_labels()
    if len(labels) > MAX_LEGEND:
        ax.text(0.01, 0.99, f"{len(labels)} lines: too many to label", transform=ax.transAxes, va="top")
    elif labels and labels != ["all runs"]:
        wide = max(map(len, labels)) > WIDE_LABEL
        where = "outside lower center" if wide else "outside right center"  # clear of a long title
        if wide:  # room for the legend's rows under a plot of the usual height, and for its widest row
            width, height = ax.figure.get_size_inches()
            width = max(width, LABEL_CHAR_INCHES * max(map(len, labels)) + 1.0)
            ax.figure.set_size_inches(width, height + 0.6 + 0.2 * len(labels))
        ax.figure.legend(handles, labels, title=title or None, fontsize="small", loc=where)


def save(fig: Figure, path: Path) -> Path:
    """Write the PNG through a temporary file, so a report never holds half a picture."""
    return write_whole(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
