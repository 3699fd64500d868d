"""Muon on the hidden weight matrices and AdamW on every other parameter, as ONE torch optimizer.

Lightning steps, clips, schedules and checkpoints one optimizer per LightningModule (several need
manual optimisation), so ``MuonWithAdamW`` wraps ``torch.optim.Muon`` and ``torch.optim.AdamW`` into
one: its ``param_groups`` are the two optimizers' own group dicts (Muon's first), so the learning-rate
scheduler and gradient clipping reach both, and its ``state`` is the one dict both optimizers keep
their state in (keyed by parameter; the two sets are disjoint), so torch's own ``state_dict`` and
``load_state_dict`` save and restore both exactly.

``Muon`` is ``torch.optim.Muon`` with its Newton-Schulz orthogonalisation in a dtype of one's choice:
torch's casts to bfloat16; a CPU run keeps float32's precision (on this project's CPU the two cost
about the same: a baby GPT's Muon step 1.47x AdamW's in float32, 1.34x in bfloat16,
``experiments/muon/results/step_time.json``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from attnlab.blocks.roles import ParamRole, params_with_role


def hidden_matrices(model: nn.Module) -> list[nn.Parameter]:
    """What Muon optimises: the trainable parameters of role ``hidden_matrix`` (``blocks.roles``), in
    ``model.parameters()`` order: the projections inside the Transformer layers (attention,
    cross-attention, feed-forward) and the dense layers of the heads (BERT's masked-LM transform, the
    classifier's pooler).

    Everything else goes to AdamW: token, segment and position embeddings, the output head and the
    classifier (readouts), norms, biases, relative-bias tables, the ViT patch convolution and class
    token. A tied output matrix is the token table (an embedding): AdamW's too.
    """
    return [p for p in params_with_role(model, ParamRole.hidden_matrix) if p.requires_grad]


def newton_schulz(
    update: Tensor, coefficients: tuple[float, float, float], steps: int, eps: float, dtype: torch.dtype
) -> Tensor:
    """The orthogonalised ``update`` (about U V^T of its SVD U S V^T): ``steps`` quintic Newton-Schulz
    iterations computed in ``dtype``, a new tensor of that dtype.

    Torch's ``_zeropower_via_newtonschulz`` (torch/optim/_muon.py, Keller Jordan's Muon) with its
    cast to bfloat16 replaced by one to ``dtype``: the same operations in the same order, so in
    bfloat16 the result is torch's bit for bit (a test compares the two). A copy, because torch's
    takes no dtype and ``Muon.step`` calls it from inside its private single-tensor loop: there is
    no public seam to subclass.
    """
    a, b, c = coefficients
    ortho = update.to(dtype, copy=True)  # a copy: without nesterov, ``update`` is the momentum buffer
    wide = update.size(0) > update.size(1)
    if wide:
        ortho = ortho.T
    ortho.div_(ortho.norm().clamp(min=eps))  # spectral norm at most 1
    for _ in range(steps):
        gram = ortho @ ortho.T
        gram_update = torch.addmm(gram, gram, gram, beta=b, alpha=c)
        ortho = torch.addmm(ortho, gram_update, ortho, beta=a)
    return ortho.T if wide else ortho


def adjusted_lr(lr: float, adjust_lr_fn: str | None, shape: torch.Size) -> float:
    """Muon's learning rate for an A x B matrix, as torch.optim.Muon scales it (``AdjustLR``)."""
    rows, cols = shape[:2]
    if adjust_lr_fn == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(rows, cols))
    return lr * math.sqrt(max(1, rows / cols))  # "original" (torch's default, also for None)


class Muon(torch.optim.Muon):
    """``torch.optim.Muon`` orthogonalising in ``ns_dtype`` (``None``: per parameter, bfloat16 on CUDA
    as torch does, float32 elsewhere). Its groups and state are torch's (``momentum_buffer`` per
    matrix), so checkpoints of either load into the other; ``ns_dtype`` is a setting, not state."""

    def __init__(self, params: list[nn.Parameter], ns_dtype: torch.dtype | None = None, **settings) -> None:
        super().__init__(params, **settings)
        self.ns_dtype = ns_dtype

    def dtype_for(self, grad: Tensor) -> torch.dtype:
        """The dtype Newton-Schulz runs in for a gradient on ``grad.device``."""
        if self.ns_dtype is not None:
            return self.ns_dtype
        return torch.bfloat16 if grad.device.type == "cuda" else torch.float32

    def with_gradients(self, group: dict) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
        """The parameters of ``group`` that have a gradient, their gradients and momentum buffers (made
        as zeros on first use, as torch.optim.Muon makes them: its ``momentum_buffer`` state)."""
        params = [p for p in group["params"] if p.grad is not None]
        for param in params:
            if param.is_complex() or param.grad.is_sparse:
                raise RuntimeError("Muon takes neither complex parameters nor sparse gradients")
            if "momentum_buffer" not in self.state[param]:
                self.state[param]["momentum_buffer"] = torch.zeros_like(param.grad)
        return params, [p.grad for p in params], [self.state[p]["momentum_buffer"] for p in params]

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:
        """torch.optim.Muon's step (its single-tensor path): Nesterov momentum, orthogonalisation,
        decoupled weight decay, the update at the shape-adjusted learning rate."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads, buffers = self.with_gradients(group)
            lr, momentum = float(group["lr"]), group["momentum"]
            for param, grad, buffer in zip(params, grads, buffers):
                buffer.lerp_(grad, 1 - momentum)
                update = grad.lerp(buffer, momentum) if group["nesterov"] else buffer
                update = newton_schulz(
                    update, group["ns_coefficients"], group["ns_steps"], group["eps"], self.dtype_for(grad)
                )
                param.mul_(1 - lr * group["weight_decay"])
                param.add_(update, alpha=-adjusted_lr(lr, group["adjust_lr_fn"], param.shape))
        return loss


class MuonWithAdamW(torch.optim.Optimizer):
    """``muon`` and ``adamw`` stepped as one optimizer (see the module's docstring)."""

    def __init__(self, muon: Muon, adamw: torch.optim.AdamW) -> None:
        self.muon, self.adamw = muon, adamw
        super().__init__([*muon.param_groups, *adamw.param_groups], defaults={})
        self._share()

    def _share(self) -> None:
        """Point both optimizers at this one's group dicts and state (after ``__init__`` and a load,
        which replaces both)."""
        n = len(self.muon.param_groups)
        self.muon.param_groups, self.adamw.param_groups = self.param_groups[:n], self.param_groups[n:]
        self.muon.state = self.adamw.state = self.state

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:
        """Evaluate ``closure`` (forward and backward) once, then step Muon and AdamW."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.muon.step()
        self.adamw.step()
        return loss

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._share()
