"""The results table (markdown) and the plots (PNG) from the rows the sections return."""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks.common import Row, Settings, machine, machine_short, versions

UNITS = {
    "×": "{:.2f}×",
    "%": "{:.1f}%",
    "MiB": "{:.0f} MiB",
    "s": "{:.2f} s",
    "GB/s": "{:.1f} GB/s",
    "GFLOP/s": "{:.1f} GFLOP/s",
}
COLUMNS = (
    "section",
    "measure",
    "configuration",
    "median",
    "min – max",
    "target",
    "met",
    "detail",
    "machine",
    "versions",
)


def value(x: float, unit: str) -> str:
    return "n/a" if math.isnan(x) else UNITS.get(unit, "{:.3g} " + unit).format(x)


def verdict(row: Row) -> str:
    return {None: "", True: "met", False: "**missed**"}[row.met]


def cells(row: Row, machine_text: str, versions_text: str) -> list[str]:
    spread = (
        ""
        if row.low == row.high or math.isnan(row.median)
        else f"{value(row.low, row.unit)} – {value(row.high, row.unit)}"
    )
    return [
        row.section,
        row.measure,
        row.config,
        value(row.median, row.unit),
        spread,
        row.target_text,
        verdict(row),
        row.detail,
        machine_text,
        versions_text,
    ]


def markdown_table(header: tuple[str, ...] | list[str], lines: list[list[str]]) -> str:
    def line(items: list[str] | tuple[str, ...]) -> str:
        return "| " + " | ".join(str(i).replace("|", "\\|") for i in items) + " |"

    return "\n".join([line(header), line(["---"] * len(header)), *(line(items) for items in lines)])


def write_results(
    rows: list[Row], settings: Settings, command: str, started: str, minutes: float, plots: list[Path]
) -> Path:
    """Write ``results.md`` into ``settings.out_dir`` and return its path."""
    m, v = machine_short(), versions()
    targets = [r for r in rows if r.target is not None]
    text = [
        "# attnlab benchmarks",
        "",
        f"Reproduce with `{command}` ({settings.size} suite; `make bench` runs the full one). "
        f"Measured {started}, {minutes:.1f} min.",
        "",
        f"- Machine: {machine()}",
        f"- Versions: {v}",
        f"- Threads: `torch.set_num_threads({settings.threads})` in every process",
        "- Method: each comparison runs in one process, the implementations taking turns (order reversed every "
        "round) after warm-up; a ratio is computed per round and reported as median with min – max over the "
        "rounds (above 1×: attnlab is faster). Same weights on both sides (mapped by `attnlab.models.hf`), "
        "dropout 0, fp32. Peak memory is the peak RSS (VmHWM, reset through /proc/self/clear_refs) above the "
        "RSS after imports, in a fresh process per implementation, since the CPU allocator keeps freed memory.",
        "",
        "## Targets",
        "",
        markdown_table(
            ("target", "measure", "configuration", "measured (median)", "met"),
            [[r.target_text, r.measure, r.config, value(r.median, r.unit), verdict(r)] for r in targets],
        ),
        "",
        "## All results",
        "",
        markdown_table(COLUMNS, [cells(r, m, v) for r in rows]),
        "",
    ]
    if settings.notes:
        text += ["## Notes", "", *(f"- {note}" for note in settings.notes), ""]
    if plots:
        text += [
            "## Plots",
            "",
            *(f"![{p.stem}]({p.relative_to(settings.out_dir).as_posix()})" for p in plots),
            "",
        ]
    path = settings.out_dir / "results.md"
    path.write_text("\n".join(text), encoding="utf-8")
    return path


def plot(rows: list[Row], out_dir: Path) -> list[Path]:
    """PNG plots under ``out_dir/plots``: speed-ups vs references, attention scaling, generation speed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = out_dir / "plots"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    ratios = [r for r in rows if r.unit == "×" and not math.isnan(r.median)]
    if ratios:
        fig, ax = plt.subplots(figsize=(10, 0.45 * len(ratios) + 1.2))
        labels = [f"{r.measure}\n{r.config[:60]}" for r in ratios]
        y = range(len(ratios))
        ax.barh(y, [r.median for r in ratios], color="tab:blue", alpha=0.7)
        ax.errorbar(
            [r.median for r in ratios],
            y,
            xerr=[[r.median - r.low for r in ratios], [r.high - r.median for r in ratios]],
            fmt="none",
            c="k",
        )
        for i, r in enumerate(ratios):
            if r.target is not None:
                ax.plot([r.target, r.target], [i - 0.4, i + 0.4], c="tab:red", lw=2)
        ax.axvline(1.0, c="gray", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_yticks(list(y), labels, fontsize=6)
        ax.invert_yaxis()
        ax.set_xlabel("ratio (median, min–max over rounds; red: target)")
        fig.tight_layout()
        paths.append(folder / "ratios.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    scaling = [r for r in rows if "seq_len" in r.extra]
    if scaling:
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        t = [r.extra["seq_len"] for r in scaling]
        for path, style in (("sdpa", "o-"), ("explicit", "s--")):
            left.plot(t, [r.extra["ms"][path] for r in scaling], style, label=path)
            right.plot(t, [r.extra["mib"][path] for r in scaling], style, label=path)
        for ax, what in ((left, "time per fwd+bwd (ms)"), (right, "peak memory above imports (MiB)")):
            ax.set_xscale("log", base=2)
            if any(
                y > 0 for line in ax.get_lines() for y in line.get_ydata()
            ):  # memory may be unmeasured (NaN)
                ax.set_yscale("log")
            ax.set_xlabel("sequence length")
            ax.set_ylabel(what)
            ax.legend()
        fig.suptitle("causal self-attention, SDPA vs explicit (weights returned)")
        fig.tight_layout()
        paths.append(folder / "attention_scaling.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    decoding = [r for r in rows if "speeds" in r.extra]
    if decoding:
        fig, ax = plt.subplots(figsize=(7, 4))
        names = sorted({k for r in decoding for k in r.extra["speeds"]})
        width = 0.8 / len(names)
        for j, name in enumerate(names):
            ax.bar(
                [i + j * width for i in range(len(decoding))],
                [r.extra["speeds"].get(name, 0.0) for r in decoding],
                width,
                label=name,
            )
        ax.set_xticks(
            [i + 0.4 - width / 2 for i in range(len(decoding))],
            [f"{r.extra['size']} B{r.extra['batch']}" for r in decoding],
        )
        ax.set_ylabel("new tokens/s (greedy)")
        ax.set_yscale("log")
        ax.legend()
        fig.tight_layout()
        paths.append(folder / "generation.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths
