"""``attnlab-eval``: the metrics of a checkpoint on the split its run used, logged under the same names.

    attnlab-eval ckpt_path=outputs/2024-05-01/12-00-00/checkpoints/best-step001000.ckpt
    attnlab-eval ckpt_path=... split=val logger=csv

The run's config travels in the checkpoint (data, seed and tokenizer included), so the test split and
its metrics are exactly those ``attnlab-train`` reported at the end of training (``test_metrics.json``).
The results go into the checkpoint's run directory, ``<run>/eval/<date>_<time>/metrics.json``, with
what the evaluation changed relative to the run, where ``attnlab-report`` finds them.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, read_write

from attnlab.cli.hydra.app import checked_by_validation, run_hydra
from attnlab.cli.hydra.eval_choices import help_groups
from attnlab.cli.hydra.jobs import run_job
from attnlab.run.bad_input import check_writable
from attnlab.run.devices import check_devices
from attnlab.run.eval_data import (
    parse,
    values_of,
)
from attnlab.run.eval_lengths import check_length_sweep
from attnlab.run.evaluation import EvalJob, evaluation, typed_eval_config
from attnlab.run.harness import check_harness_tasks
from attnlab.schema.rundir import EVAL_DIR, eval_dir_of
from attnlab.training.lock import new_dir
from attnlab.training.targets import check_trainer_target

log = logging.getLogger("attnlab.eval")


def main() -> None:
    """Console script ``attnlab-eval`` (also ``python -m attnlab.eval``)."""
    OmegaConf.register_new_resolver("attnlab.eval_dir", eval_dir_for, replace=True)
    OmegaConf.register_new_resolver("attnlab.eval_groups", help_groups, replace=True)
    run_hydra(eval_job, "eval")


def eval_dir_for(fallback: str, *, _root_: DictConfig) -> str:
    """``${attnlab.eval_dir:outputs}`` in conf/eval.yaml: the ``eval/`` folder of the checkpoint's run
    directory, where attnlab-report looks; ``<fallback>/eval`` for a checkpoint outside a run directory.
    Hydra resolves each job's output directory in the job's own config, so the jobs of
    ``-m ckpt_path=a.ckpt,b.ckpt`` each land in their checkpoint's run (only the sweep's
    ``multirun.yaml`` goes to ``multirun/eval/<time>``, as the base config names no checkpoint)."""
    ckpt_path = OmegaConf.select(_root_, "ckpt_path", default=None, throw_on_missing=False)
    found = isinstance(ckpt_path, str) and Path(ckpt_path).is_file()
    where = eval_dir_of(ckpt_path) if found else None
    return str(where) if where is not None else f"{fallback}/{EVAL_DIR}"


def check_eval_job(config: DictConfig, run_dir: Path | None, overrides: list[str]) -> EvalJob:
    """The eval config, checked before the output directory exists, with the run it measures (its
    checkpoint's, with this evaluation's data): the job takes it (``checked_by_validation``), so the
    checkpoint's run config is read once. A multirun's base config is checked with its swept keys
    left out (the first checkpoint of ``-m ckpt_path=a,b``); each job is then composed and checked
    on its own (``check_jobs`` in conf/eval.yaml), so a bad one stops the sweep before any job."""
    swept = values_of("ckpt_path", parse(overrides)) if run_dir is None else []
    if swept and OmegaConf.is_missing(config, "ckpt_path"):  # -m ckpt_path=a,b: the base config has none
        config = OmegaConf.merge(config, {"ckpt_path": swept[0]})
    fixed = overrides if run_dir is not None else [o for o in overrides if not is_sweep(o)]
    job = typed_eval_config(config, fixed)
    check_length_sweep(job.ev)
    check_harness_tasks(job.ev)
    check_devices(job.ev.trainer, on_the_cpu="use trainer=cpu")
    check_trainer_target(job.ev.trainer._target_)
    return job


def is_sweep(arg: str) -> bool:
    """Whether a command-line override sweeps (``data.seq_len=64,128``): composed job by job."""
    return not arg.startswith("-") and parse([arg])[0].is_sweep_override()


def claim_eval_dir(config: DictConfig, run_dir: Path | None) -> None:
    """Two evaluations of one run started in the same second with the same overrides would write one
    folder (``<run>/eval/<date>_<time>_<label>``): the folder is made here, before Hydra writes, and
    the second gets ``<...>_2`` (``training.lock.new_dir``). A multirun's jobs are folders of its own.
    A folder named on the command line (``hydra.run.dir=...``) is used as it is while it holds nothing
    (a folder made for the evaluation); one that holds files gets a ``_2`` as well."""
    if run_dir is None:
        check_writable("hydra.sweep.dir", config.hydra.sweep.dir)
        return
    check_writable("hydra.run.dir", run_dir)
    named = any(str(o).startswith("hydra.run.dir=") for o in config.hydra.overrides.hydra)
    if named and (not run_dir.exists() or (run_dir.is_dir() and not any(run_dir.iterdir()))):
        return
    folder = new_dir(run_dir)
    with read_write(config.hydra):
        config.hydra.run.dir = str(folder)


def eval_job(config: DictConfig) -> float | None:
    """The Hydra task; returns the split's value of the run's monitored metric."""
    hc = HydraConfig.get()
    out_dir = Path(hc.runtime.output_dir)

    def job() -> float:
        checked = checked_by_validation(out_dir)  # a multirun's job was checked without its folder
        ev, run, evaluated = checked or typed_eval_config(config, list(hc.overrides.task))
        metrics, monitor = evaluation(ev, run, evaluated, out_dir)
        if not monitor:  # harness tasks, lengths: their first metric
            return next(iter(metrics.values()), math.nan)
        return metrics.get(monitor, math.nan)

    return run_job(job)


if __name__ == "__main__":
    main()
