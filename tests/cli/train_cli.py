"""Helpers of the training tests: a command run in this process (``attnlab.run``'s functions,
``command_here``: a console script's ``main``), or, for a process contract (signals, kills, several
ranks, what the interpreter prints; docs/development.md), as a new interpreter (``cli``,
``start_and_kill_after_first_checkpoint``: through ``tests/processes.py``, which checks that the test
is marked ``process_contract``); and read back what the runs wrote."""

from __future__ import annotations

import contextlib
import csv
import importlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
import torch

import processes
from processes import wait_until_group_is_gone

__all__ = ["wait_until_group_is_gone"]  # the tests that kill a run read it here too

HERE = Path(__file__).resolve().parent

# A few optimizer steps of a tiny model on small data: seconds per run on a CPU.
TINY = [
    "trainer.max_steps=6",
    "trainer.val_every_n_steps=3",
    "checkpoint.every_n_steps=3",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    "data.batch_size=8",
    "sample.max_new_tokens=16",
]
TEXT = ["data.seq_len=32"]  # shorter windows for the text corpus
# A tiny GPT logged every 2 steps and validated every 4 (warm-up 2), no sample: the first run that the
# tests of continued and extended runs take further (they add trainer.max_steps and run_dir).
CONTINUED_GPT = [
    *TEXT,
    "model=gpt-tiny",
    "data.batch_size=8",
    "trainer.log_every_n_steps=2",
    "trainer.val_every_n_steps=4",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.enable_progress_bar=false",
    "optim.warmup_steps=2",
    "sample.max_new_tokens=0",
]
# A tiny GPT with RoPE that learns copy at length 16 (exact match >= 0.95 on 256 test examples): the run
# that attnlab-eval scores at 16 and 32 in test_train_synthetic.py and test_eval_lengths.py.
COPY_AT_16 = [
    "model=gpt-tiny",
    "pos=rope",
    "data=copy",
    "data.seq_len=16",
    "data.num_val=256",
    "data.num_test=256",
    "optim.lr=3e-3",
    "trainer.max_steps=300",
    "trainer.val_every_n_steps=300",
    "trainer.enable_progress_bar=false",
    "logger=none",
    "sample.max_new_tokens=0",
    "run_dir=run",
]
# The presets of tests/cli/conf (experiment=tiny_<family>: a tiny model, small generated data sets).
TEST_PRESETS = f"hydra.searchpath=[file://{HERE / 'conf'}]"


