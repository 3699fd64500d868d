"""Head importance (Michel et al. 2019, "Are Sixteen Heads Really Better than One?").

Every head h gets a gate xi_h = 1 multiplying its output; its importance is the expected
sensitivity of the loss to the gate, ``E_x |dL/d xi_h|``, estimated over batches of a validation
set. A head whose output cannot reach the loss scores exactly 0. Scores can be normalised per
layer (L2 over the heads of each module), as the paper does before comparing heads across layers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab.explain.attention import map_label
from attnlab.explain.inputs import attention_modules, batch_loss
from attnlab.generate.common import eval_mode, model_device


@dataclass
class HeadImportance:
    """Scores (modules, heads): one row per attention module, labelled by ``names``."""

    names: list[str]
    scores: Tensor

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


@contextmanager
def head_gates(model: nn.Module) -> Iterator[dict[str, Tensor]]:
    """Give every attention module a gate of ones (requiring grad) while the block runs."""
    modules = attention_modules(model)
    device = model_device(model)
    gates = {n: torch.ones(m.n_heads, device=device, requires_grad=True) for n, m in modules.items()}
    previous = {n: m.head_gate for n, m in modules.items()}
    for n, m in modules.items():
        m.head_gate = gates[n]
    try:
        yield gates
    finally:
        for n, m in modules.items():
            m.head_gate = previous[n]


def head_importance(
    model: nn.Module,
    batches: Iterable[dict[str, Tensor]],
    *,
    loss_fn: Callable[[dict[str, Tensor]], Tensor] | None = None,
    max_batches: int | None = None,
    normalize: bool = True,
) -> HeadImportance:
    """Mean over batches of ``|dL/d gate|`` for every head; ``loss_fn(batch)`` defaults to cross-entropy.

    ``normalize`` divides each module's row by its L2 norm. Parameters get no gradients.
    """
    loss_fn = loss_fn or (lambda batch: batch_loss(model, batch))
    device = model_device(model)
    total, seen = None, 0
    with eval_mode(model), head_gates(model) as gates, torch.enable_grad():
        names = list(gates)
        if not names:
            raise ValueError(f"{type(model).__name__} has no attention modules to score")
        for batch in batches:
            if max_batches is not None and seen >= max_batches:
                break
            batch = {k: v.to(device) if isinstance(v, Tensor) else v for k, v in batch.items()}
            grads = torch.autograd.grad(loss_fn(batch), [gates[n] for n in names], allow_unused=True)
            scores = torch.stack(
                [g.abs() if g is not None else torch.zeros_like(gates[n]) for g, n in zip(grads, names)]
            )
            total = scores if total is None else total + scores
            seen += 1
    if total is None:
        raise ValueError("head_importance got no batches: give at least one validation batch")
    scores = total / seen
    if normalize:
        scores = scores / scores.norm(dim=1, keepdim=True).clamp(min=1e-20)
    return HeadImportance(names, scores.detach().cpu())
