"""A run's name: what distinguishes it from the runs beside it, readable in wandb and TensorBoard.

``run_name=`` names a run; otherwise it is named by its command-line overrides
(``model.n_heads=4,pos=rope``), in a multirun by the overrides its sweep varies only
(``ValidateOnStart`` records the varied keys in ``$ATTNLAB_SWEPT_KEYS`` before the first job). Keys
that say where or how a run is written, not what it trains, are left out, and so are the overrides
a command adds to what the user typed (``task=distill``'s teacher defaults, ``model=_teacher pos=...``;
recorded in ``$ATTNLAB_IMPLIED_OVERRIDES``): a name is made of what was typed.

The same label names the run's folder, in a form that needs no quoting in a shell, a glob or a Hydra
override (``ckpt_path=<run>/checkpoints/last.ckpt``, ``-m ckpt_path=<a>,<b>``, where ``=`` and ``,``
would be parsed): ``key-value`` pairs joined by ``+``, e.g. ``outputs/<date>/<time>_model.n_heads-4+pos-rope``
and a multirun's ``<job number>_<label>``. TensorBoard lists runs by their folders. The label depends
only on the command line, so every rank of a run, and every start of it, computes the same one.
"""

from __future__ import annotations

import json
import os
import re

SWEPT_KEYS_VARIABLE = "ATTNLAB_SWEPT_KEYS"
IMPLIED_VARIABLE = "ATTNLAB_IMPLIED_OVERRIDES"
# Keys (or their prefixes) that do not distinguish what a run trains.
NOT_DISTINGUISHING = (
    "run_dir",
    "ckpt_path",
    "run_name",
    "hydra.",
    "hparams_search",
    "logger",
    "trainer.enable_progress_bar",
    "print_config",
    "dry_run",
    "callbacks",
    "+callbacks",
)
MAX_LENGTH = 120
PATH_PARTS = 3  # of a path's value in a name: <run folder>/checkpoints/<file>
DROPPED = re.compile(r"""['"\[\](){}]""")  # quotes and brackets: optim.betas=[0.9,0.95] -> 0.9-0.95
NOT_FOLDER_SAFE = re.compile(r"[^A-Za-z0-9_.+@-]+")  # what a shell, a glob or Hydra would read -> "-"


def record_swept_keys(keys: set[str]) -> None:
    """The keys a multirun varies, for the names of its jobs (an environment variable: also seen by
    launchers that run the jobs in other processes)."""
    os.environ[SWEPT_KEYS_VARIABLE] = ",".join(sorted(keys))


def swept_keys() -> set[str] | None:
    value = os.environ.get(SWEPT_KEYS_VARIABLE)
    return set(value.split(",")) - {""} if value is not None else None


def record_implied_overrides(overrides: list[str]) -> None:
    """The overrides a command added to the command line itself, left out of names (an environment
    variable, like the swept keys; a JSON list, as an override's value may hold commas)."""
    os.environ[IMPLIED_VARIABLE] = json.dumps(sorted(overrides))


def implied_overrides() -> set[str]:
    return set(json.loads(os.environ.get(IMPLIED_VARIABLE) or "[]"))


def override_key(override: str) -> str:
    """``model.n_heads`` of ``model.n_heads=4`` (and of ``+model.x=1``, ``~model.x``)."""
    return override.partition("=")[0].lstrip("+~")


def run_label(overrides: list[str], swept: set[str] | None = None) -> str:
    """The overrides that distinguish a run, ``key=value`` joined by commas: those of ``swept`` when
    given (a multirun's), else every override that is not about where or how the run is written.
    Path separators become ``-``, so the label is also a file name; at most ``MAX_LENGTH`` characters."""
    label = ",".join(map(shortened, distinguishing(overrides, swept)))
    return re.sub(r"[/\\\s]+", "-", label)[:MAX_LENGTH]


def distinguishing(overrides: list[str], swept: set[str] | None) -> list[str]:
    """The overrides of ``swept`` keys when given (a multirun's), else every override that the user
    typed (not one the command implied); either way none about where or how the run is written."""
    if swept is not None:  # attnlab-eval -m ckpt_path=a,b: each job lands in its checkpoint's run
        return [o for o in overrides if override_key(o) in swept and not about_writing(o)]
    implied = implied_overrides()
    return [o for o in overrides if o not in implied and not about_writing(o)]


def about_writing(override: str) -> bool:
    """Whether ``override`` says where or how a run is written, not what it trains."""
    return override_key(override).startswith(NOT_DISTINGUISHING)


def shortened(override: str) -> str:
    """``key=value`` with a path cut to its last ``PATH_PARTS`` parts (``task.teacher=<run>/checkpoints/last.ckpt``
    keeps the run's folder): a long path would fill the name and push out the overrides after it."""
    key, equals, value = override.partition("=")
    if "/" in value:
        value = "/".join(value.rstrip("/").split("/")[-PATH_PARTS:])
    return key + equals + value


def run_name(given: str | None, overrides: list[str], fallback: str, multirun: bool = False) -> str:
    """``run_name`` if given, else the run's label (a multirun job's: by its swept keys), else
    ``fallback`` (the run directory's name)."""
    return given or run_label(overrides, swept_keys() if multirun else None) or fallback


def folder_name(base: str, given: str | None, overrides: list[str], multirun: bool) -> str:
    """A run folder's name: ``<base>_<label>``, the label being ``run_name`` or the distinguishing
    overrides (as for ``run_name``) in folder form (``folder_safe``); ``base`` alone for a run that
    nothing distinguishes (the defaults' run: it reads as the baseline beside the labelled ones)."""
    if given:
        label = folder_safe(given)
    else:
        pairs = distinguishing(overrides, swept_keys() if multirun else None)
        label = "+".join(folder_safe(f"{override_key(o)}-{shortened(o).partition('=')[2]}") for o in pairs)
    label = label[:MAX_LENGTH]
    return f"{base}_{label}" if label else base


def folder_safe(text: str) -> str:
    """``text`` with quotes and brackets dropped and every run of other characters than ASCII
    letters, digits and ``_.+@-`` made one ``-``."""
    return NOT_FOLDER_SAFE.sub("-", DROPPED.sub("", text))
