"""Every figure a study's README quotes must come from a file of its ``results/``: a number typed by
hand is found by this check, not by a reader.

    python experiments/check_figures.py            # every study: the figures its results do not back
    python experiments/check_figures.py muon       # one study

A README names the source of each figure (the ``<!-- figures ... -->`` comments, see "Sourced
figures" below), and every figure is recomputed from the file and cell or key it names: a changed
digit, a figure without a source, a missing source file and a README that names no source each fail.
A value cited from a paper or another tool belongs in ``results/references.md`` with its source, like
any other figure.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path

EXPERIMENTS = Path(__file__).resolve().parent
NUMBER = re.compile(
    r"(?<![\w.])[-+−]?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d])|(?<![\w.,])[-+−]?\d+\.\d+(?:e[-+]?\d+)?"
)


def as_decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", "").replace("−", "-"))
    except InvalidOperation:
        return None


def rounds_to(number: Decimal, step: Decimal, value: Decimal) -> bool:
    """``number`` shown at the precision ``step`` is ``value``: rounded half up, half to even, or as
    a float prints it (0.2115 is stored as 0.21149..., and printed 0.211)."""
    if abs(number - value) > step:
        return False
    rounded = [number.quantize(step, rounding=r) for r in (ROUND_HALF_UP, ROUND_HALF_EVEN)]
    printed = Decimal(f"{float(number):.{max(0, -step.as_tuple().exponent)}f}")
    return value in (*rounded, printed)


# --- Sourced figures ------------------------------------------------------------------------------
#
# A study whose README names its sources (a ``<!-- figures ... -->`` comment) is checked strictly: each
# figure of the README (a number with a decimal point or a thousands separator, in a table, in bold or
# in a sentence; not in code spans, headings, links or comments) is recomputed from the file and cell
# or key its block names, and a block is a paragraph or a table with the comments on its own lines
# (no blank line between). A block's comments:
#
#   <!-- figures from results/tables.md -->
#       every row of the table below is a row of that file, as written (a script wrote the table);
#   <!-- figures: 0.013 = results/tables.md:[alibi][512 minus 64]; 1.836 = results/runs.csv:{pos=rope}[loss] -->
#       each figure of the block with its source, in the order the figures first appear (so that a
#       changed figure cannot take another's entry); one entry serves every occurrence in the block;
#   <!-- not results: settings of the runs, not measurements -->
#       the block's numbers are no figures (the reason is required);
#   an entry ``0.05 = setting (the claim's threshold)`` marks one number of a block as no measurement.
#
# A source is ``<file>:<locator>``, the file relative to the study's folder:
#   [row][column]        a Markdown table of the file: the first table with that column header and a
#                        row whose first cell is ``row``; ``#k``: the cell's k-th number (default 1st)
#   {key=value,...}[col] a CSV file: the one row with those values, its column ``col``
#   a.b.0                a JSON file: the value at that key path (list items by index)
#   "text"#k             any text file: the k-th number after the first occurrence of ``text`` (1st)
# or an arithmetic expression over sources in brackets: ``0.07 = [results/tables.md:[alibi][64]] -
# [results/tables.md:[rope][64]]``. The figure must be the source's value at the figure's precision
# (rounded as ``rounds_to`` allows; a fraction also as a percentage; the sign as written or dropped).

COMMENT = re.compile(r"<!--\s*(figures from|figures:|not results:)(.*?)-->", re.S)
SOURCE_NUMBER = re.compile(r"[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")
CODE_SPAN = re.compile(r"`[^`]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")


class SourceError(Exception):
    """A source that cannot be read: a missing file, key, row or column, said in one line."""


def is_sourced(readme: str) -> bool:
    return bool(COMMENT.search(readme))


def blank(pattern: re.Pattern, text: str) -> str:
    """``text`` with each match of ``pattern`` replaced by spaces (newlines kept): offsets stay."""
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def blocks(readme: str) -> list[tuple[int, int, str]]:
    """The README's paragraphs and tables outside fenced code: (first line's number, offset, text)."""
    found, current, start, offset, fenced, position = [], [], 0, 0, False, 0
    for number, line in enumerate(readme.splitlines(keepends=True), 1):
        here, position = position, position + len(line)
        if line.lstrip().startswith("```"):
            fenced = not fenced
            line = ""
        if fenced or not line.strip():
            if current:
                found.append((start, offset, "".join(current).rstrip("\n")))
            current = []
            continue
        if not current:
            start, offset = number, here
        current.append(line)
    if current:
        found.append((start, offset, "".join(current).rstrip("\n")))
    return found


def block_figures(block: str) -> list[tuple[str, str, int]]:
    """(figure, the line it is on, its offset in the block) for each figure of a block: code spans,
    link targets, comments and headings left out."""
    text = blank(LINK_TARGET, blank(CODE_SPAN, blank(COMMENT, block)))
    figures, position = [], 0
    for line in text.splitlines(keepends=True):
        if not line.lstrip().startswith("#"):
            original = block[position : position + len(line)].rstrip("\n")
            figures += [(m.group(), original, position + m.start()) for m in NUMBER.finditer(line)]
        position += len(line)
    return figures


def checked_blocks(readme: str) -> list[tuple[int, int, str]]:
    """``blocks`` but those marked ``<!-- not results: why -->``: the blocks whose figures are checked."""
    return [
        (start, offset, block)
        for start, offset, block in blocks(readme)
        if not any(kind == "not results:" and why.strip() for kind, why in COMMENT.findall(block))
    ]


def figure_offsets(readme: str) -> list[tuple[int, str]]:
    """Where each figure of a sourced README is (its offset in the text), for tests that change one."""
    return [
        (offset + at, figure)
        for _, offset, block in checked_blocks(readme)
        for figure, _, at in block_figures(block)
    ]


def numbers_in(text: str) -> list[Decimal]:
    return [d for raw in SOURCE_NUMBER.findall(text) if (d := as_decimal(raw)) is not None]


def markdown_tables(text: str) -> list[list[list[str]]]:
    tables, current = [], []
    for line in text.splitlines():
        if line.lstrip().startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= set("-: ") for c in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


def source_text(path: Path) -> str:
    """A source file's text, read once per version of the file (the one-digit test rechecks a README
    once per figure, against the same files)."""
    return cached_text(path, path.stat().st_mtime_ns)


@lru_cache(maxsize=256)
def cached_text(path: Path, version: int) -> str:
    return path.read_text(encoding="utf-8")


@lru_cache(maxsize=256)
def file_rows(text: str) -> frozenset[str]:
    """Every line of a file as a table row (its cells stripped): what a copied table's rows must be."""
    return frozenset(normalise(line) for line in text.splitlines())


