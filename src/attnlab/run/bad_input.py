"""Bad input on one line: which errors mean bad input (config, data, checkpoint), how each is written
as ``key=value: what is allowed`` (read from the exception objects, never their text), and the
exceptions that end a command before its run began (a rejected config, a finished dry run).

Hydra is told to raise (``HYDRA_FULL_ERROR=1``) instead of printing its multi-line report, so that
composition errors (an unknown group choice or key) end in the same ``error: key=value: ...`` line
as the schema's. Set ``HYDRA_FULL_ERROR=1`` yourself to see full tracebacks.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf.errors import OmegaConfBaseException

from attnlab.schema.errors import ConfigError
from attnlab.schema.load import config_error
from attnlab.training.signals import RunInterrupted

# Errors that mean bad input (config, data, checkpoint): one line, no traceback, status 2.
USER_ERRORS = (
    ConfigError,
    HydraException,
    OmegaConfBaseException,
    ValueError,
    FileNotFoundError,
    NotADirectoryError,
)
SCHEMA_NODE = "{}_schema"  # the name of a schema node in Hydra's config store; not a choice for users
full_traceback = os.environ.get("HYDRA_FULL_ERROR") == "1"  # the user asked for tracebacks


def check_writable(key: str, path: str | Path) -> None:
    """ConfigError naming ``key`` where this user cannot write ``path`` (a file or a folder, new or
    not): the folder it goes into (its nearest existing one) is a file, or read-only for this user."""
    folder = Path(path).absolute()
    folder = folder if folder.is_dir() else folder.parent  # a file is written into its folder
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ConfigError(key, path, f"{folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(
            key,
            path,
            f"{folder} cannot be written by this user: choose another folder, or change its permissions",
        )


def exit_before_the_run(stop: RunInterrupted) -> NoReturn:
    """A signal before the run began: one line, nothing to resume, the signal's exit status."""
    print(f"interrupted by {stop}, before the run began", file=sys.stderr)
    sys.exit(stop.exit_code)


def one_line(err: BaseException, overrides: list[str] | None = None) -> str:
    """The message of ``err`` on one line, as ``key=value: what is allowed`` where it names a key.

    Read from the exception objects, never from their text: Hydra's missing group option (its
    options), and an OmegaConf error at composition (its key, the schema node there) about a value
    of the command line (the parsed override of that key in ``overrides``, default ``sys.argv``)."""
    if isinstance(err, MissingConfigException) and err.missing_cfg_file and err.options:
        group, _, value = err.missing_cfg_file.rpartition("/")
        options = sorted(o for o in err.options if not o.endswith(SCHEMA_NODE.format("")))
        return f"{group}={value}: choose one of {', '.join(options)}"
    if isinstance(err, OverrideParseException):
        return f"{err.override}: not a valid override ({str(err).splitlines()[0]})"
    cause = err if isinstance(err, OmegaConfBaseException) else err.__cause__
    if isinstance(cause, OmegaConfBaseException) and cause.full_key:
        value = override_value(cause.full_key, overrides)
        error = config_error(cause, value)
        if isinstance(value, Below):  # foo.bar=1 where foo is not a key: named as given
            error = ConfigError(f"{error.key}.{value.rest}", value.value, error.allowed)
        return str(error)
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("full_key:", "object_type=", "reference_type="))]
    return "; ".join(lines) or type(err).__name__


def override_value(key: str, overrides: list[str] | None = None) -> object:
    """The value ``overrides`` (default: the command line) give ``key`` (``logger.names[0]``: the first
    of its list), or ``?``. The last override of a key is the one composed (``max_steps=5 max_steps=ten``:
    ``ten``); an override of a key below it (``foo.bar=1`` for ``foo``) is shown whole."""
    name, _, index = key.partition("[")
    parser = OverridesParser.create()
    found: object = "?"
    for arg in sys.argv[1:] if overrides is None else overrides:
        with suppress(HydraException):
            override = parser.parse_override(arg)
            given = override.key_or_group.lstrip("+~")
            if override.is_delete():
                continue
            if given == name:
                value = override.value()
                found = value[int(index.rstrip("]"))] if index and isinstance(value, list) else value
            elif given.startswith(f"{name}.") and found == "?":
                found = Below(given[len(name) + 1 :], override.value())
    return found


@dataclass
class Below:
    """A value given to a key below the one an error names: ``foo.bar=1`` where ``foo`` is unknown."""

    rest: str
    value: object


class DryRunDone(BaseException):
    """``dry_run=true``: the config was validated (and printed) before any directory exists; the command
    ends there with status 0. A BaseException, for the reason ConfigRejected is one."""


class ConfigRejected(BaseException):
    """A bad config found by ValidateOnStart. A BaseException, because Hydra turns an Exception raised
    in a callback into a warning and goes on to create the run directory."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@contextmanager
def user_errors_as_one_line() -> Iterator[None]:
    """Bad input (config, checkpoint, image) exits with status 2 and one ``error:`` line, no traceback;
    a full disk (or the file size limit) with status 1 and one line naming the file."""
    from attnlab.training.files import disk_full_in_one_line

    with disk_full_in_one_line():
        try:
            yield
        except USER_ERRORS as err:
            print(f"error: {one_line(err)}", file=sys.stderr)
            sys.exit(2)


def error_line(err: BaseException) -> str:
    """How a failed job's error is shown (and kept in its summary.json): ``key=value: ...`` for bad
    input, the exception's type and message for anything else."""
    return one_line(err) if isinstance(err, USER_ERRORS) else f"{type(err).__name__}: {one_line(err)}"
