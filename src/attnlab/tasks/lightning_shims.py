"""The speed shims that lean on Lightning's private internals, in one place, and the version they
were checked against.

Lightning spends a few microseconds of Python on each of the ~200 hook calls of a training step, and
about a millisecond on each value given to ``self.log``. The shims below skip what does nothing in
attnlab's runs: the parameter checks when Lightning names the running hook, the calls of callbacks'
empty step hooks, a profiler context per hook call, and ``self.log``'s bookkeeping of step values
(``tasks.step_log``). Each depends on something Lightning does not promise; the contract tests
(``tests/tasks/test_lightning_shims.py``) fail when that changes. Under a Lightning version other
than ``CHECKED_LIGHTNING`` every shim is off and training takes Lightning's own paths, only slower.

Here, in ``tasks``, because it is the lowest package that knows Lightning: the task modules use the
first shim and the last, ``training`` the others.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.profilers import PassThroughProfiler

CHECKED_LIGHTNING = (2, 6)  # the major and minor version whose internals the contract tests read


def lightning_checked(version: str = pl.__version__) -> bool:
    """Whether ``version`` (Lightning's, by default) is the one the shims were checked against."""
    major, minor, *_ = (version.split("+")[0] + ".0.0").split(".")
    return (int(major), int(minor)) == CHECKED_LIGHTNING


SHIMS_ON = lightning_checked()

# -- the task module: the running hook's name ---------------------------------------------------

HOOK_NAME = "_current_fx_name"  # set by Lightning on the module before and after each hook call


def sets_hook_name(module: Any, name: str, value: object) -> bool:
    """Set ``module.<name>`` directly and say so, where ``name`` is the running hook's name.

    Lightning sets it some fifty times a training step; ``nn.Module.__setattr__`` first checks every
    value against parameters, buffers and submodules (a few microseconds a call), and a hook's name
    (a string or None) is none of those."""
    if SHIMS_ON and name == HOOK_NAME:
        object.__setattr__(module, name, value)
        return True
    return False


# -- the Trainer's profiler --------------------------------------------------------------------


class NoProfiler(PassThroughProfiler):
    """A profiler that records nothing, as Lightning's default, but hands out one shared empty context
    instead of making a generator-based context manager at each of the ~170 hook calls of a training
    step (Lightning wraps every hook and every callback's hook in ``profiler.profile``)."""

    _NOTHING = nullcontext()

    def profile(self, action_name: str) -> AbstractContextManager:
        return self._NOTHING


def quiet_profiler() -> NoProfiler | None:
    """The Trainer's ``profiler`` when none is asked for: ``NoProfiler``, or Lightning's default (None)."""
    return NoProfiler() if SHIMS_ON else None


# -- callbacks: the step hooks Lightning need not call ------------------------------------------

# The hooks Lightning calls on every callback at every training step (``_call_callback_hooks``).
STEP_HOOKS = (
    "on_train_batch_start",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
    "on_train_batch_end",
)


def without_idle_step_hooks(callback: pl.Callback) -> pl.Callback:
    """``callback``, with the step hooks its class leaves as Lightning's no-ops set to None.

    Lightning calls each of a step's six hooks on every callback, overridden or not, naming each call
    for its profiler (some 60 calls a step for attnlab's ten callbacks, most of them to empty
    methods), but only where the attribute is callable: with the idle ones None, it calls only the
    hooks that do something."""
    if SHIMS_ON:
        for hook in STEP_HOOKS:
            if getattr(type(callback), hook, None) is getattr(pl.Callback, hook):
                setattr(callback, hook, None)
    return callback


def retire_hook(callback: pl.Callback, hook: str) -> None:
    """Stop Lightning calling ``callback``'s ``hook`` (one that has done its work): a None hook is skipped."""
    if SHIMS_ON:
        setattr(callback, hook, None)


# -- step values to the loggers without self.log -----------------------------------------------


def logs_step_values_itself() -> bool:
    """Whether a training step's values reach the loggers through ``tasks.step_log`` (else ``self.log``)."""
    return SHIMS_ON


def accumulating(trainer: pl.Trainer) -> bool:
    """Whether this batch only accumulates gradients (no optimizer step ends it)."""
    return trainer.fit_loop._should_accumulate()


def write_step_values(trainer: pl.Trainer, values: dict[str, Any]) -> None:
    """``values`` to every logger, as Lightning writes ``self.log``'s at the end of a step: only at its
    logging steps (``log_every_n_steps``, or every step of a fast dev run), its connector adding the
    epoch and picking the step."""
    connector = trainer._logger_connector
    if connector.should_update_logs or trainer.fast_dev_run:
        connector.log_metrics(values)


# -- a restored run's logging step --------------------------------------------------------------


def logging_step(trainer: pl.Trainer) -> int:
    """The step Lightning's loggers count (``log_every_n_steps``): the batches that stepped the optimizer."""
    return trainer.fit_loop.epoch_loop._batches_that_stepped


def set_logging_step(trainer: pl.Trainer, step: int) -> bool:
    """Make Lightning's logging step ``step``; whether it was set (never outside the checked version)."""
    if SHIMS_ON:
        trainer.fit_loop.epoch_loop._batches_that_stepped = step
    return SHIMS_ON