@lru_cache(maxsize=256)
def csv_rows(text: str) -> tuple:
    return tuple(csv.DictReader(text.splitlines()))


@lru_cache(maxsize=256)
def parsed_tables(text: str) -> tuple:
    return tuple(markdown_tables(text))


def source_value(study: Path, source: str) -> Decimal:
    """The number a source names (see above)."""
    file, _, locator = source.strip().partition(":")
    path = study / file
    if not path.is_file():
        raise SourceError(f"{file}: no such file")
    return located_value(path, path.stat().st_mtime_ns, file, locator)


@lru_cache(maxsize=4096)
def located_value(path: Path, version: int, file: str, locator: str) -> Decimal:
    """The number ``locator`` names in the file at ``path`` (``version``: its modification time, so
    that a changed file is read again)."""
    text = source_text(path)
    index = 1
    if (m := re.fullmatch(r"(.*)#(\d+)", locator)) and not locator.startswith("{"):
        locator, index = m.group(1), int(m.group(2))
    if m := re.fullmatch(r"\[(.+?)\]\[(.+)\]", locator):
        row, column = m.group(1), m.group(2)
        for table in parsed_tables(text):
            header = table[0]
            if column in header:
                cell = next((r[header.index(column)] for r in table[1:] if r[0] == row), None)
                if cell is not None:
                    return nth(numbers_in(cell), index, f"{file}: [{row}][{column}] = {cell!r}")
        raise SourceError(f"{file}: no table with a column {column!r} and a row {row!r}")
    if m := re.fullmatch(r"\{(.+)\}\[(.+)\]", locator):
        wanted = dict(pair.split("=", 1) for pair in m.group(1).split(","))
        rows = [r for r in csv_rows(text) if all(r.get(k) == v for k, v in wanted.items())]
        if len(rows) != 1 or m.group(2) not in rows[0]:
            raise SourceError(
                f"{file}: {len(rows)} rows with {wanted} (one wanted) or no column {m.group(2)!r}"
            )
        return nth(numbers_in(rows[0][m.group(2)]), 1, f"{file}: {locator}")
    if m := re.fullmatch(r'"(.+)"', locator):
        at = text.find(m.group(1))
        if at < 0:
            raise SourceError(f"{file}: no text {m.group(1)!r}")
        return nth(numbers_in(text[at + len(m.group(1)) :]), index, f"{file}: after {m.group(1)!r}")
    if file.endswith(".json"):
        value = json.loads(text)
        for key in locator.split("."):
            try:
                value = value[int(key)] if isinstance(value, list) else value[key]
            except (KeyError, IndexError, ValueError, TypeError):
                raise SourceError(f"{file}: no key {locator}") from None
        return nth(numbers_in(str(value)), 1, f"{file}: {locator}")
    raise SourceError(
        f'{file}:{locator}: not a source ([row][column], {{key=value}}[column], a.b.c or "text")'
    )


def nth(numbers: list[Decimal], index: int, where: str) -> Decimal:
    if len(numbers) < index:
        raise SourceError(f"{where}: no number {index}")
    return numbers[index - 1]


