"""The schemas of the ``optim`` group, one class per optimiser (``name`` is the tag, chosen with
``optim=<name>``), with their rules (torch-free): ``adamw`` (the default) and ``muon`` (Muon on the
hidden weight matrices, AdamW on every other parameter, see ``attnlab.tasks.muon``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING

from attnlab.schema.choice import Choice, TaggedUnion
from attnlab.schema.errors import ConfigError, fraction, not_negative, positive

# AdamW's settings, the same under optim=adamw and in optim=muon's AdamW part.
ADAMW_LR = 1e-3
ADAMW_WEIGHT_DECAY = 0.1
ADAMW_EPS = 1e-8


def adamw_betas() -> list[float]:
    return [0.9, 0.99]


class OptimName(Choice):
    adamw = "adamw"
    muon = "muon"


class Schedule(Choice):
    """Learning rate over the steps; all but noam warm up linearly first (``attnlab.tasks.optim``)."""

    constant = "constant"
    cosine = "cosine"
    linear = "linear"
    noam = "noam"


class OnExtend(Choice):
    """What a resume that runs past the checkpoint's schedule (a larger ``trainer.max_steps``) does with
    a schedule that decays over a step budget (``cosine``, ``linear``; ``attnlab.training.resume``)."""

    keep = "keep"  # the checkpoint's schedule goes on: past its end, the rate stays at its final value
    stretch = "stretch"  # the schedule is stretched to end at the new max_steps, from the current step on


class OnResume(Choice):
    """What a resume whose ``optim.*`` settings differ from its checkpoint's does (``attnlab.training.resume``)."""

    refuse = "refuse"  # one line naming the setting: the checkpoint's run goes on only with its own
    apply = (
        "apply"  # the changed settings of RESUME_CHANGEABLE replace the restored optimizer's and schedule's
    )


# The optim.* settings a resume may change under optim.on_resume=apply: values of the optimizer's
# parameter groups and of the schedule. The others (optim.name, decay, fused, ...) shape the optimizer.
RESUME_CHANGEABLE = frozenset(
    f"optim.{key}"
    for key in (
        *("lr", "weight_decay", "betas", "eps", "momentum", "nesterov", "ns_steps"),
        *("schedule", "warmup_steps", "min_lr_ratio", "max_steps"),
        *("adamw.lr", "adamw.weight_decay", "adamw.betas", "adamw.eps"),
    )
)


class Decay(Choice):
    """Which parameters weight decay shrinks (``attnlab.tasks.optim.param_groups``)."""

    matrices = "matrices"  # weights of linear and convolution layers; never embeddings, norms, biases
    matrices_and_embeddings = "matrices_and_embeddings"  # every tensor of 2+ dimensions (nanoGPT): no vector
    all = "all"  # every parameter


class AdjustLR(Choice):
    """How Muon scales its learning rate by a matrix's shape A x B (``torch.optim.Muon``'s ``adjust_lr_fn``)."""

    original = "original"  # lr * sqrt(max(1, A / B)) (Keller Jordan's Muon)
    match_rms_adamw = "match_rms_adamw"  # lr * 0.2 * sqrt(max(A, B)): AdamW's update size (Moonshot's)


class NsDtype(Choice):
    """The dtype of Muon's Newton-Schulz orthogonalisation (``attnlab.tasks.muon.Muon``)."""

    auto = "auto"  # bfloat16 on CUDA (torch.optim.Muon's choice), float32 on a CPU (its precision)
    bfloat16 = "bfloat16"
    float32 = "float32"


def check_adam(prefix: str, betas: list[float], eps: float) -> None:
    """Adam's two moment decay rates and its epsilon, at ``<prefix>betas`` and ``<prefix>eps``."""
    if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
        raise ConfigError(f"{prefix}betas", list(betas), "must be two numbers in [0, 1)")
    positive(f"{prefix}eps", eps)


OPTIMIZERS = TaggedUnion("optim", "name", "optim={}")


@dataclass(frozen=True)
class FusedChoice:
    """The setting of PyTorch's fused AdamW kernel: its key and its value (None: chosen for the run,
    ``attnlab.tasks.optim.uses_fused_adamw``)."""

    key: str
    fused: bool | None


