"""The tests that start a process are a short, named list: each starts it through
``tests/processes.py`` (which fails an unmarked test at run time), none by another way (an AST scan of
every test file for subprocess, os.fork/exec/system/spawn, multiprocessing and torch.multiprocessing),
each marked ``process_contract(<kind>)`` with a known kind, and the whole suite holds at most
``processes.MAX_CONTRACTS`` of them. Processes that libraries start for themselves (wandb's service,
DataLoader workers, torch.compile's workers) are not counted: no test starts them."""

from __future__ import annotations

import ast
import os
import threading
from pathlib import Path

import pytest

import processes

TESTS = Path(__file__).resolve().parent
# The helper module itself, and the tool that runs pytest to measure its CPU time.
ALLOWED = {"processes.py", "cpu_seconds.py"}
SUBPROCESS_STARTS = {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}
OS_STARTS = {"fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp"}
OS_PREFIXES = ("exec", "spawn")


def process_starts(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every way of starting a process in a module's syntax tree."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if "multiprocessing" in a.name.split(".")]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names = {a.name for a in node.names}
            if "multiprocessing" in module.split(".") or (module == "torch" and "multiprocessing" in names):
                found.append((node.lineno, f"from {module} import ..."))
            elif module == "subprocess" and names & SUBPROCESS_STARTS:
                found.append((node.lineno, f"from subprocess import {', '.join(sorted(names))}"))
            elif module == "os" and any(n in OS_STARTS or n.startswith(OS_PREFIXES) for n in names):
                found.append((node.lineno, f"from os import {', '.join(sorted(names))}"))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner, name = node.value.id, node.attr
            if owner == "subprocess" and name in SUBPROCESS_STARTS:
                found.append((node.lineno, f"subprocess.{name}"))
            elif owner == "os" and (name in OS_STARTS or name.startswith(OS_PREFIXES)):
                found.append((node.lineno, f"os.{name}"))
            elif (owner == "pty" and name == "spawn") or (
                owner == "asyncio" and name.startswith("create_subprocess")
            ):
                found.append((node.lineno, f"{owner}.{name}"))
    return found


def test_the_scan_finds_each_way_of_starting_a_process() -> None:
    code = (
        "import subprocess, os\nimport torch.multiprocessing as mp\nfrom multiprocessing import Pool\n"
        "subprocess.run(['x'])\nos.fork()\nos.execv('x', [])\nfrom subprocess import Popen\n"
        "x: subprocess.CompletedProcess = subprocess.TimeoutExpired\n"
    )
    assert sorted(line for line, _ in process_starts(ast.parse(code))) == [2, 3, 4, 5, 6, 7]


def test_no_test_file_starts_a_process_but_through_the_helper_module() -> None:
    found = {
        f"{path.relative_to(TESTS)}:{line}": what
        for path in sorted(TESTS.rglob("*.py"))
        if path.name not in ALLOWED or path.parent != TESTS
        for line, what in process_starts(ast.parse(path.read_text(), str(path)))
    }
    assert found == {}, (
        "start processes through tests/processes.py (processes.run, processes.start, processes.spawn_ranks; "
        f"train_cli.cli) in a test marked process_contract: {found}"
    )


def collected_kinds(session: pytest.Session) -> dict[str, object]:
    """{nodeid: process-contract kind or None} of every test of the suite: this session's collection
    when it read every test file (``make test``), else a collection of the whole suite here."""
    files = {p.relative_to(TESTS.parent).as_posix() for p in TESTS.rglob("test_*.py")}
    if files <= {nodeid.split("::")[0] for nodeid in processes.COLLECTED}:
        return dict(processes.COLLECTED)
    before = dict(processes.COLLECTED)
    try:
        code = pytest.main(
            [
                "--collect-only",
                "-q",
                "-p",
                "no:xdist",
                "-p",
                "no:cacheprovider",
                "--rootdir",
                str(TESTS.parent),
                str(TESTS),
            ],
        )
        assert code == 0, f"collecting the suite failed (pytest exit {code})"
        return {k: v for k, v in processes.COLLECTED.items() if k.split("::")[0] in files}
    finally:
        processes.COLLECTED.clear()
        processes.COLLECTED.update(before)


def test_the_suite_holds_few_process_contracts_each_of_a_known_kind(request: pytest.FixtureRequest) -> None:
    kinds = collected_kinds(request.session)
    marked = {nodeid: kind for nodeid, kind in kinds.items() if kind is not None}
    unknown = {nodeid: kind for nodeid, kind in marked.items() if kind not in processes.KINDS}
    assert unknown == {}, f"process_contract kinds must be one of {', '.join(processes.KINDS)}: {unknown}"
    assert 0 < len(marked) <= processes.MAX_CONTRACTS, (
        f"{len(marked)} tests are process contracts, more than {processes.MAX_CONTRACTS}: fold the checks "
        "that one process can serve into one test, run the rest in-process: " + ", ".join(sorted(marked))
    )


def test_a_process_started_by_an_unmarked_test_fails_it(request: pytest.FixtureRequest) -> None:
    """This test carries no marker: the helpers refuse before any process starts, in one line."""
    with pytest.raises(pytest.fail.Exception) as failed:
        processes.run(["true"])
    assert str(failed.value) == (
        f"{request.node.nodeid} starts a process without @pytest.mark.process_contract(<kind>): mark it "
        "with one of signals, kills, ranks, console, packaging, interpreter, or run the command in this "
        "process (train_cli.command_here, attnlab.run)"
    )


def test_a_kind_outside_the_list_fails_the_test(request: pytest.FixtureRequest) -> None:
    request.node.add_marker(pytest.mark.process_contract("threads"))  # after collection: not counted
    with pytest.raises(
        pytest.fail.Exception, match=r"process_contract\('threads'\): the kind must be one of"
    ):
        processes.start(["true"], Path.cwd())


def test_a_run_forked_from_the_preloaded_server_serves_only_kills(request: pytest.FixtureRequest) -> None:
    """A forked child is no new interpreter (its start and end are the fork server's): a test of another
    kind is refused before anything is forked."""
    request.node.add_marker(pytest.mark.process_contract("signals"))  # after collection: not counted
    with pytest.raises(
        pytest.fail.Exception,
        match=r"process_contract\('signals'\): a run forked from the preloaded server serves only tests of kills",
    ):
        processes.start_preloaded("attnlab.cli.train:main", ["attnlab-train"], Path.cwd(), {})


def test_a_child_of_a_fork_server_that_runs_a_thread_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check that each preloaded child makes of its fork server, made of this process (its own
    parent, here) while it runs a thread: a thread a fork would not copy."""
    if not Path("/proc/self/task").is_dir():
        pytest.skip("the threads of a process are read from Linux's /proc")
    monkeypatch.setattr(os, "getppid", os.getpid)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        with pytest.raises(RuntimeError, match=r"the fork server runs \d+ threads"):
            processes.refuse_an_unsafe_fork()
    finally:
        stop.set()
        thread.join()