def evaluate(study: Path, source: str) -> Decimal:
    """A source, or an arithmetic expression over sources in brackets."""
    source = source.strip()
    if not re.match(r"[\[(\d]", source):  # a source alone, not an expression
        return source_value(study, source)
    values: list[Decimal] = []
    expression, depth, inner = "", 0, ""
    for char in source:
        if char == "[":
            depth += 1
            if depth == 1:
                continue
        elif char == "]":
            depth -= 1
            if depth == 0:
                values.append(source_value(study, inner))
                expression, inner = f"{expression}v[{len(values) - 1}]", ""
                continue
        if depth:
            inner += char
        else:
            expression += char
    if depth or not re.fullmatch(r"(?:v\[\d+\]|[\d\s+\-*/().]|abs|min|max|,)*", expression):
        raise SourceError(f"{source}: not an arithmetic expression over [sources]")
    expression = re.sub(r"(?<![\w\[])\d+(?:\.\d+)?", lambda m: f"D('{m.group()}')", expression)
    scope = {"v": values, "D": Decimal, "abs": abs, "min": min, "max": max}
    return Decimal(str(eval(expression, {"__builtins__": {}}, scope)))  # only sources, numbers and arithmetic


def matches(figure: str, value: Decimal) -> bool:
    shown = as_decimal(figure)
    if shown is None:
        return False
    step = Decimal(1).scaleb(shown.as_tuple().exponent)
    return any(rounds_to(abs(c), step, abs(shown)) for c in (value, value * 100))


def sourced_problems(study: Path, readme: str) -> list[str]:
    """What is wrong with a sourced README's figures: each figure without a source, each source that
    cannot be read or says another number, and each table row not in its file."""
    problems = [p for start, _, block in checked_blocks(readme) for p in block_problems(study, start, block)]
    return sorted(set(problems), key=problems.index)


def block_problems(study: Path, start: int, block: str) -> list[str]:
    """``sourced_problems`` of one block (a paragraph or table beginning on line ``start``): a block's
    figures name their sources in its own comments, so each block is checked on its own."""
    table_file, entries = block_sources(block)
    table_rows: frozenset[str] = frozenset()
    if table_file is not None:
        path = study / table_file
        if not path.is_file():
            return [f"line {start}: figures from {table_file}: no such file"]
        table_rows = file_rows(source_text(path))
    problems: list[str] = []
    checked: dict[str, bool] = {}
    for figure, line, _ in block_figures(block):
        if table_file is not None and line.lstrip().startswith("|"):
            if normalise(line) not in table_rows:
                problems.append(f"line {start}: a row that {table_file} does not hold: {line.strip()[:80]}")
            continue
        if figure in checked:
            continue
        problem = figure_problem(study, figure, entries, len(checked))
        checked[figure] = problem is None
        if problem is not None:
            problems.append(f"line {start}: {problem}")
    return sorted(set(problems), key=problems.index)


def block_sources(block: str) -> tuple[str | None, dict[str, str]]:
    """The block's ``<!-- figures from FILE -->`` (or None) and its ``<!-- figures: v = source; ... -->``
    entries, in their order."""
    comments = COMMENT.findall(block)
    table_file = next((body.strip() for kind, body in comments if kind == "figures from"), None)
    entries: dict[str, str] = {}
    for kind, body in comments:
        if kind == "figures:":
            for entry in filter(None, (e.strip() for e in body.split(";"))):
                figure, _, source = entry.partition("=")
                entries[figure.strip()] = source.strip()
    return table_file, entries


def figure_problem(study: Path, figure: str, entries: dict[str, str], number: int) -> str | None:
    """What is wrong with the block's ``number``-th distinct figure (from 0), or None: no entry, the
    entry of another position (so that no figure takes another's), or a source that cannot be read or
    says another number. A ``setting (why)`` entry is a setting or threshold, not a result."""
    if figure not in entries:
        return f"{figure} names no source"
    if list(entries).index(figure) != number:
        return f"{figure} is not the block's figure number {number + 1}"
    if re.fullmatch(r"setting \(.+\)", entries[figure]):
        return None
    try:
        value = evaluate(study, entries[figure])
    except SourceError as error:
        return f"{figure} = {entries[figure]}: {error}"
    return None if matches(figure, value) else f"{figure} = {entries[figure]}, which is {value}"


def normalise(row: str) -> str:
    return "|".join(cell.strip() for cell in row.strip().strip("|").split("|"))


def figure_problems(study: Path) -> list[str]:
    """The problems of a study's figures: each figure recomputed from the source its block names."""
    readme = (study / "README.md").read_text(encoding="utf-8")
    if not is_sourced(readme):
        return [
            "README.md names no source: each figure needs a <!-- figures ... --> comment (see check_figures.py)"
        ]
    return sourced_problems(study, readme)


def studies() -> list[Path]:
    return sorted(p.parent for p in EXPERIMENTS.glob("*/README.md"))


def main(names: list[str]) -> int:
    chosen = [EXPERIMENTS / n for n in names] if names else studies()
    failed = 0
    for study in chosen:
        problems = figure_problems(study)
        failed += bool(problems)
        print(
            f"{study.name}: every figure recomputed from its source"
            if not problems
            else f"{study.name}:\n  " + "\n  ".join(problems)
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
