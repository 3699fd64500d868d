"""What a command reads of its command line before Hydra composes it: the one place that does, each
piece with the reason it cannot wait for the composed config.

Everything else is read from the composed config, as the saved-config reader does: attnlab-eval's and
attnlab-sample's ``data.*`` and ``model.*`` keys compose onto an untyped node (``data/_checkpoint``,
``model/_checkpoint``, registered with the schemas) and are typed afterwards by the checkpoint's own
classes, picked by their tags (``attnlab.run.eval_data.job_run_config``). Four pieces remain:

* ``task=distill task.teacher=<ckpt>`` (``attnlab.cli.hydra.teacher_defaults.use_teacher_defaults``): the teacher's
  model and data are the student's *defaults*, so ``model.type_vocab_size=2`` for a bert teacher must
  compose onto a bert node. Hydra chooses a group's option only from the primary config's defaults
  list and the overrides it reads from ``sys.argv``, never from a value of the config it composes, and
  it saves the composed config before the job could swap classes: the teacher's options are stored
  and chosen on the command line, the one rewrite of ``sys.argv``.
* ``model=<preset>`` on attnlab-eval and attnlab-sample (``refuse_model_preset``): the model is the
  checkpoint's, and a model preset's defaults list chooses the ``task`` and ``data`` groups that these
  commands lack, so composing it fails with Hydra's "Could not override 'task'" instead.
* ``trainer=<preset>`` on attnlab-eval (``refuse_other_trainers``): a multi-process preset has keys
  that eval's trainer lacks, so composing it fails with Hydra's report of one unknown key instead of
  the line that says which presets eval runs on.
* ``callbacks=[{_target_: ...}]`` on attnlab-train (``refuse_callbacks_as_values``): Hydra fails with
  a traceback on a mapping given to a config group, before any callback of ours could see it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from attnlab.cli.hydra.eval_choices import refuse_other_trainers
from attnlab.cli.hydra.teacher_defaults import use_teacher_defaults
from attnlab.run.bad_input import exit_before_the_run, user_errors_as_one_line
from attnlab.run.eval_data import refuse_model_preset
from attnlab.run.presets import presets
from attnlab.schema.errors import ConfigError
from attnlab.training.signals import RunInterrupted


def read_before_train() -> None:
    """attnlab-train: the teacher's defaults of ``task=distill``, then callbacks given as values."""
    use_teacher_defaults()
    refuse_callbacks_as_values(sys.argv[1:])


def read_before_eval() -> None:
    """attnlab-eval: a model preset, or a trainer preset that does not run in one process on one device."""
    refuse_model_preset(sys.argv[1:])
    refuse_other_trainers(sys.argv[1:])


def read_before_sample() -> None:
    """attnlab-sample: a model preset (the model is the checkpoint's)."""
    refuse_model_preset(sys.argv[1:])


BEFORE_COMPOSING: dict[str, Callable[[], None]] = {
    "train": read_before_train,
    "eval": read_before_eval,
    "sample": read_before_sample,
}


def before_composing(config_name: str) -> None:
    """What the command ``config_name`` (conf/<name>.yaml) reads of ``sys.argv`` before Hydra does
    (nothing for the commands not in ``BEFORE_COMPOSING``): bad input ends the command with one line,
    a signal with its line, both before any directory exists."""
    read = BEFORE_COMPOSING.get(config_name)
    if read is None:
        return
    try:
        with user_errors_as_one_line():
            read()
    except RunInterrupted as stop:  # loading a teacher can take a while
        exit_before_the_run(stop)


def refuse_callbacks_as_values(args: list[str]) -> None:
    """``callbacks`` is a config group: a list given to it chooses its options
    (``callbacks=[default,early_stopping]``), and Hydra fails with a traceback on a callback's mapping
    in it (``callbacks=[{_target_: ...}]``) or given as its value. A callback of one's own is a key
    of it, ``+callbacks.<name>={_target_: ...}``, whose class is checked before the run directory."""

    parser = OverridesParser.create()
    for arg in args:
        try:
            override = parser.parse_override(arg)
        except HydraException:  # Hydra says what is wrong with it
            continue
        value = override.value() if not override.is_sweep_override() else None
        listed = isinstance(value, list) and not all(isinstance(v, str) for v in value)
        if override.key_or_group.lstrip("+~") == "callbacks" and (listed or isinstance(value, dict)):
            raise ConfigError(
                "callbacks",
                arg.partition("=")[2],
                f"choose options of the callbacks group ({', '.join(presets('callbacks'))}, or a list of "
                "them); add a callback of your own by a name: '+callbacks.<name>={_target_: package.Class}'",
            )
