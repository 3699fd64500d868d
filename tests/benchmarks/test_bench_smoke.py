"""The benchmark suite at smoke-test sizes: the machinery runs and writes a well-formed table.

No timing is asserted (the figures of a tiny run mean nothing); what must hold is the shape of the
output: every row has every column, ratios are positive with min <= median <= max, plots are PNGs.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch._dynamo
from benchmarks.common import Row, Settings, interleaved, peak_memory_mib, speedup
from benchmarks.decode_floor import compiled_floor, greedy_floor
from benchmarks.generation import decoders
from benchmarks.models import GPT_TINY
from benchmarks.report import COLUMNS
from benchmarks.run import TITLES, main

from attnlab.generate import generate

RUN = ("train", "generation", "attention", "mfu")
TINY_NEW_TOKENS = 16  # what the generation section decodes in its tiny run (benchmarks.generation)


def table_rows(markdown: str, header: str) -> list[list[str]]:
    """The cells of the markdown table that starts with ``header``."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    status = main(
        [
            "--tiny",
            "--no-memory",
            "--threads",
            "1",
            "--sections",
            ",".join(RUN),
            "--out",
            str(out),
        ]
    )
    assert status == 0
    return out


def section_tables(markdown: str) -> dict[str, list[list[str]]]:
    """{section heading: the cells of its table} for every ``## ...`` heading followed by a table."""
    tables, heading = {}, None
    for line in markdown.splitlines():
        if line.startswith("## "):
            heading = line[3:]
        elif line.startswith("| measure |") and heading:
            tables[heading] = table_rows(markdown.split(f"## {heading}", 1)[1], "| measure |")
    return tables


def test_each_section_has_its_run_and_a_well_formed_table(results: Path) -> None:
    text = (results / "results.md").read_text(encoding="utf-8")
    tables = section_tables(text)
    assert set(tables) == {f"{TITLES[name]} (`--sections {name}`)" for name in RUN}
    for heading, (header, separator, *rows) in tables.items():
        run_line = text.split(f"## {heading}", 1)[1].split("\n\n")[1]
        assert "Machine: " in run_line and "torch.set_num_threads(1)" in run_line and "--tiny" in run_line
        assert header == list(COLUMNS) and len(separator) == len(COLUMNS)
        assert rows and all(len(row) == len(COLUMNS) for row in rows)
    assert {path.stem for path in (results / "saved").glob("*.json")} == set(RUN)


def test_ratios_are_positive_and_ordered(results: Path) -> None:
    tables = section_tables((results / "results.md").read_text(encoding="utf-8"))
    ratios = [row for _, _, *rows in tables.values() for row in rows if row[2].endswith("×")]
    assert len(ratios) >= 8  # train step (5), generation (5), attention (2)
    for row in ratios:
        median = float(row[2].rstrip("×"))
        assert median > 0, row
        if row[3]:
            low, high = (float(x.strip().rstrip("×")) for x in row[3].split("–"))
            assert 0 < low <= median <= high, row


def test_plots_are_png_files(results: Path) -> None:
    plots = sorted((results / "plots").glob("*.png"))
    assert {p.name for p in plots} == {"ratios.png", "attention_scaling.png", "generation.png"}
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in plots)


def test_interleaved_takes_turns_and_speedup_is_reference_over_ours() -> None:
    calls: list[str] = []
    times = interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3, warmup=1)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warm-up, then the order flips every round
    assert all(len(t) == 3 and min(t) >= 0 for t in times.values())
    assert speedup({"ours": [1.0, 2.0, 4.0], "ref": [2.0, 3.0, 4.0]}, "ours", "ref") == (1.0, 1.5, 2.0)


@pytest.mark.parametrize(
    ("median", "higher", "met"),
    [(1.4, True, True), (1.2, True, False), (2.0, False, True), (4.0, False, False)],
)
def test_target_direction(median: float, higher: bool, met: bool) -> None:
    target = 1.35 if higher else 3.0
    row = Row("s", "m", "c", median, median, median, "×", target=target, higher_is_better=higher)
    assert row.met is met


def test_peak_memory_grows_with_the_explicit_attention_weights() -> None:
    """The explicit path keeps (1, 6, T, T) weights: at T=512 that is 6 MiB per copy, so peak RSS shows it."""
    settings = Settings(size="tiny", threads=1)
    fused = peak_memory_mib(settings, "attention", path="sdpa", seq_len=512)
    explicit = peak_memory_mib(settings, "attention", path="explicit", seq_len=512)
    if math.isnan(fused) or math.isnan(explicit):
        pytest.skip("peak RSS is only measured on Linux (/proc/self/clear_refs)")
    assert 0 < fused < explicit


def test_the_eager_floor_decodes_the_same_greedy_tokens_as_generate() -> None:
    """The hand-written floor must do all of a step's work (a floor that skipped some would flatter HF's
    distance to it): its greedy tokens are attnlab's, for a prompt and for a run longer than it."""
    _, ours, prompt = decoders(GPT_TINY, 24)
    prompt = prompt[:1]
    assert greedy_floor(ours, prompt, 24) == generate(ours, prompt, max_new_tokens=24, temperature=0)


@pytest.mark.slow
def test_the_compiled_floor_decodes_the_same_tokens_and_compiles_once() -> None:
    """The static-shape step under torch.compile must be the floor's arithmetic (same greedy tokens, at
    every call: its caches are fresh each time) in one graph: a recompile per position would time the
    compiler, not the step. The shapes of the tiny generation section's compiled floor (batch 1, 16 new
    tokens): inductor fixes shapes into its kernels, so this reuses that run's kernels (each a g++ run on
    a cold cache) rather than compiling its own."""
    _, ours, prompt = decoders(GPT_TINY, TINY_NEW_TOKENS)
    prompt = prompt[:1]
    torch._dynamo.reset()
    graphs = torch._dynamo.utils.counters["stats"]  # never reset: earlier compiles of the worker count too
    before = graphs["unique_graphs"]
    decode = compiled_floor(ours, prompt, TINY_NEW_TOKENS)
    expected = greedy_floor(ours, prompt, TINY_NEW_TOKENS)
    assert decode() == expected
    assert decode() == expected
    assert graphs["unique_graphs"] - before == 1
