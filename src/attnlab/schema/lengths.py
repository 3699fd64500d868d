"""The schema of ``attnlab-eval eval.lengths=[...]``: one checkpoint scored at several lengths (and
passkey depths), its RoPE stretched zero-shot to each length by the ratio to the trained one."""

from __future__ import annotations

from dataclasses import dataclass, field

from attnlab.schema.errors import ConfigError, positive
from attnlab.schema.pos import RopeScalingKind

STRETCHES = [RopeScalingKind.linear, RopeScalingKind.ntk, RopeScalingKind.yarn]


@dataclass
class LengthSweep:
    """Lengths to score a synthetic task at; empty: attnlab-eval's usual single evaluation.

    ``depths`` (passkey only) places the key at each fraction of the filler; ``rope_scalings`` are
    applied to a RoPE checkpoint on top of its plain evaluation, each with ``rope_factor`` = length /
    trained length (at least 1), so that every length is mapped back onto the trained positions.
    ``examples`` is the number of examples scored per setting (the split's first ones).
    """

    lengths: list[int] = field(default_factory=list)
    depths: list[float] = field(default_factory=list)
    rope_scalings: list[RopeScalingKind] = field(default_factory=lambda: list(STRETCHES))
    examples: int = 128

    def check(self) -> None:
        for length in self.lengths:
            positive("eval.lengths", length)
        for depth in self.depths:
            if not 0.0 <= depth <= 1.0:
                raise ConfigError("eval.depths", depth, "a depth is a fraction of the filler, from 0 to 1")
        if self.depths and not self.lengths:
            raise ConfigError("eval.depths", self.depths, "needs eval.lengths=[...] to sweep over")
        positive("eval.examples", self.examples)
