"""A run's name: what distinguishes it from the runs beside it, readable in wandb and TensorBoard.

``run_name=`` names a run; otherwise it is named by its command-line overrides
(``model.n_heads=4,pos=rope``), in a multirun by the overrides its sweep varies only
(``ValidateOnStart`` records the varied keys in ``$ATTNLAB_SWEPT_KEYS`` before the first job). Keys
that say where or how a run is written, not what it trains, are left out.
"""

from __future__ import annotations

import os
import re

SWEPT_KEYS_VARIABLE = "ATTNLAB_SWEPT_KEYS"
# Keys (or their prefixes) that do not distinguish what a run trains.
NOT_DISTINGUISHING = (
    "run_dir",
    "ckpt_path",
    "run_name",
    "hydra.",
    "hparams_search",
    "logger",
    "trainer.enable_progress_bar",
    "callbacks",
    "+callbacks",
)
MAX_LENGTH = 120


def record_swept_keys(keys: set[str]) -> None:
    """The keys a multirun varies, for the names of its jobs (an environment variable: also seen by
    launchers that run the jobs in other processes)."""
    os.environ[SWEPT_KEYS_VARIABLE] = ",".join(sorted(keys))


def swept_keys() -> set[str] | None:
    value = os.environ.get(SWEPT_KEYS_VARIABLE)
    return set(value.split(",")) - {""} if value is not None else None


def override_key(override: str) -> str:
    """``model.n_heads`` of ``model.n_heads=4`` (and of ``+model.x=1``, ``~model.x``)."""
    return override.partition("=")[0].lstrip("+~")


def run_label(overrides: list[str], swept: set[str] | None = None) -> str:
    """The overrides that distinguish a run, ``key=value`` joined by commas: those of ``swept`` when
    given (a multirun's), else every override that is not about where or how the run is written.
    Path separators become ``-``, so the label is also a file name; at most ``MAX_LENGTH`` characters."""
    kept = [
        o
        for o in overrides
        if (
            override_key(o) in swept
            if swept is not None
            else not override_key(o).startswith(NOT_DISTINGUISHING)
        )
    ]
    label = ",".join(kept)
    return re.sub(r"[/\\\s]+", "-", label)[:MAX_LENGTH]


def run_name(given: str | None, overrides: list[str], fallback: str) -> str:
    """``run_name`` if given, else the run's label, else ``fallback`` (the run directory's name)."""
    return given or run_label(overrides, swept_keys()) or fallback
