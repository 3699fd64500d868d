"""Every figure a study's README quotes is in a file of its ``results/`` (``experiments/check_figures.py``):
a number typed by hand, or left from an earlier run, fails here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
from check_figures import is_saved, missing_figures, quoted_figures, saved_numbers, studies

# Studies whose READMEs still quote figures no saved file holds, and why; strict, so that the entry
# must go once the study's run.sh saves them.
NOT_YET_BACKED: dict[str, str] = {}


def study_cases() -> list:
    marks = {name: pytest.mark.xfail(strict=True, reason=why) for name, why in NOT_YET_BACKED.items()}
    return [pytest.param(s, id=s.name, marks=marks.get(s.name, ())) for s in studies()]


@pytest.mark.parametrize("study", study_cases())
def test_every_quoted_figure_is_in_a_results_file(study: Path) -> None:
    assert missing_figures(study) == []


def test_figures_are_the_numbers_of_tables_and_bold_text() -> None:
    readme = "Prose 3.14 is not a figure.\n| a | 2.0213 | 1,554 | 1.9e-06 |\nA **0.46** of the time."
    assert quoted_figures(readme) == ["0.46", "1,554", "1.9e-06", "2.0213"]


def test_a_figure_is_saved_when_a_saved_number_rounds_to_it() -> None:
    from decimal import Decimal

    saved = {Decimal("2.02127"), Decimal("0.9777"), Decimal("0.2115"), Decimal("1554.2")}
    assert is_saved("2.0213", saved) and is_saved("97.77", saved) and is_saved("1,554", saved)
    assert is_saved("0.211", saved)  # as a float prints it
    assert not is_saved("2.0214", saved)
    assert not is_saved("2.021275", saved)  # more digits than any file holds: typed by hand


def test_a_comma_inside_a_csv_cell_or_a_list_separates_numbers(tmp_path: Path) -> None:
    from decimal import Decimal

    (tmp_path / "runs.csv").write_text('task,lengths,loss\npasskey,"3,3.3997",[16,128,256]\n')
    (tmp_path / "wall.txt").write_text("copy took 1,912 s\n")
    saved = saved_numbers(tmp_path)
    assert {Decimal("3"), Decimal("3.3997"), Decimal("16"), Decimal("128"), Decimal("1912")} <= saved
    assert Decimal("33.3997") not in saved  # "3,3.3997" is not a thousands separator
    assert is_saved("3.3997", saved) and not is_saved("33.3997", saved)
