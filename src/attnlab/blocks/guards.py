"""Checks of a forward pass's integer inputs that neither break a compiled graph nor stall a GPU.

A token id or position outside its table would fail deep inside ``F.embedding`` (an index error on
the CPU, a device-side assert on a GPU). Reading the largest id with ``int(t)`` to name it would
be a host sync on a GPU and a graph break under ``torch.compile``, so it is done only where it is
free: eager mode on the CPU, where the values already are in host memory. Elsewhere the check is
``torch._assert_async``, which runs on the device inside the graph and does not wait for it.
"""

from __future__ import annotations

import torch
from torch import Tensor


def check_index(values: Tensor, size: int, what: str, problem: str) -> None:
    """Every entry of the integer tensor ``values`` must lie in ``0 .. size-1``.

    Eager on the CPU a bad entry raises ``ValueError("{what} {value} {problem}")``; compiled or on an
    accelerator, a bad entry fails ``torch._assert_async`` with ``"{what} {problem}"``.
    """
    if values.numel() == 0:
        return
    if values.is_cpu and not torch.compiler.is_compiling():
        if values.numel() == 1:  # a decoding step's one token: one read instead of a reduction and two
            low = high = int(values)
        else:
            low, high = (int(end) for end in torch.aminmax(values))
        if low < 0 or high >= size:
            raise ValueError(f"{what} {low if low < 0 else high} {problem}")
        return
    torch._assert_async(((values >= 0) & (values < size)).all(), f"{what} {problem}")
