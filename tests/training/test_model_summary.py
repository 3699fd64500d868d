"""The model summary at the start of fit: layers and parameter counts, and no FLOPs (Lightning's counter
needs an ``example_input_array``, which attnlab's tasks have not, so it printed ``Total FLOPs: 0``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytorch_lightning.callbacks import ModelSummary as LightningModelSummary
from pytorch_lightning.utilities.model_summary import summarize

from attnlab.schema.optim import AdamWConfig
from attnlab.schema.run import RunConfig
from attnlab.schema.task import task_config
from attnlab.tasks import build_task
from attnlab.training.callbacks import build_callbacks


def test_the_summary_has_the_parameters_and_no_flops(
    tiny_model, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (callback,) = [
        c for c in build_callbacks(RunConfig(), tmp_path, {}, "abc") if isinstance(c, LightningModelSummary)
    ]
    task = build_task(task_config("causal_lm"), AdamWConfig(), tiny_model("gpt", n_heads=2), max_steps=4)
    s = summarize(task, max_depth=2)
    callback.summarize(
        s._get_summary_data(),
        s.total_parameters,
        s.trainable_parameters,
        s.model_size,
        s.total_training_modes,
        total_flops=s.total_flops,
        **callback._summarize_kwargs,
    )
    printed = capsys.readouterr().out
    total = sum(p.numel() for p in task.parameters())
    assert f"Total params: {total / 1e3:.1f} K" in printed, printed
    assert "model.stack" in printed and "Params" in printed, printed
    assert "FLOPs" not in printed and "Flops" not in printed, printed
