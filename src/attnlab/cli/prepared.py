"""The data module of a run, built once: by validation, before the run directory exists (so that data
that does not fit the model stops the run with one line and nothing written), then taken by the job.

Hydra runs validation (``ValidateOnStart``) and the job in the same process, one after the other;
a multirun's job, a DDP child process and a direct call of ``attnlab.cli.train.train`` build it when
they take it.
"""

from __future__ import annotations

from typing import Any

from attnlab.schema.run import RunConfig

_prepared: list[tuple[tuple, Any]] = []  # the data module that validation built: (its key, it), at most one


def prepare_datamodule(run: RunConfig) -> Any:
    """The run's data module, built and set up: its files read whole, its tokenizer built, and checked
    against the model (``model.vocab_size`` against the tokenizer, ``model.num_classes`` against the
    labels, ``data.seq_len`` against the longest example). Validation calls it, so that bad data stops
    the run before its directory exists; the job that follows takes the same module
    (``take_datamodule``) instead of building it again."""
    key = (run.data, run.model, run.task.inner().name, run.seed)
    if not (_prepared and _prepared[0][0] == key):
        from attnlab.data import build_datamodule

        _prepared.clear()
        datamodule = build_datamodule(
            run.data, family=run.model.family, task=run.task.inner().name, seed=run.seed, model_cfg=run.model
        )
        datamodule.setup("fit")
        _prepared.append((key, datamodule))
    return _prepared[0][1]


def take_datamodule(run: RunConfig) -> Any:
    """The data module ``prepare_datamodule`` built for ``run`` (built now if it did not), which the
    module then no longer holds: a multirun's next job does not keep this one's data alive."""
    datamodule = prepare_datamodule(run)
    _prepared.clear()
    return datamodule
