"""What attention sees in one forward pass: built once by the model, handed down to every layer.

A stack's layers all attend under the same conditions: the queries' positions, whether a query sees
only earlier keys, which keys are padding, which packed document each token belongs to, the KV cache
of each layer and, in a decoder of an encoder-decoder, the encoder's output. ``AttentionView`` holds
them, so that a layer passes one object to its attention modules instead of a keyword per condition.
What stays the same from one forward pass to the next (the positional encoding, a sliding window, the
backend) is each attention module's own, set when it is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from attnlab.blocks.cache import AttentionCache, KVCache
from attnlab.blocks.flex import MaskMemo


@dataclass
class AttentionView:
    """The queries' absolute ``positions`` (T,) or (B, T) and what their keys are.

    ``causal``: a query sees no later key (the key rule; a window is the module's). ``padding`` (B, Tk):
    True at real self-attention keys, cached ones included. ``documents`` (B, T): packed documents' ids,
    each document attending only to itself (self-attention without a cache). ``cache``: one
    ``AttentionCache`` per layer (and per cross-attention). ``memory`` (B, S, D) and ``memory_padding``
    (B, S): the encoder's output that cross-attention reads, and its real tokens. ``masks``: the flex
    backend's block masks, built by the first layer of the pass and used by the others.
    """

    positions: Tensor
    causal: bool = False
    padding: Tensor | None = None
    documents: Tensor | None = None
    cache: KVCache | None = None
    memory: Tensor | None = None
    memory_padding: Tensor | None = None
    masks: MaskMemo = field(default_factory=dict)
    first_values: Tensor | None = None  # the first layer's values, for a value residual (blocks.hooks)

    def layer_caches(self, i: int) -> tuple[AttentionCache | None, AttentionCache | None]:
        """Layer ``i``'s self- and cross-attention caches (None where there is none)."""
        if self.cache is None:
            return None, None
        cross = self.cache.cross_attn[i] if self.cache.cross_attn else None
        return self.cache.self_attn[i], cross
