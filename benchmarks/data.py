"""Drawing one training batch of language-model windows: the vectorised draw against the per-window path.

Ours is ``attnlab.data.text.WindowBatches``: the batch's 64 offsets drawn at once, the windows gathered
in one ``index_select`` from the view of all windows. The reference is what attnlab did before (and
what a map-style Dataset + DataLoader does): 64 ``__getitem__`` calls, each slicing one window at its
offset (drawn the same way), then ``default_collate``. Both read the Tiny Shakespeare token stream (a random
stream of its size when the file is absent), with windows of 257 tokens (seq_len 256 + the shifted
label); the two take turns, one call each per round.
"""

from __future__ import annotations

import statistics

import torch
from torch.utils.data import default_collate

from attnlab.data.sampling import batch_generator
from attnlab.data.text import WindowBatches, causal_lm_sample
from benchmarks.common import ROOT, Row, Settings, interleaved, speedup

SECTION = "data"
TARGET = 0.2  # ms per batch of 64 windows of 257 tokens, at most
CORPUS = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
BATCH, SPAN = 64, 257


def token_stream() -> tuple[torch.Tensor, str]:
    """Tiny Shakespeare's characters as int32 ids, or a random stream of the same length."""
    if CORPUS.is_file():
        text = CORPUS.read_text(encoding="utf-8")
        index = {c: i for i, c in enumerate(sorted(set(text)))}
        return torch.tensor([index[c] for c in text], dtype=torch.int32), "Tiny Shakespeare, char"
    return torch.randint(65, (1_115_394,), dtype=torch.int32), "random stream of 1.1 M tokens"


def per_window_batch(tokens: torch.Tensor, seed: int, position: int) -> dict[str, torch.Tensor]:
    """The reference: the same offsets, but one slice and one sample per window, then default_collate."""
    starts = len(tokens) - SPAN + 1
    offsets = torch.randint(starts, (BATCH,), generator=batch_generator(seed, position)).tolist()
    return default_collate([causal_lm_sample(tokens[o : o + SPAN].long()) for o in offsets])


def run(settings: Settings) -> list[Row]:
    tokens, corpus = token_stream()
    batches = WindowBatches(tokens, SPAN, None, seed=0, batch_size=BATCH, rank=0, world_size=1)
    position = iter(range(0, 10**9, BATCH))
    times = interleaved(
        {
            "ours": lambda: batches[next(position)],
            "per window": lambda: per_window_batch(tokens, 0, next(position)),
        },
        repeats=settings.pick(400, 100, 5),
        warmup=settings.pick(20, 5, 1),
    )
    ms = [t * 1e3 for t in times["ours"]]
    low, median, high = speedup(times, "ours", "per window")
    reference_ms = statistics.median(times["per window"]) * 1e3
    config = f"{BATCH} windows of {SPAN} tokens, {corpus}"
    return [
        Row(
            SECTION,
            "ms to draw one training batch (vectorised windows)",
            config,
            statistics.median(ms),
            min(ms),
            max(ms),
            "ms",
            f"per-window path {reference_ms:.3f} ms: {median:.1f}× faster ({low:.1f}–{high:.1f}×)",
            TARGET,
            f"≤ {TARGET:g} ms",
            higher_is_better=False,
        )
    ]
