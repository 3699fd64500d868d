"""The optimisers of the ``optim`` group (AdamW with weight-decay groups; Muon with AdamW) and the
learning-rate schedules as a per-step LambdaLR."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab.blocks.roles import ParamRole, params_with_role
from attnlab.models.parametrization import learning_rate_multipliers
from attnlab.models.torch_shims import set_last_lr
from attnlab.schema.builders import Builders
from attnlab.schema.optim import OPTIMIZERS, AdamWConfig, Decay, MuonConfig, NsDtype, OptimConfig
from attnlab.tasks.muon import Muon, MuonWithAdamW, hidden_matrices

# What each optim.decay shrinks, by role (blocks.roles); ``all`` is every parameter
MATRICES = (ParamRole.input_matrix, ParamRole.hidden_matrix, ParamRole.readout)
DECAYED_ROLES = {
    Decay.matrices: MATRICES,
    Decay.matrices_and_embeddings: (*MATRICES, ParamRole.embedding, ParamRole.position_table),
    Decay.all: tuple(ParamRole),
}
# optim.ns_dtype as Muon takes it; None (auto) decides per parameter's device
NS_DTYPES = {NsDtype.auto: None, NsDtype.bfloat16: torch.bfloat16, NsDtype.float32: torch.float32}


def param_groups(
    model: nn.Module, weight_decay: float, decay: Decay = Decay.matrices, exclude: Sequence[Tensor] = ()
) -> list[dict]:
    """Two AdamW groups, with and without weight decay; ``decay`` says which parameters it shrinks,
    ``exclude`` which parameters another optimizer takes (Muon's).

    ``matrices`` (the default): the weight matrices (roles input matrix, hidden matrix, readout: the
    linear and convolution layers); norm scales, biases, token and segment embeddings, learned
    position tables, relative-bias tables and the ViT class token get none. ``matrices_and_embeddings``:
    every parameter that is not a vector, embeddings and position tables included (nanoGPT's rule:
    every tensor of two or more dimensions). ``all``: every parameter. Tied weights appear once.
    """
    decayed = {id(p) for p in decayed_params(model, decay)}
    excluded = {id(p) for p in exclude}
    decay, no_decay = [], []
    for param in model.parameters():  # yields each shared parameter once
        if param.requires_grad and id(param) not in excluded:
            (decay if id(param) in decayed else no_decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def decayed_params(model: nn.Module, decay: Decay) -> list[nn.Parameter]:
    """The parameters of ``model`` that weight decay applies to under ``decay`` (``DECAYED_ROLES``)."""
    return params_with_role(model, *DECAYED_ROLES[Decay(decay)])


@dataclass
class Schedule:
    """The learning-rate multiplier after ``step`` optimizer steps (a picklable LambdaLR lambda).

    ``constant``, ``cosine`` and ``linear`` warm up linearly over ``warmup_steps`` to 1; then
    ``cosine`` decays to ``min_lr_ratio`` and ``linear`` to 0 at ``max_steps``. ``noam`` is
    Vaswani et al.'s ``d_model**-0.5 * min(s**-0.5, s * warmup**-1.5)`` with ``s = step + 1``.
    """

    name: str
    warmup_steps: int
    max_steps: int
    min_lr_ratio: float
    d_model: int

    def __call__(self, step: int) -> float:
        if self.name == "noam":
            s = step + 1
            return self.d_model**-0.5 * min(s**-0.5, s * self.warmup_steps**-1.5)
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.name == "constant":
            return 1.0
        progress = min(1.0, (step - self.warmup_steps) / max(1, self.max_steps - self.warmup_steps))
        if self.name == "linear":
            return 1.0 - progress
        cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * cosine


def uses_fused_adamw(cfg: OptimConfig, model: nn.Module, clips_mixed_precision: bool) -> bool:
    """Whether AdamW runs PyTorch's fused kernel (about 3x faster steps on CPU): as ``optim.fused``
    (``optim.adamw.fused``) says, where null fuses unless gradients are clipped under mixed precision
    (Lightning refuses to clip when the optimizer unscales them itself, as the fused kernel does);
    never where a parameter is on another device than a CPU or a CUDA GPU."""
    chosen = cfg.fused_adamw.fused
    fused = not clips_mixed_precision if chosen is None else chosen
    return fused and all(p.device.type in ("cpu", "cuda") for p in model.parameters())


def build_schedule(cfg: OptimConfig, max_steps: int, d_model: int) -> Schedule:
    """The schedule of ``cfg``; ``cfg.max_steps`` (when set) overrides the trainer's ``max_steps``."""
    steps = schedule_steps(cfg, max_steps)
    if cfg.schedule in ("cosine", "linear") and (steps is None or steps <= 0):
        raise ValueError(
            f"optim.schedule={cfg.schedule} decays over a step budget, but max_steps={steps}; "
            "set trainer.max_steps or optim.max_steps (or use schedule 'constant' or 'noam')"
        )
    # plain str: the scheduler's state (this object's fields) goes into checkpoints
    return Schedule(str(cfg.schedule), cfg.warmup_steps, steps or 0, cfg.min_lr_ratio, d_model)


def schedule_steps(cfg: OptimConfig, max_steps: int) -> int:
    """The step budget a schedule decays over: ``cfg.max_steps`` when set, else the trainer's."""
    return cfg.max_steps if cfg.max_steps is not None else max_steps


def stretch_schedule(scheduler: torch.optim.lr_scheduler.LambdaLR, max_steps: int) -> None:
    """``optim.on_extend=stretch`` on a resumed run: the restored schedules (the checkpoint's, ending at
    its step budget) end at ``max_steps`` instead, and the optimizer's rates for the next step are
    what the stretched schedule gives at the current step. Schedules without a budget (``constant``,
    ``noam``) do not change."""
    for lr_lambda in scheduler.lr_lambdas:
        if isinstance(lr_lambda, Schedule):
            lr_lambda.max_steps = max_steps
    reschedule(scheduler)


# What optim.on_resume=apply takes from the optimizer built from this run's settings: its groups'
# values (initial_lr: the schedule's peak rate) and its schedule's fields (max_steps: see apply_settings).
GROUP_VALUES = ("initial_lr", "weight_decay", "betas", "eps", "momentum", "nesterov", "ns_steps")
SCHEDULE_FIELDS = {"optim.schedule": "name", "optim.warmup_steps": "warmup_steps"}
SCHEDULE_FIELDS |= {"optim.min_lr_ratio": "min_lr_ratio", "optim.max_steps": "max_steps"}


def group_values(optimizer: torch.optim.Optimizer) -> list[dict]:
    """The values of ``optimizer``'s parameter groups that ``apply_settings`` can restore into another."""
    return [{k: g[k] for k in GROUP_VALUES if k in g} for g in optimizer.param_groups]


def apply_settings(
    scheduler: torch.optim.lr_scheduler.LambdaLR, groups: list[dict], schedule: Schedule, changed: set[str]
) -> None:
    """``optim.on_resume=apply``: a restored optimizer and schedule (the checkpoint's) take this run's
    values, ``groups`` (``group_values`` of the optimizer built from this run's settings, before the
    restore) and the fields of ``schedule`` whose keys are ``changed``. The schedule's ``max_steps``
    changes only with ``optim.max_steps`` (``trainer.max_steps`` is ``optim.on_extend``'s), so the
    schedule goes on from the current step with the new values; Adam's moments and the step count stay."""
    optimizer = scheduler.optimizer
    for group, values in zip(optimizer.param_groups, groups, strict=True):
        group.update(values)
    scheduler.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
    for key, name in SCHEDULE_FIELDS.items():
        if key in changed:
            for lr_lambda in scheduler.lr_lambdas:
                if isinstance(lr_lambda, Schedule):
                    setattr(lr_lambda, name, getattr(schedule, name))
    reschedule(scheduler)


def reschedule(scheduler: torch.optim.lr_scheduler.LambdaLR) -> None:
    """Set the optimizer's rates for the next step to what the (changed) schedule gives at the current step."""
    groups = scheduler.optimizer.param_groups
    for group, base_lr, lr_lambda in zip(groups, scheduler.base_lrs, scheduler.lr_lambdas, strict=True):
        group["lr"] = base_lr * lr_lambda(scheduler.last_epoch)
    set_last_lr(scheduler, [group["lr"] for group in groups])  # what get_last_lr() (the logged lr) reads


# What builds the optimiser of each optim config (``OPTIMIZER_BUILDERS.of(cfg)``): ONE
# torch.optim.Optimizer, which Lightning's automatic optimisation steps, clips, schedules and checkpoints.
OPTIMIZER_BUILDERS: Builders[Callable[[nn.Module, OptimConfig, bool], torch.optim.Optimizer]] = Builders(
    OPTIMIZERS, "optimizer builder"
)


@OPTIMIZER_BUILDERS.builds(AdamWConfig)
def adamw(model: nn.Module, cfg: AdamWConfig, fused: bool) -> torch.optim.Optimizer:
    """AdamW on every parameter, with weight decay on those ``cfg.decay`` names."""
    groups = with_rate_multipliers(param_groups(model, cfg.weight_decay, cfg.decay), model, cfg.lr, "adam")
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, fused=fused or None)


