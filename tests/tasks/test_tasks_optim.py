"""AdamW parameter groups and the learning-rate schedules against their formulas."""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch import nn

from attnlab.blocks.positional import LearnedPositionalEncoding, RelativePositionBias
from attnlab.schema.errors import ConfigError
from attnlab.schema.load import read_optim_config
from attnlab.schema.model import model_config
from attnlab.schema.optim import AdamWConfig, Decay
from attnlab.schema.pos import RelativePos
from attnlab.tasks.optim import (
    build_schedule,
    configure_optimizers,
    param_groups,
    stretch_schedule,
    uses_fused_adamw,
)

# Two heads, a narrow feed-forward and the usual init: losses near log(vocab) at the start.
SIZES = dict(n_heads=2, d_ff=32, init_std=0.02)

FAMILY_SETUPS = [
    ("gpt", {}),
    ("gpt", {"tie_embeddings": False, "norm": "rmsnorm", "lm_head_bias": True}),
    ("bert", {"type_vocab_size": 2, "num_classes": 3, "classifier_hidden": True}),
    ("seq2seq", {"pos": RelativePos()}),  # relative position bias tables
    ("vit", {"num_classes": 4}),
]


@pytest.mark.parametrize(("family", "overrides"), FAMILY_SETUPS)
def test_param_groups_cover_every_parameter_once_and_spare_norms_biases_embeddings(
    tiny_model, family, overrides
):
    model = tiny_model(family, **overrides, **SIZES)
    decay, no_decay = param_groups(model, weight_decay=0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    decay_ids = [id(p) for p in decay["params"]]
    no_decay_ids = [id(p) for p in no_decay["params"]]
    assert len(set(decay_ids)) == len(decay_ids) and len(set(no_decay_ids)) == len(no_decay_ids)
    assert not set(decay_ids) & set(no_decay_ids)
    assert set(decay_ids) | set(no_decay_ids) == {id(p) for p in model.parameters()}

    spared = set(no_decay_ids)
    for name, module in model.named_modules():
        if isinstance(
            module, (nn.LayerNorm, nn.Embedding, LearnedPositionalEncoding, RelativePositionBias)
        ) or ("Norm" in type(module).__name__):
            assert all(id(p) in spared for p in module.parameters()), name
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            assert id(module.weight) in set(decay_ids), name
    for name, param in model.named_parameters():
        if param.dim() < 2 or name.endswith("cls_token"):
            assert id(param) in spared, name


def test_vit_class_token_and_learned_positions_have_no_weight_decay(tiny_model):
    model = tiny_model("vit", num_classes=4, **SIZES)
    _, no_decay = param_groups(model, 0.1)
    spared = {id(p) for p in no_decay["params"]}
    assert id(model.cls_token) in spared and id(model.pos.weight) in spared


def test_decay_matrices_and_embeddings_is_every_tensor_of_two_or_more_dimensions(tiny_model):
    """nanoGPT's rule: token embeddings and learned position tables are decayed too; norm scales and
    biases are not."""
    model = tiny_model("gpt", **SIZES)
    decay, no_decay = param_groups(model, 0.1, Decay.matrices_and_embeddings)
    decayed = {id(p) for p in decay["params"]}
    assert decayed == {id(p) for p in model.parameters() if p.dim() >= 2}
    embeddings = [m.weight for m in model.modules() if isinstance(m, nn.Embedding)]
    assert embeddings and all(id(w) in decayed for w in embeddings)
    assert no_decay["params"] and all(p.dim() < 2 for p in no_decay["params"])


def test_decay_all_shrinks_every_parameter_once(tiny_model):
    model = tiny_model("gpt", **SIZES)
    decay, no_decay = param_groups(model, 0.1, Decay.all)
    assert [id(p) for p in decay["params"]] == [id(p) for p in model.parameters()]
    assert no_decay["params"] == []


@pytest.mark.parametrize("decay", list(Decay))
def test_configure_optimizers_uses_the_decay_setting(tiny_model, decay):
    """optim.decay reaches the optimizer: its decayed group is what param_groups makes of it."""
    model = tiny_model("gpt", **SIZES)
    optimizer = configure_optimizers(model, AdamWConfig(decay=decay), max_steps=10)["optimizer"]
    expected, _ = param_groups(model, 0.1, decay)
    assert [id(p) for p in optimizer.param_groups[0]["params"]] == [id(p) for p in expected["params"]]
    assert optimizer.param_groups[0]["weight_decay"] == 0.1


def _lrs(cfg: AdamWConfig, max_steps: int, steps: list[int], d_model: int = 16) -> list[float]:
    model = nn.Linear(2, 2)
    model.cfg = model_config("gpt", d_model=d_model)  # the schedule reads d_model from the model's config
    out = configure_optimizers(model, cfg, max_steps)
    optimizer, scheduler = out["optimizer"], out["lr_scheduler"]["scheduler"]
    assert out["lr_scheduler"]["interval"] == "step"
    seen = []
    for step in range(max(steps) + 1):
        if step in steps:
            seen.append(optimizer.param_groups[0]["lr"])
            assert optimizer.param_groups[1]["lr"] == seen[-1]
        optimizer.step()
        scheduler.step()
    return seen


STEPS = [0, 4, 9, 10, 35, 60, 109]


def test_cosine_warms_up_then_decays_to_min_lr_ratio():
    lr, warmup, total, floor = 1e-3, 10, 110, 0.1
    got = _lrs(AdamWConfig(lr=lr, schedule="cosine", warmup_steps=warmup, min_lr_ratio=floor), total, STEPS)

    def expected(s: int) -> float:
        if s < warmup:
            return lr * (s + 1) / warmup
        return lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * (s - warmup) / (total - warmup))))

    assert got == pytest.approx([expected(s) for s in STEPS], rel=1e-6)
    assert got[2] == pytest.approx(lr) and got[-1] == pytest.approx(lr * floor, rel=1e-2)


