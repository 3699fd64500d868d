"""A seventh positional encoding, added as a user would: this module and ``conf/pos/linear.yaml``.

``pos=linear`` adds ``slope * position`` to every dimension of the token embeddings (a toy: it tells
positions apart and has no weights). The schema class joins the ``pos`` group's union; the block's
builder is registered for that class. Nothing else in attnlab changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from attnlab.blocks.positional import POSITIONAL, PositionalEncoding
from attnlab.schema.errors import positive
from attnlab.schema.pos import POSITIONS, PosConfig


@POSITIONS.register
@dataclass
class LinearPos(PosConfig):
    """``slope * position`` added to the embeddings."""

    name: str = "linear"
    slope: float = 0.01

    def check(self, d_model: int, n_heads: int) -> None:
        positive("model.pos.slope", self.slope)


class LinearPositionalEncoding(PositionalEncoding):
    """The ``embed`` hook only: the other two (rotate, score bias) stay the identity."""

    def __init__(self, slope: float) -> None:
        super().__init__()
        self.slope = slope

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x + self.slope * positions.unsqueeze(-1).to(x.dtype)  # (T, 1) or (B, T, 1)


@POSITIONAL.builds(LinearPos)
def build(pos: LinearPos, **shape: int) -> LinearPositionalEncoding:
    return LinearPositionalEncoding(pos.slope)
