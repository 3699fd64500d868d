"""Muon on the hidden weight matrices and AdamW on every other parameter, as ONE torch optimizer.

Lightning steps, clips, schedules and checkpoints one optimizer per LightningModule (several need
manual optimisation), so ``MuonWithAdamW`` wraps ``torch.optim.Muon`` and ``torch.optim.AdamW`` into
one: its ``param_groups`` are the two optimizers' own group dicts (Muon's first), so the learning-rate
scheduler and gradient clipping reach both, and its ``state`` is the one dict both optimizers keep
their state in (keyed by parameter; the two sets are disjoint), so torch's own ``state_dict`` and
``load_state_dict`` save and restore both exactly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch
from torch import Tensor, nn

from attnlab.blocks.layers import TransformerLayer


def hidden_matrices(model: nn.Module) -> list[nn.Parameter]:
    """What Muon optimises: the weight matrices of the linear layers inside the Transformer layers
    (attention projections, cross-attention, feed-forward), in ``model.parameters()`` order.

    Everything else goes to AdamW: token, segment and position embeddings, the output head and the
    classifier and masked-LM heads (their dense layers too), norms, biases, relative-bias tables, the
    ViT patch convolution and class token. A matrix that another module holds too (a tied weight) is
    not hidden either: it goes to AdamW.
    """
    inside = {
        id(linear.weight)
        for layer in model.modules()
        if isinstance(layer, TransformerLayer)
        for linear in layer.modules()
        if isinstance(linear, nn.Linear)
    }
    holders = Counter(id(p) for module in model.modules() for p in module.parameters(recurse=False))
    return [p for p in model.parameters() if id(p) in inside and holders[id(p)] == 1 and p.requires_grad]


class MuonWithAdamW(torch.optim.Optimizer):
    """``muon`` and ``adamw`` stepped as one optimizer (see the module's docstring)."""

    def __init__(self, muon: torch.optim.Muon, adamw: torch.optim.AdamW) -> None:
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
