"""Every figure a study's README quotes comes from a file of its ``results/`` (``experiments/check_figures.py``):
a number typed by hand, or left from an earlier run, fails here. A README that names its sources
(``SOURCED``: every study) has each figure recomputed from the file and cell it names, so that any
figure changed by one unit in its last digit fails; a README that names no source fails."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
from check_figures import (
    block_figures,
    block_problems,
    checked_blocks,
    figure_offsets,
    figure_problems,
    is_sourced,
    rounds_to,
    source_value,
    sourced_problems,
    studies,
)

# Studies whose README names the source of each figure: every study (a new one joins here; a README
# that names no source fails).
SOURCED = [
    "attention_variants",
    "compression",
    "families",
    "induction_heads",
    "length_generalisation",
    "muon",
    "mup",
    "nanogpt_baby",
    "nanogpt_shakespeare_char",
    "packing",
    "parity",
    "pos_extrapolation",
    "scaling",
]


@pytest.mark.parametrize("study", studies(), ids=lambda study: study.name)
def test_every_quoted_figure_is_in_a_results_file(study: Path) -> None:
    assert figure_problems(study) == []


def test_the_sourced_studies_are_those_whose_readme_names_sources() -> None:
    assert [s.name for s in studies() if is_sourced((s / "README.md").read_text(encoding="utf-8"))] == SOURCED


def test_every_study_names_its_sources() -> None:
    assert [s.name for s in studies()] == SOURCED


def changed_by_one(figure: str) -> str:
    """The figure with its last digit one higher (9: one lower)."""
    at = max(i for i, c in enumerate(figure) if c.isdigit())
    digit = int(figure[at])
    return figure[:at] + str(digit + 1 if digit < 9 else digit - 1) + figure[at + 1 :]


@pytest.mark.parametrize("name", SOURCED)
def test_any_figure_changed_by_one_in_its_last_digit_fails(name: str) -> None:
    study = Path(__file__).resolve().parents[1] / "experiments" / name
    readme = (study / "README.md").read_text(encoding="utf-8")
    assert figure_offsets(readme), "no figures read: the extraction no longer matches the README"
    assert sourced_problems(study, readme) == []
    passed = []  # the README's other blocks are unchanged and pass: the changed block is checked alone
    for start, _, block in checked_blocks(readme):
        for figure, _, at in block_figures(block):
            changed = block[:at] + changed_by_one(figure) + block[at + len(figure) :]
            if not block_problems(study, start, changed):
                passed.append(f"{figure} on line {start + block[:at].count(chr(10))}")
    assert passed == []


def test_a_readme_has_the_problems_of_its_blocks() -> None:
    """What the per-block check above relies on: a README's problems are its blocks' problems."""
    study = Path(__file__).resolve().parents[1] / "experiments" / "mup"
    readme = (study / "README.md").read_text(encoding="utf-8")
    (at, figure), *_ = figure_offsets(readme)
    changed = readme[:at] + changed_by_one(figure) + readme[at + len(figure) :]
    problems = sourced_problems(study, changed)
    assert len(problems) == 1 and problems[0].startswith("line ")
    assert problems == [
        p for start, _, block in checked_blocks(changed) for p in block_problems(study, start, block)
    ]


@pytest.mark.parametrize("name", SOURCED)
def test_a_missing_source_file_fails(name: str, tmp_path: Path) -> None:
    study = Path(__file__).resolve().parents[1] / "experiments" / name
    readme = (study / "README.md").read_text(encoding="utf-8").replace("results/", "missing/")
    assert any("no such file" in problem for problem in sourced_problems(study, readme))


def test_each_kind_of_source_is_read(tmp_path: Path) -> None:
    from decimal import Decimal

    results = tmp_path / "results"
    results.mkdir()
    (results / "t.md").write_text("| pos | 64 | 128 |\n|---|---|---|\n| rope | 1.836 ± 0.003 | 1,872 |\n")
    (results / "r.csv").write_text("pos,seed,loss\nrope,1,1.8391\nrope,2,1.8346\n")
    (results / "s.json").write_text('{"a": {"b": [0.5, 2.25]}}')
    (results / "w.txt").write_text("copy took 1,912 s and 3.5 min\n")
    assert source_value(tmp_path, "results/t.md:[rope][64]") == Decimal("1.836")
    assert source_value(tmp_path, "results/t.md:[rope][64]#2") == Decimal("0.003")
    assert source_value(tmp_path, "results/t.md:[rope][128]") == Decimal("1,872".replace(",", ""))
    assert source_value(tmp_path, "results/r.csv:{pos=rope,seed=2}[loss]") == Decimal("1.8346")
    assert source_value(tmp_path, "results/s.json:a.b.1") == Decimal("2.25")
    assert source_value(tmp_path, 'results/w.txt:"copy took"#2') == Decimal("3.5")
    readme = (
        "A loss of 1.836 and 1.84, 0.45 less: 1.9.\n"
        "<!-- figures: 1.836 = results/t.md:[rope][64]; 1.84 = results/r.csv:{pos=rope,seed=1}[loss]; "
        "0.45 = [results/s.json:a.b.1] - [results/s.json:a.b.0] * 3.6; 1.9 = setting (a threshold) -->\n"
        "\n<!-- figures from results/t.md -->\n| pos | 64 |\n|---|---|\n| rope | 1.836 ± 0.003 | 1,872 |\n"
    )
    assert sourced_problems(tmp_path, readme) == []
    assert (
        sourced_problems(tmp_path, readme.replace("and 1.84,", "and 1.83,"))[0]
        == "line 1: 1.83 names no source"
    )
    assert "which is 1.8391" in sourced_problems(tmp_path, readme.replace("1.84", "1.85"))[0]
    assert "does not hold" in sourced_problems(tmp_path, readme.replace("| 1,872", "| 1,873"))[0]


def test_a_source_value_matches_a_figure_as_rounded_or_as_a_float_prints_it() -> None:
    from decimal import Decimal

    assert rounds_to(Decimal("2.02127"), Decimal("0.0001"), Decimal("2.0213"))
    assert rounds_to(Decimal("0.2115"), Decimal("0.001"), Decimal("0.211"))  # as a float prints it
    assert not rounds_to(Decimal("2.02127"), Decimal("0.0001"), Decimal("2.0214"))


def test_a_readme_that_names_no_source_fails(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "report.md").write_text("| run | loss |\n|---|---|\n| a | 2.0213 |\n")
    (tmp_path / "README.md").write_text("| run | loss |\n|---|---|\n| a | 2.0213 |\n")
    assert figure_problems(tmp_path)[0].startswith("README.md names no source")
