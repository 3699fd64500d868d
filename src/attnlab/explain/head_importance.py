"""Head importance (Michel et al. 2019, "Are Sixteen Heads Really Better than One?").

Every head h of every example b gets a gate xi_{b,h} = 1 multiplying its output; the head's
importance is the expected sensitivity of an example's loss to its gate, ``E_x |dL_x/d xi_h|``,
estimated over the examples of a validation set. The gates are not part of the attention block: a
forward pre-hook on each attention's ``out_proj`` scales the head slices of its input (the heads'
outputs concatenated, (B, T, H * head_dim)), so ``dL/d xi_{b,h} = sum_{t,d} x_{b,t,h,d} g_{b,t,h,d}``
with ``g`` the gradient at that input. With the loss a sum over examples of each example's own loss,
one backward pass gives every example's gate gradients exactly. A head whose output cannot reach the
loss scores exactly 0. Scores can be normalised per layer (L2 over the heads of each module), as
the paper does before comparing heads across layers. A pruned model's heads (``attnlab.compress``)
score at their indices before pruning, and the heads it removed are NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.blocks.attention import MultiHeadAttention, attention_modules
from attnlab.explain.attention import map_label
from attnlab.models.common import eval_mode, model_device, need
from attnlab.schema.data import IGNORE_INDEX


@dataclass
class HeadImportance:
    """Scores (modules, heads): one row per attention module, labelled by ``names``, a column per head
    index of the unpruned model (NaN: a head that pruning removed); ``examples`` is the number of
    examples they average over."""

    names: list[str]
    scores: Tensor
    examples: int = 0

    @property
    def labels(self) -> list[str]:
        return [map_label(n) for n in self.names]

    def table(self) -> str:
        """A plain-text table, a row per module and a column per head."""
        heads = self.scores.shape[1]
        width = max(len(label) for label in self.labels)
        lines = [" " * width + "".join(f"  head {h:<3d}" for h in range(heads))]
        for label, row in zip(self.labels, self.scores.tolist()):
            lines.append(label.ljust(width) + "".join(f"  {v:8.4f}" for v in row))
        return "\n".join(lines)


def _gate_hook(attn: MultiHeadAttention, scale: Tensor | None, gates: dict[str, Tensor], name: str):
    """A pre-hook for ``attn.out_proj``: head h's slice of the input times ``scale[h]`` (if given) and
    times a fresh gate of ones (B, H), kept in ``gates[name]``, that requires grad."""

    def hook(_out_proj: nn.Module, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        x, *rest = args
        b, t, _ = x.shape
        heads = x.view(b, t, attn.n_heads, attn.head_dim)
        gate = torch.ones(b, attn.n_heads, device=x.device, dtype=x.dtype, requires_grad=True)
        gates[name] = gate
        factor = gate if scale is None else gate * scale.to(x.dtype)
        return ((heads * factor[:, None, :, None]).reshape(b, t, -1), *rest)

    return hook


@contextmanager
def head_gates(model: nn.Module, scales: dict[str, Tensor] | None = None) -> Iterator[dict[str, Tensor]]:
    """Gate the heads of every attention module of ``model`` while the block runs.

    Yields a dict that each forward pass fills with the gates (B, H) of ones of every module that
    ran, by module name; ``torch.autograd.grad`` of a loss with respect to them gives each example's
    gate gradients. ``scales`` ({module name: (H,)}) multiplies head outputs as well, e.g. 0 to mask a
    head. The hooks are removed afterwards; the model keeps no state.
    """
    scales = scales or {}
    gates: dict[str, Tensor] = {}
    handles = [
        attn.out_proj.register_forward_pre_hook(_gate_hook(attn, scales.get(name), gates, name))
        for name, attn in attention_modules(model).items()
    ]
    try:
        yield gates
    finally:
        for handle in handles:
            handle.remove()


def example_losses(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """Each example's mean cross-entropy (B,) of the model's ``logits(batch)`` against ``batch["labels"]``
    (IGNORE_INDEX ignored): per token for per-position logits, per example for class logits."""
    need(batch, "labels")
    logits, labels = model.logits(batch), batch["labels"]
    losses = F.cross_entropy(logits.transpose(1, -1), labels, ignore_index=IGNORE_INDEX, reduction="none")
    if losses.dim() == 1:
        return losses
    counts = (labels != IGNORE_INDEX).sum(dim=1).clamp(min=1)
    return losses.sum(dim=1) / counts


def head_importance(
    model: nn.Module,
    batches: Iterable[dict[str, Tensor]],
    *,
    loss_fn: Callable[[dict[str, Tensor]], Tensor] | None = None,
    max_batches: int | None = None,
    normalize: bool = True,
) -> HeadImportance:
    """Mean over examples of ``|dL_x/d gate|`` for every head; ``loss_fn(batch)`` gives each example's
    loss (B,), by default its mean token cross-entropy (``example_losses``).

    ``normalize`` divides each module's row by its L2 norm. Parameters get no gradients.
    """
    loss_fn = loss_fn or (lambda batch: example_losses(model, batch))
    device = model_device(model)
    modules = attention_modules(model)
    if not modules:
        raise ValueError(f"{type(model).__name__} has no attention modules to score")
    totals = {name: torch.zeros(m.n_heads, dtype=torch.float64) for name, m in modules.items()}
    examples = seen = 0
    with eval_mode(model), head_gates(model) as gates, torch.enable_grad():
        for batch in batches:
            if max_batches is not None and seen >= max_batches:
                break
            batch = {k: v.to(device) if isinstance(v, Tensor) else v for k, v in batch.items()}
            gates.clear()
            losses = loss_fn(batch)
            if losses.dim() != 1:
                raise ValueError(
                    f"loss_fn must give one loss per example (B,), got shape {tuple(losses.shape)}"
                )
            ran = [name for name in modules if name in gates]
            grads = torch.autograd.grad(losses.sum(), [gates[n] for n in ran], allow_unused=True)
            for name, grad in zip(ran, grads):
                if grad is not None:  # None: no head of the module reaches the loss
                    totals[name] += grad.detach().abs().sum(dim=0).double().cpu()
            examples += losses.shape[0]
            seen += 1
    if seen == 0:
        raise ValueError("head_importance got no batches: give at least one validation batch")
    columns = max(m.total_heads for m in modules.values())
    scores = torch.full((len(modules), columns), float("nan"))
    for row, (name, attn) in zip(scores, modules.items()):
        mean = (totals[name] / examples).float()
        row[list(attn.head_ids)] = mean / mean.norm().clamp(min=1e-20) if normalize else mean
    return HeadImportance(list(modules), scores, examples)
