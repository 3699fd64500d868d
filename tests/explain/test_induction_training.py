"""The induction study's own pipeline at a short length: a 2-layer attention-only decoder trained for
500 steps on repeated segments (about 12 CPU-seconds) passes the phase change, and the induction score,
activation patching and ablation name the same heads (``experiments/induction_heads/study.py``)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

STUDY = Path(__file__).parents[2] / "experiments" / "induction_heads" / "study.py"


def load_study() -> ModuleType:
    """study.py as a module (registered first: its dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location("induction_study", STUDY)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_short_training_forms_induction_heads_that_every_method_names() -> None:
    study = load_study()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = study.run(0, study.Size(steps=500, eval_every=100, eval_rows=64))
    finally:
        torch.set_num_threads(threads)

    assert result["phase_change_step"] is not None and result["phase_change_step"] <= 500
    assert result["final_repeat_loss"] < 0.5 < math.log(26)  # the repeat is copied, not guessed
    assert result["induction_heads"] and all(layer == 1 for layer, _ in result["induction_heads"])
    assert result["same_heads"]  # patching ranks the induction heads first
    assert result["previous_token_heads"]  # and layer 0 holds the heads they compose with
    for mode in ("zero", "mean"):
        ablation = result["ablation"][mode]
        induction = ablation["induction_heads"] - ablation["before"]
        assert induction > 2.0, mode
        if ablation["control_heads"] is not None:
            assert ablation["control_heads"] - ablation["before"] < induction / 2, mode