def test_linear_warms_up_then_decays_to_zero():
    lr, warmup, total = 2e-3, 10, 110
    got = _lrs(AdamWConfig(lr=lr, schedule="linear", warmup_steps=warmup), total, STEPS)
    expected = [
        lr * (s + 1) / warmup if s < warmup else lr * (1 - (s - warmup) / (total - warmup)) for s in STEPS
    ]
    assert got == pytest.approx(expected, rel=1e-6)


def test_constant_without_warmup_is_flat():
    got = _lrs(AdamWConfig(lr=5e-4, schedule="constant", warmup_steps=0), 0, STEPS)
    assert got == pytest.approx([5e-4] * len(STEPS))


def test_noam_is_the_papers_formula_times_lr():
    lr, warmup, d_model = 2.0, 10, 32
    got = _lrs(AdamWConfig(lr=lr, schedule="noam", warmup_steps=warmup), -1, STEPS, d_model=d_model)
    expected = [lr * d_model**-0.5 * min((s + 1) ** -0.5, (s + 1) * warmup**-1.5) for s in STEPS]
    assert got == pytest.approx(expected, rel=1e-6)
    assert max(got) == got[STEPS.index(9)]  # the peak is at step number `warmup`


def test_optimizer_is_adamw_with_configured_betas_and_eps(tiny_model):
    out = configure_optimizers(
        tiny_model("gpt", **SIZES), AdamWConfig(betas=[0.8, 0.9], eps=1e-6, schedule="constant"), 10
    )
    optimizer = out["optimizer"]
    assert isinstance(optimizer, torch.optim.AdamW)
    assert optimizer.defaults["betas"] == (0.8, 0.9) and optimizer.defaults["eps"] == 1e-6
    assert optimizer.defaults["fused"]  # the fused kernel: about 3x faster steps on CPU


