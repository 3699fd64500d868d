"""Reading user data: text files and folders, CSV/TSV/JSONL records, Hugging Face datasets.

Everything is read, never written: caches go to ``data.cache_dir``. Errors name the file or the
config key and say what is allowed. Splits are deterministic: a source's own train/val/test
files or splits where it has them, else carved from the training data by ``val_fraction`` and
``test_fraction`` (contiguous ranges for language-model text, a seeded shuffle for records).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.schema.data import DataConfig

SPLITS = ("train", "val", "test")
SPLIT_NAMES = {"train": ("train",), "val": ("val", "valid", "validation", "dev"), "test": ("test",)}
RECORD_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json")


# -- splitting --------------------------------------------------------------------------------


def carve_sizes(n: int, val_fraction: float, test_fraction: float) -> tuple[int, int, int]:
    """Sizes (train, val, test) of ``n`` items split by fractions."""
    n_val, n_test = int(n * val_fraction), int(n * test_fraction)
    return n - n_val - n_test, n_val, n_test


def carve_text(text: str, val_fraction: float, test_fraction: float) -> dict[str, str]:
    """Contiguous character ranges: the first part trains, then validation, then test."""
    n_train, n_val, _ = carve_sizes(len(text), val_fraction, test_fraction)
    return {"train": text[:n_train], "val": text[n_train : n_train + n_val], "test": text[n_train + n_val :]}


def carve_indices(
    n: int, val_fraction: float, test_fraction: float, seed: int, shuffle: bool
) -> dict[str, list[int]]:
    """Indices of ``n`` items per split, after a permutation seeded by ``seed`` when ``shuffle``."""
    order = np.random.default_rng([seed, 7]).permutation(n).tolist() if shuffle else list(range(n))
    n_train, n_val, _ = carve_sizes(n, val_fraction, test_fraction)
    return {
        "train": order[:n_train],
        "val": order[n_train : n_train + n_val],
        "test": order[n_train + n_val :],
    }


def complete_splits(
    found: dict[str, Any], cfg: DataConfig, seed: int, shuffle: bool, take: Callable[[Any, list[int]], Any]
) -> dict[str, Any]:
    """Fill the splits a source lacks by carving them out of its training split.

    ``take(items, indices)`` selects items; ``found`` must hold "train".
    """
    if "val" in found and "test" in found:
        return found
    train = found["train"]
    val_fraction = 0.0 if "val" in found else cfg.val_fraction
    test_fraction = 0.0 if "test" in found else cfg.test_fraction
    parts = carve_indices(len(train), val_fraction, test_fraction, seed, shuffle)
    return {
        split: found[split] if split in found and split != "train" else take(train, parts[split])
        for split in SPLITS
    }


# -- files ------------------------------------------------------------------------------------


def existing(path: str | Path, key: str = "data.path") -> Path:
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"{key}={str(path)!r}: no such file or folder ({p.resolve()})")
    return p


def read_text(file: Path) -> str:
    """A UTF-8 text file; an empty or undecodable file is an error naming it."""
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{file} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    if not text.strip():
        raise ValueError(f"{file} is empty")
    return text


def files_in(folder: Path) -> list[Path]:
    """Regular, non-hidden files under ``folder``, recursively, in sorted order."""
    files = sorted(
        f
        for f in folder.rglob("*")
        if f.is_file() and not any(part.startswith(".") for part in f.relative_to(folder).parts)
    )
    if not files:
        raise ValueError(f"data.path={str(folder)!r} is a folder without any files")
    return files


def split_files(folder: Path, suffixes: tuple[str, ...] | None = None) -> dict[str, Path]:
    """Files named after splits directly in ``folder`` (train.csv, valid.txt, test.jsonl, ...)."""
    found: dict[str, Path] = {}
    for f in sorted(folder.iterdir()):
        if not f.is_file() or (suffixes and f.suffix.lower() not in suffixes):
            continue
        for split, names in SPLIT_NAMES.items():
            if f.stem.lower() in names and split not in found:
                found[split] = f
    return found


def read_records(file: Path) -> list[dict[str, Any]]:
    """Rows of a CSV or TSV file with a header row, or of a JSON Lines (or JSON list) file."""
    suffix = file.suffix.lower()
    if suffix not in RECORD_SUFFIXES:
        raise ValueError(f"{file}: unsupported file type {suffix!r}; use one of {', '.join(RECORD_SUFFIXES)}")
    text = read_text(file)
    if suffix in (".csv", ".tsv"):
        rows = list(csv.DictReader(text.splitlines(), delimiter="," if suffix == ".csv" else "\t"))
        if not rows:
            raise ValueError(f"{file} has a header row but no data rows")
        if any(None in row for row in rows):
            bad = next(i for i, row in enumerate(rows) if None in row)
            raise ValueError(f"{file}: row {bad + 2} has more fields than the header")
        return rows
    if suffix == ".json" and text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{file}: not valid JSON ({err.msg} at line {err.lineno})") from None
    else:
        rows = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{file}:{lineno}: not valid JSON ({err.msg})") from None
    if not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{file}: every record must be a JSON object")
    return rows


def check_columns(columns: list[str], wanted: dict[str, str], where: str) -> None:
    """``wanted`` maps config keys to column names; a missing one is an error listing the available."""
    for key, column in wanted.items():
        if column not in columns:
            raise ValueError(
                f"{key}={column!r} is not a column of {where}; available: {', '.join(map(str, columns))}"
            )


def record_columns(rows: list[dict[str, Any]], wanted: dict[str, str], where: str) -> dict[str, list[Any]]:
    """The wanted columns of records as lists; every record must have a value in each."""
    if not rows:
        return {column: [] for column in wanted.values()}
    check_columns(list(rows[0]), wanted, where)
    columns: dict[str, list[Any]] = {column: [] for column in wanted.values()}
    for number, row in enumerate(rows, start=1):
        for column, values in columns.items():
            if row.get(column) is None:
                raise ValueError(f"{where}: record {number} has no value in column {column!r}")
            values.append(row[column])
    return columns


def record_splits_from_path(cfg: DataConfig, seed: int) -> dict[str, list[dict[str, Any]]]:
    """Records per split from ``data.path``: one file (carved), or a folder of train/val/test files."""
    path = existing(cfg.path)
    if path.is_file():
        found = {"train": read_records(path)}
    else:
        files = split_files(path, RECORD_SUFFIXES)
        if "train" not in files:
            raise ValueError(
                f"data.path={cfg.path!r} is a folder without a train file; expected train{{.csv,.tsv,.jsonl,.json}} "
                "and optionally val/valid/validation/dev and test files"
            )
        found = {split: read_records(f) for split, f in files.items()}
    return complete_splits(found, cfg, seed, shuffle=True, take=lambda rows, idx: [rows[i] for i in idx])


# -- Hugging Face datasets -------------------------------------------------------------------------


def load_hf(cfg: DataConfig):
    """``datasets.load_dataset(hf_name, hf_config)`` cached in ``data.cache_dir``; offline it reads the cache."""
    import datasets

    kwargs = {"data_files": cfg.hf_data_files} if cfg.hf_data_files else {}
    try:
        loaded = datasets.load_dataset(cfg.hf_name, cfg.hf_config, cache_dir=cfg.cache_dir, **kwargs)
    except Exception as err:  # datasets raises many types (connection, missing config, file not found)
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ValueError(
            f"could not load data.hf_name={cfg.hf_name!r} (data.hf_config={cfg.hf_config!r}): {message}"
        ) from None
    if not isinstance(loaded, datasets.DatasetDict):
        loaded = datasets.DatasetDict({"train": loaded})
    return loaded


def hf_splits(cfg: DataConfig, seed: int, shuffle: bool) -> dict[str, Any]:
    """The dataset's train/val/test splits (known names), carving out the ones it lacks."""
    loaded = load_hf(cfg)
    found = {}
    for split, names in SPLIT_NAMES.items():
        name = next((n for n in names if n in loaded), None)
        if name is not None:
            found[split] = loaded[name]
    if "train" not in found:
        raise ValueError(f"data.hf_name={cfg.hf_name!r} has no train split; it has: {', '.join(loaded)}")
    return complete_splits(found, cfg, seed, shuffle, take=lambda ds, idx: ds.select(idx))


def hf_columns(dataset, wanted: dict[str, str], cfg: DataConfig) -> dict[str, list[Any]]:
    """The wanted columns of a Hugging Face split as lists, after checking they exist."""
    check_columns(dataset.column_names, wanted, f"data.hf_name={cfg.hf_name!r}")
    return {column: list(dataset[column]) for column in wanted.values()}


def column_splits(
    cfg: DataConfig, wanted: dict[str, str], seed: int
) -> tuple[dict[str, dict[str, list[Any]]], str]:
    """The wanted columns per split from ``data.hf_name`` or ``data.path`` (records shuffled before
    carving), and a description of the source for error messages.
    """
    if cfg.hf_name:
        where = f"data.hf_name={cfg.hf_name!r}"
        splits = hf_splits(cfg, seed, shuffle=True)
        return {split: hf_columns(ds, wanted, cfg) for split, ds in splits.items()}, where
    where = f"data.path={cfg.path!r}"
    records = record_splits_from_path(cfg, seed)
    return {
        split: record_columns(rows, wanted, f"{where} ({split} split)") for split, rows in records.items()
    }, where
