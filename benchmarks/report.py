"""``results.md`` (markdown) and the plots (PNG) from the sections' saved results."""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks.common import Row
from benchmarks.saved import SectionResult

UNITS = {
    "×": "{:.2f}×",
    "%": "{:.1f}%",
    "MiB": "{:.0f} MiB",
    "s": "{:.2f} s",
    "GB/s": "{:.1f} GB/s",
    "GFLOP/s": "{:.1f} GFLOP/s",
}
COLUMNS = ("measure", "configuration", "median", "min – max", "target", "met", "detail")
METHOD = (
    "Each comparison runs in one process, the implementations taking turns (order reversed every round) "
    "after warm-up; a ratio is computed per round and reported as median with min – max over the rounds "
    "(above 1×: attnlab is faster). Same weights on both sides (mapped by `attnlab.models.hf`), dropout 0, "
    "fp32. Peak memory is the peak RSS (VmHWM, reset through /proc/self/clear_refs) above the RSS after "
    "imports, in a fresh process per implementation, since the CPU allocator keeps freed memory. Only "
    "ratios measured side by side compare; absolute times move with the machine and its load."
)


def value(x: float, unit: str) -> str:
    return "n/a" if math.isnan(x) else UNITS.get(unit, "{:.3g} " + unit).format(x)


def verdict(row: Row) -> str:
    return {None: "", True: "met", False: "**missed**"}[row.met]


def cells(row: Row) -> list[str]:
    spread = (
        ""
        if row.low == row.high or math.isnan(row.median)
        else f"{value(row.low, row.unit)} – {value(row.high, row.unit)}"
    )
    return [
        row.measure,
        row.config,
        value(row.median, row.unit),
        spread,
        row.target_text,
        verdict(row),
        row.detail,
    ]


def markdown_table(header: tuple[str, ...] | list[str], lines: list[list[str]]) -> str:
    def line(items: list[str] | tuple[str, ...]) -> str:
        return "| " + " | ".join(str(i).replace("|", "\\|") for i in items) + " |"

    return "\n".join([line(header), line(["---"] * len(header)), *(line(items) for items in lines)])


def header(command: str, written: str, ran: list[str]) -> list[str]:
    """The page's title, how it was written and the method of every section."""
    return [
        "# attnlab benchmarks",
        "",
        f"Written {written} by `{command}` (`make bench` runs the full suite), which ran "
        f"{', '.join(f'`{name}`' for name in ran) or 'no section'}: each section below shows its last saved "
        "run (`benchmarks/saved/<section>.json`, replaced when the section runs again), with its date, command "
        "and machine; the GPU tables are the files of `benchmarks/gpu_runs/`. The history of the figures is "
        "in git.",
        "",
        f"Method: {METHOD}",
        "",
    ]


def targets(results: list[SectionResult]) -> list[str]:
    """One table of every row that has a target, across the sections."""
    lines = [
        [
            r.target_text,
            f"{res.name}: {r.measure}",
            r.config,
            value(r.median, r.unit),
            verdict(r),
            res.measured,
        ]
        for res in results
        for r in res.rows
        if r.target is not None
    ]
    header = ("target", "measure", "configuration", "measured (median)", "met", "measured on")
    return ["## Targets", "", markdown_table(header, lines), ""] if lines else []


def took(minutes: float | None) -> str:
    return "" if minutes is None else f", {minutes:.1f} min"


def section(result: SectionResult, title: str) -> list[str]:
    """A section's heading, the run that measured it, its table and its notes."""
    lines = [
        f"## {title} (`--sections {result.name}`)",
        "",
        f"Measured {result.measured} by `{result.command}` ({result.size} suite{took(result.minutes)}). "
        f"Machine: {result.machine}; {result.versions}; "
        f"`torch.set_num_threads({result.threads})`.",
        "",
    ]
    if result.rows:
        lines += [markdown_table(COLUMNS, [cells(r) for r in result.rows]), ""]
    if result.notes:
        lines += [*(f"- {note}" for note in result.notes), ""]
    return lines


def gpu_runs(out_dir: Path) -> list[str]:
    """The tables that ``benchmarks.gpu`` wrote, as they are, one sub-section per file of each run."""
    lines = []
    for run in sorted(p for p in (out_dir / "gpu_runs").glob("*") if p.is_dir()):
        lines += [f"## On a GPU: `benchmarks/gpu_runs/{run.name}` (`python -m benchmarks.gpu`)", ""]
        device = run / "gpu.txt"
        if device.is_file():
            lines += [
                "Device (`nvidia-smi`, torch and CUDA versions):",
                "",
                "```",
                device.read_text().strip(),
                "```",
                "",
            ]
        for table in sorted(run.glob("*.md")):
            text = table.read_text(encoding="utf-8").strip().splitlines()
            lines += [f"### {table.stem}", "", *[line for line in text if not line.startswith("# ")], ""]
    return lines


def standalone_runs(out_dir: Path) -> list[str]:
    """The sections a script of their own measured and wrote (``benchmarks/standalone/*.md``), as written."""
    lines = []
    for table in sorted((out_dir / "standalone").glob("*.md")):
        lines += [*table.read_text(encoding="utf-8").strip().splitlines(), ""]
    return lines


def write_results(
    results: list[SectionResult],
    titles: dict[str, str],
    out_dir: Path,
    *,
    command: str,
    written: str,
    ran: list[str],
    plots: list[Path],
) -> Path:
    """Write ``results.md`` into ``out_dir`` from the saved sections and the GPU runs; return its path."""
    text = header(command, written, ran) + targets(results)
    for result in results:
        text += section(result, titles[result.name])
    text += standalone_runs(out_dir)
    text += gpu_runs(out_dir)
    if plots:
        text += ["## Plots", "", *(f"![{p.stem}]({p.relative_to(out_dir).as_posix()})" for p in plots), ""]
    path = out_dir / "results.md"
    path.write_text("\n".join(text), encoding="utf-8")
    return path
