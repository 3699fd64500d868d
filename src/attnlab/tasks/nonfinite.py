"""Optimizer steps that never train on a non-finite loss or gradient (``trainer.on_nonfinite``).

The task module calls ``NonFiniteGuard.check`` once per optimizer step, after backward and gradient
clipping and before the optimizer changes the weights, with the step's loss and the gradient norm
(the one clipping by norm computes anyway; else one foreach norm over the gradients). Both are
checked with one ``isfinite`` on the device and read on the host once: a skip must be decided before
``optimizer.step`` (a host-side branch), exactly as torch's GradScaler reads its inf flag every step.
On a GPU this costs one synchronisation per step, while the backward drains: the optimizer's kernels
are launched after the backward ends instead of queued behind it (tens of microseconds for the fused
AdamW). A check deferred to the next step would cost nothing, but the weights would already hold the
non-finite update, and a checkpoint written in between would keep them.

- ``stop``: ``NonFiniteStep`` is raised before the optimizer step, so the weights, and every checkpoint
  written before, stay finite.
- ``skip``: the gradients are dropped (set to None: the optimizer leaves the weights and its state as
  they are; the schedule still advances and the step still counts), the skip is counted, and after
  ``max_skips`` skipped steps in a row ``NonFiniteStep`` is raised.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable

import torch
from torch import Tensor

log = logging.getLogger("attnlab")


class NonFiniteStep(RuntimeError):
    """Training stopped at an optimizer step whose loss or gradient norm is not finite."""


class NonFiniteWeights(RuntimeError):
    """A checkpoint would hold weights that are not finite: it is not written."""


def gradient_norm(parameters: Iterable[Tensor]) -> Tensor | None:
    """The 2-norm of all gradients together, as ``clip_grad_norm_`` computes it (None without gradients);
    of the whole gradient also where each process holds a shard of it (FSDP2's DTensors)."""
    return total_norm([p.grad for p in parameters if p.grad is not None])


def total_norm(tensors: list[Tensor], norm_type: float = 2.0) -> Tensor | None:
    """The ``norm_type``-norm of all ``tensors`` together (None for none), as a plain tensor: where they
    are DTensors, over every process's shards, mesh by mesh (tensor parallel puts the layers' weights
    on another mesh than the rest, and DTensors of two meshes do not mix), then combined."""
    by_mesh: dict[object, list[Tensor]] = {}
    for t in tensors:
        by_mesh.setdefault(getattr(t, "device_mesh", None), []).append(t)
    norms = [whole(torch.nn.utils.get_total_norm(group, norm_type)) for group in by_mesh.values()]
    if len(norms) < 2:
        return norms[0] if norms else None
    return torch.linalg.vector_norm(torch.stack(norms), norm_type)


def clip_gradients(parameters: list[Tensor], max_norm: float) -> Tensor | None:
    """Scale the gradients of ``parameters`` to a 2-norm of at most ``max_norm``, as ``clip_grad_norm_``
    does, also where they are DTensors on several meshes (tensor parallel); returns their norm before."""
    norm = gradient_norm(parameters)
    if norm is not None:
        scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)
        for p in parameters:
            if p.grad is not None:
                p.grad.mul_(scale)
    return norm


def whole(value: Tensor) -> Tensor:
    """``value`` as a plain tensor: a DTensor (a norm over FSDP2's shards, partial on each process)
    reduced over the processes that hold its parts; any other tensor as it is."""
    from torch.distributed.tensor import DTensor

    return value.full_tensor() if isinstance(value, DTensor) else value


def all_finite(values: list[Tensor]) -> bool:
    """Whether every one-element tensor of ``values`` is finite. On the CPU each is read as it is
    (a few torch calls cost tens of microseconds there, a read less than one); on an accelerator one
    ``isfinite`` over them all runs on the device, then one read: the one host sync of a step."""
    if all(v.device.type == "cpu" for v in values):
        return all(math.isfinite(v.item()) for v in values)
    stacked = torch.stack([v.detach().float().reshape(()) for v in values])
    return bool(torch.isfinite(stacked).all())