def with_rate_multipliers(groups: list[dict], model: nn.Module, lr: float, optimiser: str) -> list[dict]:
    """``groups`` split where the model's parametrisation gives some parameters another learning rate
    when ``optimiser`` (``adam`` or ``muon``) updates them (μP: Adam's hidden matrices at lr / width
    multiplier, ``models.parametrization.MUP``); unchanged where every multiplier is 1."""
    multipliers = learning_rate_multipliers(model, optimiser)
    if not any(id(param) in multipliers for group in groups for param in group["params"]):
        return groups  # the groups as they are (an empty one included: a checkpoint's layout)
    split = []
    for group in groups:
        by_rate: dict[float, list] = {}
        for param in group["params"]:
            by_rate.setdefault(multipliers.get(id(param), 1.0), []).append(param)
        split += [{**group, "params": params, "lr": lr * rate} for rate, params in sorted(by_rate.items())]
    return split


@OPTIMIZER_BUILDERS.builds(MuonConfig)
def muon(model: nn.Module, cfg: MuonConfig, fused: bool) -> torch.optim.Optimizer:
    """Muon on the hidden matrices (``cfg``'s settings; Newton-Schulz in ``cfg.ns_dtype``), AdamW on
    the rest (``cfg.adamw``'s), as one.

    The hidden matrices are all weight matrices, so Muon decays them under every ``cfg.decay``; of
    the others, AdamW decays those that ``cfg.decay`` names. Each part takes μP's rate multipliers
    for its optimiser (``with_rate_multipliers``): none for Muon's matrices, Adam's for the rest.
    """
    hidden = hidden_matrices(model)
    matrices = Muon(
        with_rate_multipliers([{"params": hidden}], model, cfg.lr, "muon"),
        ns_dtype=NS_DTYPES[cfg.ns_dtype],
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
        momentum=cfg.momentum,
        nesterov=cfg.nesterov,
        ns_steps=cfg.ns_steps,
        adjust_lr_fn=str(cfg.adjust_lr),
    )
    rest = cfg.adamw
    groups = with_rate_multipliers(
        param_groups(model, rest.weight_decay, cfg.decay, exclude=hidden), model, rest.lr, "adam"
    )
    others = torch.optim.AdamW(groups, lr=rest.lr, betas=tuple(rest.betas), eps=rest.eps, fused=fused or None)
    return MuonWithAdamW(matrices, others)


def configure_optimizers(
    model: nn.Module, cfg: OptimConfig, max_steps: int, *, clips_mixed_precision: bool = False
) -> dict:
    """The optimiser of ``cfg`` and its schedule in the form ``LightningModule.configure_optimizers``
    returns. The schedule multiplies every group's learning rate by the same factor.
    ``clips_mixed_precision``: the trainer clips gradients under mixed precision (``uses_fused_adamw``).
    """
    schedule = build_schedule(cfg, max_steps, model.cfg.d_model)
    fused = uses_fused_adamw(cfg, model, clips_mixed_precision)
    optimizer = OPTIMIZER_BUILDERS.of(cfg)(model, cfg, fused)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    return {
        "optimizer": optimizer,
        "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
    }
