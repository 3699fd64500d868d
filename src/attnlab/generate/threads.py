"""Decoding steps on the CPU: a single query's fused attention run on one thread.

A decoding step's attention is microseconds of work, but with two threads the fused kernel opens a
parallel region between two of MKL's matrix products, and handing the threads over costs milliseconds
on a busy machine (GPT-2-small at two threads: 21 ms per call, 58% of a token's time, against tens of
microseconds alone). One thread keeps the step in MKL's hands. Only decoding has single queries, so
the decoding loops hand the model's SDPA attention modules ``OneThreadSdpa`` for their duration
(``single_query_threads``); training and scoring never pay for the check.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from attnlab.blocks.attention import MultiHeadAttention, attention_modules, swapped_backends
from attnlab.blocks.backends import Keys, Sdpa
from attnlab.blocks.flex import MaskMemo


def needs_one_thread(q: Tensor) -> bool:
    """Whether ``q`` (B, H, Tq, hd), a decoding step's single query on the CPU, should run on one thread:
    asked only in eager mode, and answered before any context manager is entered (at one thread a step
    pays nothing for it)."""
    return q.shape[2] == 1 and q.is_cpu and not torch.compiler.is_compiling() and torch.get_num_threads() > 1


@contextmanager
def one_thread() -> Iterator[None]:
    """Run the block on one CPU thread, then restore the thread count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class OneThreadSdpa(Sdpa):
    """SDPA whose single-query calls on a multi-threaded CPU run on one thread (``needs_one_thread``)."""

    def attend(
        self, attn: MultiHeadAttention, q: Tensor, k: Tensor, v: Tensor, keys: Keys, masks: MaskMemo
    ) -> Tensor:
        if not needs_one_thread(q):
            return super().attend(attn, q, k, v, keys, masks)
        with one_thread():
            return super().attend(attn, q, k, v, keys, masks)


ONE_THREAD_SDPA = OneThreadSdpa()


@contextmanager
def single_query_threads(model: nn.Module) -> Iterator[None]:
    """Within the block, the attention modules of ``model`` that run SDPA run its single-query calls on
    one CPU thread; the others (flex, a recording's explicit path) are left as they are."""
    modules = [m for m in attention_modules(model).values() if type(m.backend) is Sdpa]
    with swapped_backends(modules, ONE_THREAD_SDPA):
        yield
