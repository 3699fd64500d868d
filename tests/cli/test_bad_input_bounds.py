"""Settings that cannot work are refused before any folder exists, in one line naming the setting and what
is allowed: compute budgets, callbacks, batch sizes, length sweeps and sample sizes bounded by the
machine's memory (the estimate said), devices, checkpoint paths, explain's layers and heads. Each check is
called in this process (the commands call them before they write anything)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from attnlab.cli import consolidate
from attnlab.run.budget import MOST_STEPS, budget_steps, with_budget_steps
from attnlab.run.devices import check_device
from attnlab.run.eval_lengths import check_lengths_fit
from attnlab.run.explaining import check_probe_and_ablation
from attnlab.run.sampling import check_sampling_fits
from attnlab.schema.commands import ExplainCommand, SampleCommand
from attnlab.schema.data import TextData
from attnlab.schema.errors import ConfigError
from attnlab.schema.model import GPTConfig, ViTConfig
from attnlab.schema.pos import pos_config
from attnlab.schema.run import RunConfig, TrainerConfig
from attnlab.schema.rundir import check_checkpoint_file
from attnlab.training.targets import check_targets

BUDGET_RUN = RunConfig(trainer=TrainerConfig(devices=1, compute_budget=1e12))
DATAMODULE = SimpleNamespace(tokenizer=SimpleNamespace(vocab_size=65))


def test_a_budget_below_one_step_is_refused() -> None:
    with pytest.raises(ConfigError) as refused:
        budget_steps(1.0, 3.2e9)
    assert str(refused.value) == (
        "trainer.compute_budget=1.0: buys less than one optimizer step, which costs 3.2e+09 FLOPs here: "
        "give at least that"
    )


def test_an_absurd_budget_is_refused_with_the_bound() -> None:
    with pytest.raises(ConfigError) as refused:
        budget_steps(1e40, 3.2e9)
    assert str(refused.value).startswith("trainer.compute_budget=1e+40: buys 3.13e+30 optimizer steps")
    assert f"a budget up to {MOST_STEPS * 3.2e9:.3g} FLOPs here" in str(refused.value)
    assert budget_steps(MOST_STEPS * 3.2e9, 3.2e9) == MOST_STEPS


def test_a_budget_and_an_explicit_max_steps_are_refused_together() -> None:
    with pytest.raises(
        ConfigError, match=r"^trainer.compute_budget=1000000000000.0: sets trainer.max_steps itself"
    ):
        with_budget_steps(BUDGET_RUN, DATAMODULE, max_steps_given=True)
    steps = with_budget_steps(BUDGET_RUN, DATAMODULE).trainer.max_steps
    assert 1 <= steps <= MOST_STEPS


def callbacks_run(model: object = None, **callback: object) -> RunConfig:
    return RunConfig(model=model or GPTConfig(), callbacks={"extra": callback})


def test_a_callback_argument_its_class_does_not_take_is_refused() -> None:
    run = callbacks_run(_target_="pytorch_lightning.callbacks.EarlyStopping", monitor="val/loss", patiense=3)
    with pytest.raises(ConfigError) as refused:
        check_targets(run)
    assert str(refused.value).startswith(
        "callbacks.extra.patiense=3: not an argument of EarlyStopping; it takes monitor, min_delta, patience"
    )


def test_a_callback_argument_its_class_requires_is_asked_for() -> None:
    run = callbacks_run(_target_="pytorch_lightning.callbacks.EarlyStopping")
    with pytest.raises(
        ConfigError, match=r"^callbacks.extra.monitor=null: required by EarlyStopping: give it"
    ):
        check_targets(run)


def test_the_harness_callback_on_a_vit_is_refused() -> None:
    run = callbacks_run(
        ViTConfig(), _target_="attnlab.training.callbacks.harness.HarnessEvaluation", tasks=["t"]
    )
    with pytest.raises(ConfigError) as refused:
        check_targets(run)
    assert str(refused.value) == (
        "callbacks.extra=HarnessEvaluation: scores language models (model.family gpt or seq2seq), not "
        "model.family=vit: leave callbacks.extra out"
    )


def test_a_batch_no_device_holds_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^data.batch_size=99999999999999999999: at most 1048576 samples"):
        TextData(batch_size=99999999999999999999).check()


def test_a_length_whose_attention_scores_exceed_the_memory_is_refused() -> None:
    ev = SimpleNamespace(
        batch_size=None,
        data=SimpleNamespace(batch_size=8),
        trainer=SimpleNamespace(accelerator="cpu"),
        model=SimpleNamespace(n_heads=4),
    )
    with pytest.raises(ConfigError) as refused:
        check_lengths_fit(ev, 100000)
    assert str(refused.value).startswith(
        "eval.lengths=100000: needs about 2.38e+03 GiB for one layer's attention scores at length 100000 "
        "(8 x 4 heads x 100000^2 floats), more than the "
    )
    check_lengths_fit(ev, 256)


@pytest.mark.parametrize(
    ("setting", "key"),
    [({"num_samples": 10**9}, "num_samples"), ({"max_new_tokens": 10**9}, "max_new_tokens")],
)
def test_samples_the_memory_cannot_hold_are_refused(setting: dict, key: str) -> None:
    cfg = GPTConfig(vocab_size=65, pos=pos_config("rope"))
    with pytest.raises(ConfigError) as refused:
        check_sampling_fits(SampleCommand(ckpt_path="x", **setting), cfg)
    assert str(refused.value).startswith(f"{key}=1000000000: needs about ")
    assert "(their ids, KV cache and logits), more than the " in str(refused.value)
    check_sampling_fits(SampleCommand(ckpt_path="x", num_samples=4, max_new_tokens=500), cfg)


def test_a_device_torch_does_not_know_is_named() -> None:
    with pytest.raises(ConfigError, match=r"^device=bogus: not a device: cpu, cuda, cuda:<index> or mps$"):
        check_device("device", "bogus")
    check_device("device", "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_on_a_machine_without_a_gpu_is_named() -> None:
    with pytest.raises(ConfigError, match=r"^device=cuda: this machine has no GPU \(CUDA\): use device=cpu$"):
        check_device("device", "cuda")


def test_a_directory_as_ckpt_path_is_said_to_be_one(tmp_path: Path) -> None:
    """What attnlab-eval and attnlab-export check their ckpt_path with."""
    with pytest.raises(ConfigError, match=r"^ckpt_path=.*: is a directory: give a checkpoint file"):
        check_checkpoint_file("ckpt_path", tmp_path)


@pytest.mark.parametrize(
    ("target", "allowed"),
    [
        ("layers.9.attn_out", "the model has 2 layers there, layers.0 to layers.1"),
        (
            "layers.0.attn_heads.7",
            "layers.0.attn_heads has 4 heads, layers.0.attn_heads.0 to layers.0.attn_heads.3",
        ),
    ],
)
def test_an_ablated_layer_or_head_out_of_range_names_the_range(tiny_model, target: str, allowed: str) -> None:
    cmd = replace(ExplainCommand(ckpt_path="x", input="x"), ablate=[target])
    with pytest.raises(ConfigError) as refused:
        check_probe_and_ablation(cmd, tiny_model("gpt"), None)
    assert str(refused.value) == f"ablate={target}: {allowed}"


def test_consolidate_on_a_missing_path_says_it_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ended:
        consolidate.main([str(tmp_path / "missing")])
    assert ended.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: checkpoint={tmp_path / 'missing'}: does not exist"
    ]


def test_consolidate_without_its_argument_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        consolidate.main([])
    assert ended.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: the following arguments are required: checkpoint (see attnlab-consolidate --help)"
    ]