class RunsCode:
    """Unpickled, it would create ``marker``: what a poisoned checkpoint does."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def cli_env(cwd: Path) -> dict[str, str]:
    """The environment of a command run by a test: offline, its own wandb dirs, no inherited wandb service.

    An in-process wandb run elsewhere in the session exports WANDB_SERVICE; a child that reused that
    service would share its table of active run ids, so a killed run's id would stay "in use".
    """
    env = dict(os.environ)
    env.update(
        WANDB_MODE="offline",
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")])),
        WANDB_CONFIG_DIR=str(cwd / ".wandb-config"),
        WANDB_CACHE_DIR=str(cwd / ".wandb-cache"),
        WANDB_DATA_DIR=str(cwd / ".wandb-data"),
    )
    env.pop("HYDRA_FULL_ERROR", None)
    env.pop("WANDB_SERVICE", None)
    return env


def cli(
    args: list[str], cwd: Path, *, command: str = "train", timeout: float = 300
) -> subprocess.CompletedProcess:
    """``python -m attnlab.<command> *args`` in ``cwd``, a new interpreter, offline, with the
    fault-injection helpers importable: its exit status and output. Only in a test marked
    ``process_contract`` (``processes``); the other ranks of a multi-process run are started by
    Lightning as ``python -m attnlab.<command>`` too, as for a user."""
    argv = processes.python_module(f"attnlab.{command}", args)
    return processes.run(argv, cwd, cli_env(cwd), timeout=timeout)


def start_cli(args: list[str], cwd: Path, *, command: str = "train") -> processes.Started:
    """``python -m attnlab.<command> *args`` started in ``cwd`` (in a session of its own), as ``cli`` runs
    it, for a test that acts while it runs: ``pid``, ``poll()``, ``result(timeout)``,
    ``kill_when(ready)``."""
    return processes.start(processes.python_module(f"attnlab.{command}", args), cwd, cli_env(cwd))


def start_killed_cli(args: list[str], cwd: Path, *, command: str = "train") -> processes.Preloaded:
    """``attnlab-<command> *args`` in ``cwd``, in the environment of ``cli``, for a run that is killed:
    its ``main`` forked from the preloaded fork server (``processes.Preloaded``: the imports paid once,
    not in each run), in a session of its own; ``pid``, ``poll()``, ``result(timeout)``,
    ``kill_when(ready)``. Only in a test marked ``process_contract("kills")``."""
    name = command.removeprefix("cli.")
    argv = [f"attnlab-{name}", *args]
    return processes.start_preloaded(f"attnlab.cli.{name}:main", argv, cwd, cli_env(cwd))


def killed_cli(
    args: list[str], cwd: Path, *, command: str = "train", timeout: float = 300
) -> subprocess.CompletedProcess:
    """A run that kills itself (``fault_injection``'s ``InjectFaults``, ``KillOnceAtStep``), started as
    ``start_killed_cli`` starts it, waited for: its exit status (-9: SIGKILL) and output."""
    return start_killed_cli(args, cwd, command=command).result(timeout)


def start_and_kill_after_first_checkpoint(args: list[str], cwd: Path, run_dir: Path) -> int:
    """Start a run of ``args`` (``start_killed_cli``), SIGKILL it once its first last.ckpt exists; the
    step of the checkpoint left behind.

    The whole process group is killed, as a scheduler or Ctrl-C would: a lone SIGKILL leaves wandb's
    service process behind, holding the run id for a while, and the resume would find it "in use".
    """
    last = run_dir / "checkpoints" / "last.ckpt"
    start_killed_cli([*args, f"run_dir={run_dir}"], cwd).kill_when(last.exists)
    return torch.load(last, map_location="cpu", weights_only=True)["global_step"]


def copy_of_run_built_once(
    built_once: Callable[..., Path], name: str, build: Callable[[Path], object], cwd: Path
) -> Path:
    """Into ``cwd / "run"``: a copy of the run directory ``run`` that ``build(folder)`` makes, once per
    session (``built_once(name, build)``), so that each test changes (resumes, evaluates) a run of its
    own. ``last.ckpt`` stays the relative link it is, so the copy is a run of its own."""
    built = built_once(name, build)
    return Path(shutil.copytree(built / "run", cwd / "run", symlinks=True))


def copy_learned_at_16(built_once: Callable[..., Path], cwd: Path) -> Path:
    """A copy of the run of ``COPY_AT_16`` (trained once per session, attnlab-train in this process)
    in ``cwd / "run"``: each test scores its own copy, so one test's evaluations never show in
    another's run directory. Training it once instead of once per test saves ~10 CPU-seconds."""
    return copy_of_run_built_once(
        built_once, "copy-at-16", lambda folder: check(command_here(COPY_AT_16, folder)), cwd
    )


def check(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, (
        f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result


def job_number(job_dir: Path) -> int | None:
    """The number of a multirun's job folder (``3`` or ``3_<label>``); None for any other folder."""
    number, _, _ = job_dir.name.partition("_")
    return int(number) if number.isdigit() and job_dir.is_dir() else None


def job_dirs(cwd: Path) -> list[Path]:
    """The job directories of the one multirun under ``cwd``, by job number."""
    (sweep,) = cwd.glob("multirun/*/*")
    return jobs_in(sweep)


def jobs_in(sweep: Path) -> list[Path]:
    """The job directories of the multirun in ``sweep`` (its ``hydra.sweep.dir``), by job number."""
    return sorted((p for p in sweep.iterdir() if job_number(p) is not None), key=job_number)


def csv_rows(path: Path) -> list[dict[str, str]]:
    """The rows of ``metrics.csv`` in ``path`` (a CSV logger's directory) or in ``path/csv`` (a run's)."""
    file = path / "metrics.csv" if (path / "metrics.csv").exists() else path / "csv" / "metrics.csv"
    with open(file, newline="") as f:
        return list(csv.DictReader(f))


def csv_series(path: Path, key: str) -> dict[int, float]:
    """{step: value} of a metric in a CSV log (see ``csv_rows``)."""
    return {int(r["step"]): float(r[key]) for r in csv_rows(path) if r.get(key)}


# wandb's offline log (``run-<id>.wandb``): a 7-byte header, then LevelDB's log format, records of
# wandb's protobuf ``Record`` cut into 32 KiB blocks, each piece with a 7-byte header (checksum, length,
# type: whole, first, middle or last piece of a record).
WANDB_LOG_HEADER = b":W&B\xe1\xbe\x00"
WANDB_LOG_BLOCK = 32768
WHOLE, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def wandb_log_records(data: bytes) -> Iterator[bytes]:
    """The serialized records of a wandb offline log's bytes."""
    assert data.startswith(WANDB_LOG_HEADER), f"not a wandb offline log: {data[:7]!r}"
    position, pieces = len(WANDB_LOG_HEADER), []
    while position + 7 <= len(data):
        left_in_block = WANDB_LOG_BLOCK - position % WANDB_LOG_BLOCK
        _checksum, length, kind = struct.unpack_from("<IHB", data, position)
        if left_in_block < 7 or (kind, length) == (0, 0):  # a block's padding
            position += left_in_block
            continue
        piece = data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind == WHOLE:
            yield piece
        elif kind == FIRST:
            pieces = [piece]
        else:
            pieces.append(piece)
            if kind == LAST:
                yield b"".join(pieces)


def wandb_items(items: Iterable) -> dict:
    """History, summary or config items as ``wandb leet inspect --json`` shows them: {key: value}, a
    nested key joined by dots."""
    return {(item.key or ".".join(item.nested_key)): json.loads(item.value_json) for item in items}


def wandb_records(run_dir: Path) -> list[dict]:
    """The records of the run's offline wandb log as ``wandb leet inspect --json`` prints them
    (``{"type": "history", "history": {"item": {...}, "step": {...}}}``, ``run``, ``summary``, ...),
    read in this process from the log's protobuf records (a ``wandb`` process would import wandb anew:
    0.6 CPU-s a call)."""
    from google.protobuf.json_format import MessageToDict
    from wandb.proto import wandb_internal_pb2

    (log,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    records = []
    for data in wandb_log_records(log.read_bytes()):
        record = wandb_internal_pb2.Record.FromString(data)
        kind = record.WhichOneof("record_type")
        body = getattr(record, kind)
        if kind == "history":
            value: dict = {"item": wandb_items(body.item), "step": {"num": body.step.num}}
        elif kind == "summary":
            value = {"update": wandb_items(body.update)}
        else:
            value = MessageToDict(body, preserving_proto_field_name=True)
            if kind == "run":
                value["config"] = {"update": wandb_items(body.config.update)}
        records.append({"type": kind, kind: value})
    return records


def wandb_history(run_dir: Path, key: str) -> dict[int, float]:
    """{trainer/global_step: value} of a metric logged to wandb."""
    rows = [r["history"]["item"] for r in wandb_records(run_dir) if r["type"] == "history"]
    return {int(r["trainer/global_step"]): float(r[key]) for r in rows if key in r}


def wandb_run(run_dir: Path) -> dict:
    """The run record (id, group, name) of the run's offline wandb log."""
    return next(r["run"] for r in wandb_records(run_dir) if r["type"] == "run")


def run_command(
    main: Callable[[], None],
    args: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str] | None = None,
) -> int:
    """Run a console script's ``main`` (``attnlab.cli.eval.main``, ...) in this process with ``args``,
    as its console script would; its exit status. With ``capsys``, the output so far is dropped first,
    so that ``capsys.readouterr()`` then holds only the command's."""
    if capsys is not None:
        capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["attnlab", *args])
    monkeypatch.setenv("HYDRA_FULL_ERROR", "0")
    try:
        main()
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return 0


def command_here(
    args: list[str],
    cwd: Path,
    monkeypatch: pytest.MonkeyPatch | None = None,
    capsys: pytest.CaptureFixture[str] | None = None,
    command: str = "train",
) -> subprocess.CompletedProcess:
    """``attnlab-<command> <args>`` in this process, in ``cwd`` (its ``main``, as its console script
    runs it): its exit status and what it printed, as ``cli`` returns them for a process. Without
    ``monkeypatch`` and ``capsys`` (a module-scoped fixture's call), its own, undone after."""
    main = importlib.import_module(f"attnlab.cli.{command.removeprefix('cli.')}").main
    if monkeypatch is None:
        with pytest.MonkeyPatch.context() as patch:
            return command_here(args, cwd, patch, capsys, command)
    monkeypatch.chdir(cwd)
    if capsys is not None:
        status = run_command(main, args, monkeypatch, capsys)
        out, err = capsys.readouterr()
    else:
        with (
            contextlib.redirect_stdout(io.StringIO()) as stdout,
            contextlib.redirect_stderr(io.StringIO()) as stderr,
        ):
            status = run_command(main, args, monkeypatch)
        out, err = stdout.getvalue(), stderr.getvalue()
    return subprocess.CompletedProcess([f"attnlab-{command}", *args], status, out, err)


def train_in_process(overrides: list[str], run_dir: Path) -> Path:
    """Train the run of ``overrides`` in this process into ``run_dir`` (``attnlab.run``: composed and
    validated as attnlab-train does, without Hydra's own files); its last.ckpt."""
    from attnlab import run

    run.train(run.run_config(overrides), run_dir)
    return run_dir / "checkpoints" / "last.ckpt"


def tiny_checkpoints(
    factory: pytest.TempPathFactory, runs: dict[str, list[str]], common: list[str]
) -> Callable[[str], Path]:
    """``get(name)``: the last.ckpt of a tiny in-process run with ``runs[name] + common``, trained on
    first use (for module-scoped fixtures of the commands that read checkpoints)."""
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = train_in_process(runs[name] + common, factory.mktemp(name))
        return made[name]

    return get


def shared_tiny_checkpoints(
    built_once: Callable[..., Path], module: str, runs: dict[str, list[str]], common: list[str]
) -> Callable[[str], Path]:
    """``get(name)``: as ``tiny_checkpoints``, but each run trained once per test session and shared by
    every pytest-xdist worker (``built_once``, under ``module-name``): a module-scoped fixture trains
    again on each worker that gets one of its tests. Only for tests that write nothing into the run
    folder but into folders of their own (another worker may read the run at the same time)."""

    def get(name: str) -> Path:
        run = built_once(f"{module}-{name}", lambda folder: train_in_process(runs[name] + common, folder))
        return run / "checkpoints" / "last.ckpt"

    return get


def compressed_checkpoints(
    checkpoint: Callable[[str], Path], method: str, *args: str
) -> Callable[[str], Path]:
    """``get(name)``: ``checkpoint(name)`` compressed by ``attnlab-compress method=<method> <args>`` on
    first use; the file it writes beside the checkpoint."""
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            from attnlab.cli.compress import main

            command = [f"ckpt_path={checkpoint(name)}", f"method={method}", *args]
            with pytest.MonkeyPatch.context() as patch:
                assert run_command(main, command, patch) == 0
            made[name] = checkpoint(name).with_name(f"{method}-last.ckpt")
        return made[name]

    return get
