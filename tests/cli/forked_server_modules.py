"""Imported by the fork server (``forked.PRELOAD``), after the modules named there: every module of
attnlab (``attnlab.data``'s submodules and others are imported only when a command reaches them, so
each forked command imported, and with ``PYTHONDONTWRITEBYTECODE`` compiled, them again) but the
harness's (lm-eval, which two test files read), and what two-process runs (torch.distributed's
checkpoint and tensor modules), TensorBoard's logger and the Optuna sweeper import on their way.
0.6 CPU-s once per server on the machine of 2026-11-28, against about 1,400 samples of imports in forked children over the suite (py-spy, 25 Hz). The server finds this
module only because ``forked`` starts it with tests/cli on its PYTHONPATH."""

import importlib
import pkgutil

from hydra.core.plugins import Plugins

import attnlab

OUTSIDE_ATTNLAB = [
    "torch.distributed.checkpoint",
    "torch.distributed.checkpoint.state_dict",
    "torch.distributed._tensor",
    "torch.utils.tensorboard",
    "optuna",
    "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper",
]

for module in pkgutil.walk_packages(attnlab.__path__, "attnlab."):
    if not module.name.startswith("attnlab.harness"):
        importlib.import_module(module.name)
for name in OUTSIDE_ATTNLAB:
    importlib.import_module(name)
Plugins.instance()  # Hydra's scan of its plugins, which every command would make again (15 CPU-ms)