def test_a_decaying_schedule_needs_a_step_budget(tiny_model):
    with pytest.raises(
        ValueError, match=re.escape("optim.schedule=cosine decays over a step budget, but max_steps=-1")
    ):
        configure_optimizers(tiny_model("gpt", **SIZES), AdamWConfig(schedule="cosine"), -1)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"schedule": "step"}, "optim.schedule=step: choose one of constant, cosine, linear, noam"),
        (
            {"schedule": "noam", "warmup_steps": 0},
            "optim.warmup_steps=0: the noam schedule needs warmup_steps > 0",
        ),
        ({"lr": 0.0}, "optim.lr=0.0: must be positive"),
        ({"betas": [0.9]}, "optim.betas=[0.9]: must be two numbers in [0, 1)"),
    ],
)
def test_bad_optim_settings_name_the_key(settings, message):
    """The schema checks the optimiser's settings once, when a config is read."""
    with pytest.raises(ConfigError) as err:
        read_optim_config({"name": "adamw", **settings}).check()
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("optim", "fused"), [("adamw", None), ("adamw", False), ("muon", False), ("muon", True)]
)
def test_optim_fused_chooses_the_adamw_kernel(tiny_model, optim: str, fused: bool | None) -> None:
    """``optim.fused`` (``optim.adamw.fused`` under muon): null fuses where Lightning can clip, else as set."""
    from attnlab.schema.optim import MuonConfig
    from attnlab.schema.task import task_config
    from attnlab.tasks import build_task

    cfg = AdamWConfig(fused=fused) if optim == "adamw" else MuonConfig()
    if optim == "muon":
        cfg.adamw.fused = fused
    task = build_task(task_config("causal_lm"), cfg, tiny_model("gpt", **SIZES), max_steps=10)
    optimizer = task.configure_optimizers()["optimizer"]
    adamw = optimizer if optim == "adamw" else optimizer.adamw
    assert bool(adamw.defaults["fused"]) == (True if fused is None else fused)


@pytest.mark.parametrize(
    ("fused", "clips_mixed", "expected"),
    [(None, False, True), (None, True, False), (True, True, True), (False, False, False)],
)
def test_the_fused_kernel_is_decided_in_one_function(tiny_model, fused, clips_mixed, expected) -> None:
    """``uses_fused_adamw``: the setting where one is given, else fused unless Lightning clips under
    mixed precision; never off a CPU or CUDA device. The same for optim=muon's AdamW part."""
    from attnlab.schema.optim import MuonConfig

    model = tiny_model("gpt", **SIZES)
    muon = MuonConfig()
    muon.adamw.fused = fused
    for cfg, key in ((AdamWConfig(fused=fused), "optim.fused"), (muon, "optim.adamw.fused")):
        assert cfg.fused_adamw.key == key and cfg.fused_adamw.fused is fused
        assert uses_fused_adamw(cfg, model, clips_mixed) is expected
        assert uses_fused_adamw(cfg, model.to("meta"), clips_mixed) is False
        model.to_empty(device="cpu")


def test_a_task_module_keeps_its_typed_configs_and_saves_plain_data(tiny_model) -> None:
    """No round trip through plain data on the way to the optimiser: the task module holds the very
    configs it was given; its hyperparameters (what a checkpoint holds) are their plain data."""
    from attnlab.schema.load import plain
    from attnlab.schema.task import task_config
    from attnlab.tasks import build_task

    optim, task_cfg = AdamWConfig(lr=3e-3, decay=Decay.all), task_config("causal_lm")
    task = build_task(task_cfg, optim, tiny_model("gpt", **SIZES), max_steps=10)
    assert task.optim_cfg is optim and task.task_cfg is task_cfg
    assert task.hparams["optim"] == plain(optim) and task.hparams["optim"]["decay"] == "all"
    assert type(task.hparams["optim"]["decay"]) is str and task.hparams["model"] == plain(task.model.cfg)


def test_a_fused_adamw_that_lightning_cannot_clip_is_refused() -> None:
    from attnlab.schema.checks import check_run
    from attnlab.schema.run import RunConfig

    run = RunConfig()
    run.optim.fused, run.trainer.precision = True, "bf16-mixed"
    with pytest.raises(ConfigError, match=re.escape("optim.fused=true: cannot clip gradients under")):
        check_run(run)
    run.trainer.gradient_clip_val = None
    check_run(run)