@dataclass
class OptimConfig:
    """What every optimiser reads: the learning rate, its schedule, weight decay; ``name`` is the tag."""

    name: str = MISSING  # a str, not the OptimName enum: an optimiser registered outside attnlab has its own
    lr: float = ADAMW_LR  # peak learning rate; for ``noam`` a multiplier of the paper's formula
    weight_decay: float = ADAMW_WEIGHT_DECAY
    decay: Decay = Decay.matrices  # which parameters weight_decay applies to; the rest get none
    schedule: Schedule = Schedule.cosine
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1  # cosine floor as a fraction of lr
    max_steps: int | None = None  # None: the trainer's max_steps
    on_extend: OnExtend = OnExtend.keep  # a resume past the checkpoint's schedule: keep | stretch
    on_resume: OnResume = OnResume.refuse  # a resume with changed optim settings: refuse | apply
    # QK-clip (Kimi K2's MuonClip, any optimiser): after each step, a head whose largest attention
    # logit on the step's batch exceeds qk_clip has its query and key weights scaled back to it
    # (attnlab.blocks.qk_clip). None: off.
    qk_clip: float | None = None
    log_max_logits: bool = False  # log each layer's largest attention logit (train/max_logit/<layer>)

    @property
    def fused_adamw(self) -> FusedChoice:
        """The AdamW kernel choice (``fused``): None picks it (see ``AdamWConfig``)."""
        raise NotImplementedError

    def check(self) -> None:
        OPTIMIZERS.check_tag(self)
        positive("optim.lr", self.lr)
        not_negative("optim.weight_decay", self.weight_decay)
        not_negative("optim.warmup_steps", self.warmup_steps)
        if self.schedule == Schedule.noam and self.warmup_steps == 0:
            raise ConfigError("optim.warmup_steps", 0, "the noam schedule needs warmup_steps > 0")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ConfigError("optim.min_lr_ratio", self.min_lr_ratio, "must be in [0, 1]")
        positive("optim.max_steps", self.max_steps, allow_none=True)
        positive("optim.qk_clip", self.qk_clip, allow_none=True)


@OPTIMIZERS.register
@dataclass
class AdamWConfig(OptimConfig):
    """AdamW (Loshchilov & Hutter 2019), with weight decay on the weight matrices only."""

    name: OptimName = OptimName.adamw
    betas: list[float] = field(default_factory=adamw_betas)
    eps: float = ADAMW_EPS
    # PyTorch's fused AdamW kernel (one kernel for all parameters: ~3x faster steps on a CPU, fewer
    # launches on CUDA). null: fused unless the precision is mixed and gradients are clipped (Lightning
    # cannot clip when the fused kernel unscales them itself); true: required; false: the foreach kernel.
    fused: bool | None = None

    @property
    def fused_adamw(self) -> FusedChoice:
        return FusedChoice("optim.fused", self.fused)

    def check(self) -> None:
        super().check()
        check_adam("optim.", self.betas, self.eps)


@dataclass
class AdamWPart:
    """The AdamW that ``optim=muon`` runs on the parameters Muon does not take (embeddings, readouts,
    norms, biases, convolutions): its own peak learning rate and weight decay, scheduled like Muon's.
    The defaults are ``optim=adamw``'s, so those parameters train as they do under it."""

    lr: float = ADAMW_LR
    weight_decay: float = ADAMW_WEIGHT_DECAY  # on those of them that ``optim.decay`` names
    betas: list[float] = field(default_factory=adamw_betas)
    eps: float = ADAMW_EPS
    fused: bool | None = None  # the fused AdamW kernel, as optim=adamw's optim.fused

    def check(self) -> None:
        positive("optim.adamw.lr", self.lr)
        not_negative("optim.adamw.weight_decay", self.weight_decay)
        check_adam("optim.adamw.", self.betas, self.eps)


MAX_NS_STEPS = 99  # torch.optim.Muon refuses 100 or more Newton-Schulz steps when it first steps


@OPTIMIZERS.register
@dataclass
class MuonConfig(OptimConfig):
    """Muon (Jordan et al. 2024, ``torch.optim.Muon``: momentum orthogonalised by Newton-Schulz steps)
    on the hidden matrices (the Transformer layers' projections, the heads' dense layers: role
    ``hidden_matrix`` of ``attnlab.blocks.roles``), at ``lr`` with decoupled ``weight_decay``; AdamW
    on every other parameter, with the settings of ``adamw``. One schedule scales both learning rates."""

    name: OptimName = OptimName.muon
    lr: float = 0.02  # Muon's peak learning rate (Keller Jordan's default)
    weight_decay: float = 0.01  # Muon's decoupled weight decay on the hidden matrices
    momentum: float = 0.95
    nesterov: bool = True
    ns_steps: int = 5  # Newton-Schulz iterations that orthogonalise the update
    adjust_lr: AdjustLR = AdjustLR.original
    ns_dtype: NsDtype = NsDtype.auto  # the dtype the Newton-Schulz steps compute in
    adamw: AdamWPart = field(default_factory=AdamWPart)

    @property
    def fused_adamw(self) -> FusedChoice:
        return FusedChoice("optim.adamw.fused", self.adamw.fused)

    def check(self) -> None:
        super().check()
        fraction("optim.momentum", self.momentum)
        if not 1 <= self.ns_steps <= MAX_NS_STEPS:
            raise ConfigError("optim.ns_steps", self.ns_steps, f"must be in 1..{MAX_NS_STEPS}")
        self.adamw.check()
