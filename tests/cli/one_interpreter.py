"""``python -m one_interpreter train <args> -- eval <args> -- ...``: several attnlab commands one after
another in one new interpreter, each with its own ``sys.argv``, as ``python -m attnlab.<command>``
would run it; a line ``==> <command>`` on stdout and on stderr marks where each command's output
begins. The commands after one that fails are not run; its exit status is the exit status (0 if none failed).

For the checks of what commands print while importing and running (test_clean_output): a warning
that several of them trigger is printed once, under the first, and before each command the warning
and logging filters that earlier ones installed to quiet their output are undone, so what the
commands print together holds every line that any of them would print alone, for one interpreter's
start instead of one each.
"""

from __future__ import annotations

import importlib
import logging
import sys
import warnings

MARK = "==> "
FRESH_WARNING_FILTERS = list(warnings.filters)  # this interpreter's, before any command


def commands(argv: list[str]) -> list[tuple[str, list[str]]]:
    """``[(command, args), ...]`` of ``command args -- command args ...``."""
    found, current = [], []
    for arg in [*argv, "--"]:
        if arg != "--":
            current.append(arg)
        elif current:
            found.append((current[0], current[1:]))
            current = []
    return found


def forget_quieting() -> None:
    """Undo what earlier commands did to quiet their output: the warning filters they added, and the
    filters on every logger and handler (each command installs again those it needs)."""
    warnings.resetwarnings()
    warnings.filters[:] = FRESH_WARNING_FILTERS
    manager_loggers = logging.Logger.manager.loggerDict.values()
    for logger in [logging.getLogger(), *(x for x in manager_loggers if isinstance(x, logging.Logger))]:
        logger.filters.clear()
        for handler in logger.handlers:
            handler.filters.clear()


def run(command: str, args: list[str]) -> int:
    """Run ``attnlab.<command>``'s ``main`` with ``args``, quieted by nothing an earlier command did;
    its exit status."""
    forget_quieting()
    for stream in (sys.stdout, sys.stderr):
        print(f"{MARK}{command}", file=stream, flush=True)
    module = importlib.import_module(f"attnlab.{command}")
    sys.argv = [str(module.__file__), *args]
    try:
        module.main()
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    return 0


def split(output: str) -> dict[str, str]:
    """``{command: what it printed}`` of one stream of a ``one_interpreter`` run; what came before the
    first command, under ``""``."""
    before, *parts = f"\n{output}".split(f"\n{MARK}")
    return {"": before, **dict(part.partition("\n")[::2] for part in parts)}


def main() -> int:
    """Run the commands in order, up to the first that fails; its exit status, or 0."""
    for command, args in commands(sys.argv[1:]):
        status = run(command, args)
        if status:
            return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
