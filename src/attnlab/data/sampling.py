"""The training stream: endless, a pure function of (seed, position), sharded over ranks, resumable.

``position`` counts the samples that all ranks together have drawn. The batch at a position holds
the next G = batch_size * world_size samples; rank r takes rows [r * batch_size, (r + 1) * batch_size).
So two ranks draw, step by step, exactly what one process with the doubled batch draws, and a
resumed run continues at the saved position with the very batch the interrupted run would have drawn.
There are no epochs to restart: random LM windows need none, and a data set of samples is read in
one seeded permutation after another, a batch running on from the end of one into the next.

``ResumableLoader`` is what the data modules return for training: Lightning saves its ``state_dict()``
with every checkpoint and restores it before the first batch of a resumed fit (nothing of
Lightning's internals is read). Evaluation loaders are plain DataLoaders over each rank's shard.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np
import torch
from lightning_fabric.utilities.seed import pl_worker_init_function
from torch.utils.data import DataLoader, Dataset

Key = int | tuple[int, int]  # a dataset index, or (epoch, index) while training
# The length the training loader reports. Lightning reads no batch ahead of a loader that has a
# length (it does for one without, which would put the saved position a batch ahead), and a run
# never reaches it, so its one "epoch" lasts the whole run.
ENDLESS = 2**62
MASK64 = (1 << 64) - 1


def split_key(key: Key) -> tuple[int, int]:
    """(epoch, index) of a sample key; a plain index (evaluation) counts as epoch 0."""
    return (0, int(key)) if isinstance(key, int | np.integer) else (int(key[0]), int(key[1]))


def derive_seed(*parts: int) -> int:
    """A well-mixed 63-bit seed from non-negative integers, e.g. (seed, position)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1, dtype=np.uint64)[0] >> 1)


def torch_generator(*parts: int) -> torch.Generator:
    return torch.Generator().manual_seed(derive_seed(*parts))


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def mixed_seed(*parts: int) -> int:
    """A well-mixed 63-bit seed from non-negative integers, splitmix64 chained over them: ~1 us where
    ``derive_seed``'s SeedSequence takes ~20 us. For seeds drawn at every training step."""
    x = 0
    for part in parts:
        x = _splitmix64(x ^ (int(part) & MASK64))
    return x >> 1


def batch_generator(seed: int, position: int) -> torch.Generator:
    """The generator of one training batch, seeded by ``mixed_seed(seed, position)`` (a tenth of
    the budget for drawing a batch of LM windows would go to a SeedSequence)."""
    return torch.Generator().manual_seed(mixed_seed(seed, position))


class ShardedBatches(Dataset):
    """This rank's batch at each position of the stream (``self[position]``); subclasses draw it."""

    def __init__(self, *, seed: int, batch_size: int, rank: int, world_size: int) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} is not in [0, world_size={world_size})")
        self.seed, self.batch_size, self.rank, self.world_size = seed, batch_size, rank, world_size
        self.global_batch = batch_size * world_size
        self.rows = slice(rank * batch_size, (rank + 1) * batch_size)

    def fingerprint(self) -> dict[str, int]:
        """What the stream depends on besides the position: a resume must find the same."""
        raise NotImplementedError

    def __getitem__(self, position: int) -> dict[str, Any]:
        raise NotImplementedError


class SampleBatches(ShardedBatches):
    """Batches of a data set of samples: stream position p is sample ``order(epoch)[p % n]`` of epoch
    ``p // n``, each epoch's order a permutation seeded by (seed, epoch). Samples get the key
    (epoch, index), which seeds their own randomness (augmentation)."""

    def __init__(self, dataset: Dataset, collate: Callable[[list[Any]], Any], **shard: int) -> None:
        super().__init__(**shard)
        self.dataset, self.collate, self.size = dataset, collate, len(dataset)
        if self.size < 1:
            raise ValueError("the training split is empty")
        self._epoch, self._order = -1, []

    def fingerprint(self) -> dict[str, int]:
        return {"seed": self.seed, "samples": self.size}

    def order(self, epoch: int) -> list[int]:
        """The order of one epoch (the last one asked for is kept: batches ask in increasing epochs)."""
        if epoch != self._epoch:
            self._order = torch.randperm(self.size, generator=torch_generator(self.seed, epoch)).tolist()
            self._epoch = epoch
        return self._order

    def __getitem__(self, position: int) -> Any:
        mine = range(position + self.rows.start, position + self.rows.stop)
        keys = [(p // self.size, self.order(p // self.size)[p % self.size]) for p in mine]
        return self.collate([self.dataset[key] for key in keys])


class ResumableLoader:
    """The training batches of one rank from the saved position on, through a DataLoader (workers,
    pinned memory); ``state_dict()`` is the position after the batches handed out so far.

    With ``repeat`` (Lightning's ``overfit_batches``) every pass starts again at position 0.
    """

    def __init__(
        self, batches: ShardedBatches, *, num_workers: int = 0, pin_memory: bool = False, repeat: bool = False
    ) -> None:
        self.batches, self.num_workers, self.pin_memory, self.repeat = (
            batches,
            num_workers,
            pin_memory,
            repeat,
        )
        self.position = 0

    def __len__(self) -> int:
        return ENDLESS

    def __iter__(self) -> Iterator[Any]:
        step, start = self.batches.global_batch, 0 if self.repeat else self.position
        loader = DataLoader(
            self.batches,
            batch_size=None,  # each item is a whole batch
            sampler=itertools.count(start, step),
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            worker_init_fn=partial(pl_worker_init_function, rank=self.batches.rank),
        )
        for batch in loader:
            if not self.repeat:
                self.position += step
            yield batch

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position, **self.batches.fingerprint()}

    def load_state_dict(self, state: dict[str, int]) -> None:
        saved = {k: v for k, v in state.items() if k != "position"}
        if saved != self.batches.fingerprint():
            raise ValueError(
                f"cannot resume the training data: the checkpoint's stream was {saved}, this run's is "
                f"{self.batches.fingerprint()} (the data, data.seed or data.seq_len changed)"
            )
        self.position = int(state["position"])
