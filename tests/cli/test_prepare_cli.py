"""``attnlab-prepare``: killed with SIGKILL mid-way (a process contract, ``kills``) and run again, its
shards equal an uninterrupted prepare's byte for byte, and a damaged shard stops the rerun in one line;
SIGINT, SIGTERM and SIGHUP, to the process or to its whole group (a process contract, ``signals``), end
it in one line with the signal's exit status, no process of its group left, and the rerun continues;
bad input ends in one line, exit status 2 (its ``main`` in the test's process)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from train_cli import check, cli_env, command_here, start_cli

import attnlab.data.prepare as data_prepare
import processes
from attnlab.data import token_workers
from attnlab.data.prepare import PrepareSettings, prepare
from attnlab.data.shards import read_manifest
from token_corpus import documents, write_jsonl, write_parquet, write_tokenizer

pytestmark = pytest.mark.slow
DOCS = documents(4000, seed=1)  # ~2.8 MB of text, ~35 shards of 20,000 tokens
OPTIONS = ["--shard-tokens", "20000", "--val-every", "50", "--workers", "1", "--no-progress"]
# A prepare in a new interpreter that, once its first shard is recorded, creates ``marker`` and waits
# there (a minute at most) for the test's signal, its two workers tokenising meanwhile.
WAIT_AFTER_FIRST_SHARD = """
import sys, time
from pathlib import Path
import attnlab.data.prepare as target
write_manifest = target.write_manifest
def waiting(*args, **kwargs):
    write_manifest(*args, **kwargs)
    Path({marker!r}).touch()
    time.sleep(60)
target.write_manifest = waiting
sys.argv = {argv!r}
from attnlab.cli.prepare import main
main()
"""


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


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """800 documents (8 shards of 20,000 tokens) and their tokenizer, and in ``full`` their shards
    prepared uninterrupted (one worker: the shards do not depend on the number)."""
    folder = tmp_path_factory.mktemp("small")
    write_jsonl(folder / "docs.jsonl", DOCS[:800])
    write_tokenizer(folder / "tokenizer.json", DOCS)
    full = PrepareSettings(
        out=str(folder / "full"),
        inputs=[str(folder / "docs.jsonl")],
        tokenizer=str(folder / "tokenizer.json"),
        shard_tokens=20_000,
        val_every=50,
        workers=1,
    )
    prepare(full, say=lambda line: None)
    return folder


def two_workers(corpus: Path, out: Path) -> list[str]:
    """The arguments of a prepare of ``small_corpus`` into ``out`` with two tokenising processes."""
    inputs = [str(corpus / "docs.jsonl"), "--tokenizer", str(corpus / "tokenizer.json"), "--out", str(out)]
    return [*inputs, "--shard-tokens", "20000", "--val-every", "50", "--workers", "2", "--no-progress"]


def signalled_after_first_shard(
    args: list[str], cwd: Path, marker: Path, signum: int, to_group: bool
) -> tuple[subprocess.CompletedProcess, int]:
    """``attnlab-prepare args`` in a new interpreter (a session of its own), sent ``signum`` once its
    first shard is recorded: to the process, or to its whole group (its workers and multiprocessing's
    resource tracker too) as Ctrl-C in a terminal or a scheduler sends it; its result once it has ended,
    and its group's id."""
    code = WAIT_AFTER_FIRST_SHARD.format(marker=str(marker), argv=["attnlab-prepare", *args])
    started = processes.start([sys.executable, "-c", code], cwd, cli_env(cwd))
    while not marker.exists() and started.poll() is None:
        time.sleep(0.01)
    if started.poll() is None:
        (os.killpg if to_group else os.kill)(started.pid, signum)
    return started.result(timeout=120), started.pid


@pytest.mark.process_contract("signals")
def test_a_signal_to_prepare_or_its_group_ends_it_in_one_line_and_the_rerun_continues(
    small_corpus: Path, tmp_path: Path
) -> None:
    """SIGINT, SIGTERM and SIGHUP, each to the process and to its whole group, while two workers
    tokenise: the signal's exit status, one line, no traceback (the workers ignore the signals, the
    parent ends them; the resource tracker is not ended by SIGHUP to print tracebacks when started
    again), no process of the group left; the same command run again writes the uninterrupted shards."""
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        for to_group in (False, True):
            case = f"{name} to the {'group' if to_group else 'process'}"
            out, signum = tmp_path / case.replace(" ", "-"), getattr(signal, name)
            args = two_workers(small_corpus, out)
            result, group = signalled_after_first_shard(
                args, tmp_path, out.with_suffix(".waiting"), signum, to_group
            )

            assert (result.returncode, result.stdout) == (128 + signum, ""), f"{case}: {result.stderr}"
            assert result.stderr.splitlines() == [f"interrupted by {name} during prepare"], (
                f"{case}: {result.stderr}"
            )
            assert processes.live_processes_of_group(group) == [], f"{case}: a process of its group is left"
            assert not read_manifest(out)["complete"] and read_manifest(out)["shards"], case
            check(prepare_here(args, tmp_path))
            assert shard_bytes(out) == shard_bytes(small_corpus / "full"), case


def test_a_signal_in_process_ends_prepare_in_one_line_and_its_workers_with_it(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGTERM sent to this process as the first shard is recorded, two workers tokenising: exit 143,
    one line, both workers ended (SIGKILL: they ignore the signal), this process's handlers back; the
    rerun writes the uninterrupted shards."""
    workers: list[token_workers.Worker] = []
    write_manifest = data_prepare.write_manifest

    class Recorded(token_workers.Worker):
        def __init__(self, tokenizer_file: Path) -> None:
            super().__init__(tokenizer_file)
            workers.append(self)

    def signalled(*args: object, **kwargs: object) -> None:
        write_manifest(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)

    handlers = {s: signal.getsignal(s) for s in token_workers.PARENT_SIGNALS}
    args = two_workers(small_corpus, tmp_path / "out")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(token_workers, "Worker", Recorded)
        patch.setattr(data_prepare, "write_manifest", signalled)
        result = command_here(args, tmp_path, patch, capsys, command="prepare")

    assert (result.returncode, result.stderr) == (143, "interrupted by SIGTERM during prepare\n")
    assert [w.process.exitcode for w in workers] == [-signal.SIGKILL] * 2
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    check(command_here(args, tmp_path, monkeypatch, capsys, command="prepare"))
    assert shard_bytes(tmp_path / "out") == shard_bytes(small_corpus / "full")


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