def _scheduled(max_steps: int, steps_done: int) -> torch.optim.lr_scheduler.LambdaLR:
    """The scheduler of a tiny parameter's AdamW under a cosine schedule over ``max_steps``, after ``steps_done``."""
    cfg = AdamWConfig(lr=1e-3, schedule="cosine", warmup_steps=2, min_lr_ratio=0.1)
    optimizer = torch.optim.AdamW([nn.Parameter(torch.zeros(2))], lr=cfg.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, build_schedule(cfg, max_steps, d_model=8))
    for _ in range(steps_done):
        scheduler.optimizer.step()
        scheduler.step()
    return scheduler


def test_stretch_schedule_ends_a_restored_schedule_at_the_new_budget():
    """A run of 20 steps resumed to 40: restoring keeps the checkpoint's 20-step budget (the rate at
    its floor); stretched, the schedule is the 40-step one from the current step on."""
    finished = _scheduled(max_steps=20, steps_done=20)
    resumed = _scheduled(max_steps=40, steps_done=0)
    resumed.optimizer.load_state_dict(finished.optimizer.state_dict())
    resumed.load_state_dict(finished.state_dict())
    assert resumed.get_last_lr()[0] == pytest.approx(1e-4)  # keep: the floor
    stretch_schedule(resumed, 40)
    at_20_of_40 = _scheduled(max_steps=40, steps_done=20)
    assert resumed.get_last_lr() == pytest.approx(at_20_of_40.get_last_lr())
    assert [g["lr"] for g in resumed.optimizer.param_groups] == pytest.approx(at_20_of_40.get_last_lr())
    resumed.optimizer.step()
    resumed.step()
    assert resumed.get_last_lr() == pytest.approx(_scheduled(max_steps=40, steps_done=21).get_last_lr())


def test_apply_settings_gives_a_restored_muon_the_new_values_and_keeps_its_state(tiny_model):
    """optim.on_resume=apply: a Muon + AdamW restored from 6 steps under one set of values takes the
    other set's (both rates, momentum, the warmup), and its moments and step count stay the checkpoint's."""
    from attnlab.schema.optim import AdamWPart, MuonConfig
    from attnlab.schema.task import task_config
    from attnlab.tasks import build_task
    from attnlab.tasks.optim import apply_settings

    def configured(cfg: MuonConfig):
        task = build_task(task_config("causal_lm"), cfg, tiny_model("gpt", **SIZES), max_steps=20)
        return task, task.configure_optimizers()["lr_scheduler"]["scheduler"]

    _, before = configured(MuonConfig(warmup_steps=2))
    for param in before.optimizer.param_groups[0]["params"]:
        param.grad = torch.ones_like(param)
    for _ in range(6):
        before.optimizer.step()
        before.step()
    new = MuonConfig(lr=0.01, momentum=0.9, warmup_steps=10, adamw=AdamWPart(lr=3e-4))
    task, after = configured(new)
    after.optimizer.load_state_dict(before.optimizer.state_dict())
    after.load_state_dict(before.state_dict())
    assert after.get_last_lr() == pytest.approx(before.get_last_lr())  # the restore: the old values
    ((groups, schedule),) = task.configured
    apply_settings(
        after, groups, schedule, {"optim.lr", "optim.momentum", "optim.warmup_steps", "optim.adamw.lr"}
    )
    muon, *adamw = after.optimizer.param_groups
    assert muon["momentum"] == 0.9 and muon["initial_lr"] == 0.01
    assert [g["initial_lr"] for g in adamw] == [3e-4, 3e-4]
    assert after.get_last_lr() == pytest.approx([0.01 * 7 / 10, 3e-4 * 7 / 10, 3e-4 * 7 / 10])  # warming up
    assert after.last_epoch == 6
    kept, restored = before.optimizer.state_dict()["state"][0], after.optimizer.state_dict()["state"][0]
    assert kept.keys() == restored.keys() and all(torch.equal(kept[k], restored[k]) for k in kept)
