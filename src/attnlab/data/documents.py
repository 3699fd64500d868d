"""The documents ``attnlab-prepare`` reads, in order: text files (each one document), JSONL rows,
parquet rows (a named text column), or a Hugging Face dataset's rows (streamed when asked), each with
the input bytes it took, for the progress line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

TEXT_SUFFIXES = (".txt", ".md", ".text")
RECORD_SUFFIXES = (".jsonl", ".json", ".parquet")


class Source(Protocol):
    """Where the documents are (``attnlab.data.prepare.PrepareSettings`` holds these and more)."""

    inputs: list[str]
    hf_name: str | None
    hf_config: str | None
    hf_data_files: str | None
    hf_split: str
    streaming: bool
    text_column: str


def input_files(inputs: list[str]) -> list[Path]:
    """The files of ``inputs`` in order (a folder: its text, JSONL and parquet files, sorted, recursively)."""
    files = []
    for given in inputs:
        path = Path(given).expanduser()
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix.lower() in TEXT_SUFFIXES + RECORD_SUFFIXES)
            if not found:
                raise ValueError(f"{given}: a folder without .txt, .jsonl or .parquet files")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"{given}: no such file or folder")
    return files


def text_documents(path: Path, column: str) -> Iterator[tuple[str, int]]:
    """(document, input bytes it took) of one file: JSONL rows, parquet rows, or the whole text file."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        yield from jsonl_documents(path, column)
    elif suffix == ".parquet":
        yield from parquet_documents(path, column)
    else:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"{path}: not UTF-8 text (byte {err.start})") from None
        yield text, path.stat().st_size


def jsonl_documents(path: Path, column: str) -> Iterator[tuple[str, int]]:
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                yield "", len(line)
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not valid JSON ({err.msg})") from None
            if not isinstance(row, dict) or column not in row:
                has = ", ".join(row) if isinstance(row, dict) else type(row).__name__
                raise ValueError(f"{path}:{number}: no column {column!r} (--text-column; it has {has})")
            yield str(row[column]), len(line)


def parquet_documents(path: Path, column: str) -> Iterator[tuple[str, int]]:
    import pyarrow.parquet as pq

    table = pq.ParquetFile(path)
    names = table.schema_arrow.names
    if column not in names:
        raise ValueError(f"{path}: no column {column!r} (--text-column; it has {', '.join(names)})")
    per_row = path.stat().st_size / max(1, table.metadata.num_rows)
    for batch in table.iter_batches(columns=[column], batch_size=1024):
        for text in batch.column(0).to_pylist():
            yield text or "", int(per_row)


def hf_documents(settings: Source) -> Iterator[tuple[str, int]]:
    """The rows of a Hugging Face dataset (streamed with ``streaming``: nothing held whole)."""
    import datasets

    dataset = datasets.load_dataset(
        settings.hf_name,
        settings.hf_config,
        data_files=settings.hf_data_files,
        split=settings.hf_split,
        streaming=settings.streaming,
    )
    for row in dataset:
        if settings.text_column not in row:
            has = ", ".join(row)
            raise ValueError(f"{settings.hf_name}: no column {settings.text_column!r} (it has {has})")
        text = str(row[settings.text_column])
        yield text, len(text)


def documents(settings: Source) -> Iterator[tuple[str, int]]:
    """Every document of the source in order, with the input bytes it took (for the progress line);
    empty ones (a blank JSONL line, an empty row) are left out."""
    if settings.hf_name:
        found = hf_documents(settings)
    else:
        found = (
            doc for path in input_files(settings.inputs) for doc in text_documents(path, settings.text_column)
        )
    yield from ((text, size) for text, size in found if text)  # an empty row is no document


def input_size(settings: Source) -> int | None:
    """The bytes of the local inputs (the progress line's 100%); None for a dataset of unknown size."""
    return None if settings.hf_name else sum(p.stat().st_size for p in input_files(settings.inputs))
