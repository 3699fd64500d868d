"""Every figure a study's README quotes must be in a file of its ``results/``: a number typed by hand
is found by this check, not by a reader.

    python experiments/check_figures.py            # every study: the figures its results do not hold
    python experiments/check_figures.py muon       # one study

A figure is a number with a decimal point or a thousands separator (``2.0213``, ``97.77%``,
``1,554``) in a row of a README table or in bold text. It is found when some number in a text file
under the study's ``results/`` (Markdown, CSV, JSON) rounds to it at the README's precision (a
fraction also as a percentage; a difference also by its size). A value cited from a paper or another
tool belongs in ``results/references.md`` with its source, like any other figure.
"""

from __future__ import annotations

import re
import sys
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path

EXPERIMENTS = Path(__file__).resolve().parent
NUMBER = re.compile(
    r"(?<![\w.])[-+−]?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d])|(?<![\w.,])[-+−]?\d+\.\d+(?:e[-+]?\d+)?"
)
BOLD = re.compile(r"\*\*(.+?)\*\*")
RESULT_SUFFIXES = (".md", ".csv", ".json", ".txt")


def quoted_figures(readme: str) -> list[str]:
    """The figures of a README: numbers in its table rows and in its bold text, as written."""
    places = [line for line in readme.splitlines() if line.lstrip().startswith("|")]
    places += BOLD.findall(readme)
    return sorted({n for place in places for n in NUMBER.findall(place)})


def as_decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", "").replace("−", "-"))
    except InvalidOperation:
        return None


SAVED_RUN = re.compile(r"[-+]?\d[\d,]*\.?\d*(?:[eE][-+]?\d+)?")
THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def readings(run: str) -> list[str]:
    """The numbers a run of digits, commas and points may be: each comma-separated piece (``3,3.3997``
    in a CSV cell or a list is 3 and 3.3997), and the whole when its commas are thousands separators
    (``1,554``; every comma followed by exactly three digits)."""
    pieces = [p.rstrip(".") for p in run.split(",") if p.rstrip(".")]
    return [*pieces, run] if THOUSANDS.fullmatch(run.rstrip(".")) else pieces


def saved_numbers(results: Path) -> set[Decimal]:
    """Every number in the text files under ``results``, with its sign dropped."""
    numbers: set[Decimal] = set()
    for path in results.rglob("*"):
        if path.is_file() and path.suffix in RESULT_SUFFIXES:
            text = path.read_text(encoding="utf-8", errors="replace")
            for run in SAVED_RUN.findall(text):
                for raw in readings(run.rstrip(",.")):
                    value = as_decimal(raw)
                    if value is not None:
                        numbers.add(abs(value))
    return numbers


def is_saved(figure: str, saved: set[Decimal]) -> bool:
    """Whether some saved number, as a value or as a percentage, rounds to ``figure``."""
    value = as_decimal(figure)
    if value is None:
        return True
    value = abs(value)
    step = Decimal(1).scaleb(value.as_tuple().exponent)
    for number in saved:
        for candidate in (number, number * 100):
            if rounds_to(candidate, step, value):
                return True
    return False


def rounds_to(number: Decimal, step: Decimal, value: Decimal) -> bool:
    """``number`` shown at the precision ``step`` is ``value``: rounded half up, half to even, or as
    a float prints it (0.2115 is stored as 0.21149..., and printed 0.211)."""
    if abs(number - value) > step:
        return False
    rounded = [number.quantize(step, rounding=r) for r in (ROUND_HALF_UP, ROUND_HALF_EVEN)]
    printed = Decimal(f"{float(number):.{max(0, -step.as_tuple().exponent)}f}")
    return value in (*rounded, printed)


def missing_figures(study: Path) -> list[str]:
    """The figures of ``study``'s README that no file of its ``results/`` holds."""
    readme = (study / "README.md").read_text(encoding="utf-8")
    saved = saved_numbers(study / "results") if (study / "results").is_dir() else set()
    return [f for f in quoted_figures(readme) if not is_saved(f, saved)]


def studies() -> list[Path]:
    return sorted(p.parent for p in EXPERIMENTS.glob("*/README.md"))


def main(names: list[str]) -> int:
    chosen = [EXPERIMENTS / n for n in names] if names else studies()
    failed = 0
    for study in chosen:
        missing = missing_figures(study)
        failed += bool(missing)
        print(
            f"{study.name}: {'every figure saved' if not missing else 'not in results/: ' + ', '.join(missing)}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