class NonFiniteGuard:
    """What to do at a step whose loss or gradient is not finite: ``stop`` or ``skip`` (at most
    ``max_skips`` in a row). ``skipped`` counts the steps skipped in the whole run (a checkpoint
    keeps it: ``state_dict``)."""

    def __init__(self, on_nonfinite: str = "stop", max_skips: int = 10) -> None:
        self.on_nonfinite = str(on_nonfinite)
        self.max_skips = max_skips
        self.skipped = 0
        self.in_a_row = 0

    def check(
        self,
        step: int,
        loss: Tensor | None,
        grad_norm: Tensor | None,
        optimizer: torch.optim.Optimizer,
        agree: Callable[[bool], bool] | None = None,
    ) -> bool:
        """Whether optimizer step ``step`` may change the weights; raises ``NonFiniteStep`` if the run
        must stop. ``None`` stands for a value not checked (no loss, or gradients a GradScaler owns).
        ``agree`` makes the decision every process's (true only if true on all), so that ranks never
        part ways; each rank's loss differs, and FSDP's gradient shards do."""
        finite = all_finite([v for v in (loss, grad_norm) if v is not None])
        if agree is not None:
            finite_here, finite = finite, agree(finite)
        if finite:
            self.in_a_row = 0
            return True
        what = (
            describe(loss, grad_norm) if agree is None or not finite_here else "non-finite on another process"
        )
        if self.on_nonfinite == "stop":
            raise NonFiniteStep(
                f"step {step}: {what} (trainer.on_nonfinite=stop): stopped before the optimizer step, "
                "so the weights and checkpoints stay finite"
            )
        optimizer.zero_grad(set_to_none=True)
        self.skipped += 1
        self.in_a_row += 1
        if self.in_a_row >= self.max_skips:
            raise NonFiniteStep(
                f"step {step}: {what}: {self.in_a_row} optimizer steps in a row skipped, the most "
                f"trainer.max_nonfinite_skips={self.max_skips} allows"
            )
        log.warning(
            "step %d: %s: optimizer step skipped (%d in a row, %d in all; trainer.on_nonfinite=skip)",
            step,
            what,
            self.in_a_row,
            self.skipped,
        )
        return False

    def state_dict(self) -> dict[str, int]:
        return {"skipped": self.skipped, "in_a_row": self.in_a_row}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.skipped, self.in_a_row = int(state["skipped"]), int(state["in_a_row"])


def describe(loss: Tensor | None, grad_norm: Tensor | None) -> str:
    """``loss=nan, gradient norm=inf``: the values checked."""
    parts = [
        f"{name}={float(v):.6g}"
        for name, v in (("loss", loss), ("gradient norm", grad_norm))
        if v is not None
    ]
    return ", ".join(parts)


def finite(tensors: list[Tensor]) -> bool:
    """Whether every element of ``tensors`` is finite: their largest magnitude, over all processes'
    shards where they are DTensors (a collective then)."""
    return math.isfinite(total_norm(tensors, math.inf))


def check_finite_weights(state_dict: dict[str, object], step: int) -> None:
    """Raise ``NonFiniteWeights`` naming the first floating-point tensor of ``state_dict`` that holds a
    NaN or an infinity: a checkpoint must never replace a good one with such weights. All are checked
    at once (their largest magnitude, a NaN wins), then one by one only to name a bad one."""
    weights = [v for v in state_dict.values() if isinstance(v, Tensor) and v.is_floating_point()]
    if not weights or finite(weights):
        return
    for name, value in state_dict.items():  # shards (DTensors): every process names the same tensor
        if isinstance(value, Tensor) and value.is_floating_point() and not finite([value]):
            raise NonFiniteWeights(
                f"step {step}: weight {name} is not finite: checkpoint not written, the last one is kept"
            )
