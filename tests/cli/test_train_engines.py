"""The layers' engines as ``attnlab-train`` keys: ``trainer.float8``, ``trainer.activation_checkpointing``
and ``compile=block`` reach the model the run trains (``run.prepared.speed_up``); the pairings that
cannot run are one line naming the key, before the run directory exists."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_train_config import composed, run_config
from torch import nn

from attnlab.cli.train import check_job
from attnlab.models import build_model
from attnlab.models.speedups import transformer_layers
from attnlab.run.prepared import speed_up
from attnlab.schema.errors import ConfigError

TINY = dict(vocab_size=64, d_model=32, n_heads=2, n_layers=2, d_ff=64)


def gpt(run_overrides: tuple[str, ...]) -> nn.Module:
    run = run_config("model=gpt-tiny", *run_overrides)
    from dataclasses import replace

    return speed_up(build_model(replace(run.model, **TINY)), run)


def test_float8_emulated_converts_the_layers_projections_and_keeps_the_head() -> None:
    from torchao.float8.float8_linear import Float8Linear

    model = gpt(("trainer.float8=emulated",))
    converted = {n for n, m in model.named_modules() if isinstance(m, Float8Linear)}
    assert converted and all(n.startswith("stack.layers.") for n in converted)
    assert not any(isinstance(m, Float8Linear) for m in model.lm_head.modules())  # the head stays


def test_compile_block_compiles_each_layer_and_not_the_model() -> None:
    model = gpt(("compile=block",))
    assert all(layer._compiled_call_impl is not None for layer in transformer_layers(model).values())
    assert model._compiled_call_impl is None


def test_activation_checkpointing_full_checkpoints_each_layer() -> None:
    from torch.distributed._composable.contract import _get_registry

    model = gpt(("trainer.activation_checkpointing=full",))
    assert all("checkpoint" in (_get_registry(layer) or {}) for layer in transformer_layers(model).values())
    plain = gpt(())
    assert all(not _get_registry(layer) for layer in transformer_layers(plain).values())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ("trainer.float8=true",),
            "trainer.float8=true: float8 matrix products need a GPU of compute capability 8.9+ (H100, L4, "
            "...); on the CPU use trainer.float8=emulated",
        ),
        (("trainer.float8=fp8",), "trainer.float8=fp8: true, false, or emulated"),
        (("compile=layers",), "compile=layers: true (the whole model), block (each layer), or false"),
        (
            ("trainer=fsdp2_sim", "compile=true"),
            "compile=true: compiles the whole model, across the units trainer.strategy=fsdp2 shards: use "
            "compile=block",
        ),
        (
            ("trainer=ddp_sim", "checkpoint.sharded=true"),
            "checkpoint.sharded=true: is for trainer.strategy=fsdp2 (each process writes its shards)",
        ),
        (
            ("trainer=fsdp2_sim", "optim=muon"),
            "optim.name=muon: cannot run under trainer.strategy=fsdp2: FSDP shards the weight matrices",
        ),
    ],
)
def test_pairings_that_cannot_run_are_one_line_before_the_run_directory(
    tmp_path: Path, overrides: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        check_job(composed(*overrides), tmp_path / "run", list(overrides))
    assert str(refused.value).startswith(message)
    assert "\n" not in str(refused.value) and not (tmp_path / "run").exists()
