"""Task names checked before anything runs: a name that no task defines is one line naming it, where
tasks were looked for and how to add one, instead of an error from inside the harness mid-run.
Indexing tasks needs ``lm_eval`` only (no torch)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from attnlab.schema.errors import ConfigError


def task_manager(tasks: list[str], include_path: str | None) -> Any:
    """lm_eval's ``TaskManager`` for scoring ``tasks``: the index of ``include_path`` alone when the
    folder defines every one of them as a task, else that folder's and the harness's own. Indexing the
    harness's 14.7k built-in tasks costs 10-12 CPU-seconds, paid by every evaluation (each scoring of
    the training callback) that needed none of them. A group or tag of the folder may name built-in
    tasks: it gets both indexes."""
    from lm_eval.tasks import TaskManager

    if include_path:
        local = TaskManager(include_path=include_path, include_defaults=False)
        if set(tasks) <= set(local.all_subtasks):
            return local
    return TaskManager(include_path=include_path)


def unknown_tasks(tasks: list[str], include_path: str | None) -> list[str]:
    """The names of ``tasks`` that no task defines: neither a YAML file of ``include_path`` nor one of
    the harness's own tasks (names, groups, tags or glob patterns, as ``lm_eval`` reads them), nor the
    path of a YAML file. ``include_path`` is indexed first, then the harness's thousands of tasks (a
    minute on a loaded machine), only for a name the folder does not hold and that the harness's task
    files could define (``may_name_a_harness_task``)."""
    from lm_eval.tasks import TaskManager

    left = [name for name in tasks if not Path(name).is_file()]
    if left and include_path:
        local = TaskManager(include_path=include_path, include_defaults=False)
        left = [name for name in left if not local.match_tasks([name])]
    maybe = [name for name in left if may_name_a_harness_task(name)]
    if maybe:
        everything = TaskManager(include_path=include_path)
        left = [name for name in left if name not in maybe or not everything.match_tasks([name])]
    return left


GLOB_CHARACTERS = frozenset("*?[")  # fnmatch's, which lm_eval matches task names with


def may_name_a_harness_task(name: str) -> bool:
    """Whether ``name`` might name one of the harness's own tasks, groups or tags: a glob pattern, or a
    string written in one of the files of its task folder. The index takes every name from a YAML
    file of that folder or a template that one includes, as written, and matches a name without glob
    characters only to itself; so a plain name written in none of those files is in no index of them.
    Reading the folder's bytes costs a fraction of a second, indexing it 10-12 CPU-seconds."""
    import lm_eval.tasks

    if GLOB_CHARACTERS & set(name):
        return True
    written = name.encode()
    for folder, subfolders, files in os.walk(Path(lm_eval.tasks.__file__).parent):
        subfolders[:] = [sub for sub in subfolders if sub != "__pycache__"]
        for file in files:
            if written in Path(folder, file).read_bytes():
                return True
    return False


def unknown_tasks_message(unknown: list[str], include_key: str, include_path: str | None) -> str:
    """Why ``unknown`` cannot be scored, in one line: the names, the tasks of the folder
    ``include_key`` names (if any), where the harness's own are listed, and how to add one."""
    from lm_eval.tasks import TaskManager

    found = "the harness's own tasks (lm-eval ls tasks lists them)"
    if include_path:
        local = TaskManager(include_path=include_path, include_defaults=False).all_tasks
        found = f"{include_key}={include_path} holds {', '.join(local) or 'no task'}; or one of {found}"
    return (
        f"no such task: {', '.join(unknown)}; {found}; a task of your own is a YAML file in the folder "
        f"{include_key} names, or the path of that file"
    )


def check_task_names(tasks: list[str], include_path: str | None, key: str) -> None:
    """A ConfigError on ``<key>.tasks`` naming the tasks that no task defines (``unknown_tasks``), where
    tasks were looked for (``<key>.include_path``) and how to add one."""
    unknown = unknown_tasks(list(tasks), include_path)
    if unknown:
        message = unknown_tasks_message(unknown, f"{key}.include_path", include_path)
        raise ConfigError(f"{key}.tasks", tasks, message)
