"""``attnlab-prepare``: killed with SIGKILL mid-way (a process contract, ``kills``) and run again, its
shards equal an uninterrupted prepare's byte for byte, and a damaged shard stops the rerun in one line;
bad input ends in one line, exit status 2 (its ``main`` in the test's process)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from train_cli import check, command_here, start_cli

from attnlab.data.prepare import PrepareSettings, prepare
from attnlab.data.shards import read_manifest
from token_corpus import documents, write_jsonl, write_parquet, write_tokenizer

pytestmark = pytest.mark.slow
DOCS = documents(4000, seed=1)  # ~2.8 MB of text, ~35 shards of 20,000 tokens
OPTIONS = ["--shard-tokens", "20000", "--val-every", "50", "--workers", "1", "--no-progress"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    write_jsonl(folder / "docs.jsonl", DOCS[:2000])
    write_parquet(folder / "docs.parquet", DOCS[2000:])
    write_tokenizer(folder / "tokenizer.json", DOCS)
    return folder


def arguments(corpus: Path, out: Path) -> list[str]:
    inputs = [str(corpus / "docs.jsonl"), str(corpus / "docs.parquet")]
    return [*inputs, "--tokenizer", str(corpus / "tokenizer.json"), "--out", str(out), *OPTIONS]


def shard_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.bin"))}


def kill_after_shards(args: list[str], cwd: Path, out: Path, shards: int) -> None:
    """Start a prepare, SIGKILL its process group once its manifest lists ``shards`` shards."""

    def listed() -> bool:
        try:
            return len(read_manifest(out)["shards"]) >= shards
        except (FileNotFoundError, ValueError):  # not written yet
            return False

    start_cli(args, cwd, command="cli.prepare").kill_when(listed, timeout=120)


def prepare_here(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``attnlab-prepare args`` in this process, in ``cwd``."""
    return command_here(args, cwd, command="prepare")


@pytest.mark.process_contract("kills")
def test_a_killed_prepare_run_again_writes_the_uninterrupted_shards(corpus: Path, tmp_path: Path) -> None:
    """Killed after 3 shards: run again, the uninterrupted shards byte for byte; a copy of the killed
    folder whose first shard was damaged (one token changed, the size the same: only the sha256 tells)
    stops the rerun in one line naming the shard."""
    full = tmp_path / "full"
    inputs = [str(corpus / "docs.jsonl"), str(corpus / "docs.parquet")]
    settings = PrepareSettings(
        out=str(full),
        inputs=inputs,
        tokenizer=str(corpus / "tokenizer.json"),
        shard_tokens=20_000,
        val_every=50,
    )
    prepare(settings, say=lambda line: None)
    killed, damaged = tmp_path / "killed", tmp_path / "damaged"
    kill_after_shards(arguments(corpus, killed), tmp_path, killed, shards=3)
    manifest = read_manifest(killed)
    assert not manifest["complete"] and len(manifest["shards"]) < len(read_manifest(full)["shards"])
    shutil.copytree(killed, damaged)

    rerun = check(prepare_here(arguments(corpus, killed), tmp_path))
    assert f"{killed}: " in rerun.stdout.splitlines()[-1]
    assert shard_bytes(killed) == shard_bytes(full) and len(shard_bytes(full)) > 10
    assert {k: v for k, v in read_manifest(killed).items() if k != "settings"} == {
        k: v for k, v in read_manifest(full).items() if k != "settings"
    }

    first = damaged / read_manifest(damaged)["shards"][0]["file"]
    changed = bytearray(first.read_bytes())
    changed[3000] ^= 0xFF
    first.write_bytes(bytes(changed))
    result = prepare_here(arguments(corpus, damaged), tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: {first}: its bytes do not match manifest.json (size or sha256 differs): the shard is damaged; "
        "delete it and run attnlab-prepare again to rewrite it"
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["x.jsonl", "--out", "o"],
            "give --tokenizer (a tokenizer.json) or --bpe-vocab-size (train one), one of them",
        ),
        (
            ["--out", "o", "--bpe-vocab-size", "300"],
            "give input files or folders, or --hf NAME (one of them)",
        ),
        (
            ["nowhere.jsonl", "--out", "o", "--bpe-vocab-size", "300"],
            "error: nowhere.jsonl: no such file or folder",
        ),
        (
            ["x.jsonl", "--out", "o", "--bpe-vocab-size", "100"],
            "--bpe-vocab-size 100: a byte-level BPE needs at least",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_status_2(tmp_path: Path, args: list[str], line: str) -> None:
    (tmp_path / "x.jsonl").write_text('{"content": "a"}\n')
    result = prepare_here(args, tmp_path)
    assert result.returncode == 2 and line in result.stderr.strip().splitlines()[-1], result.stderr


def test_a_missing_text_column_names_the_file_line_and_columns(tmp_path: Path) -> None:
    (tmp_path / "x.jsonl").write_text('{"content": "a"}\n')
    result = prepare_here(["x.jsonl", "--out", "o", "--bpe-vocab-size", "300"], tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: x.jsonl:1: no column 'text' (--text-column; it has content)"
