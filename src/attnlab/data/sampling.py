"""Deterministic, resumable sample order: a pure function of (seed, epoch, position).

The training order of an epoch is a permutation seeded by (seed, epoch). ``ResumableSampler``
records how far into it training got, so a restored run continues with exactly the samples it
had not seen, and shards it over DDP ranks itself. Randomness inside a sample (an LM window's
offset, BERT's masking, augmentation) comes from a generator seeded by (seed, epoch, index):
the sampler hands the dataset ``(epoch, index)`` keys, so that works in any worker process.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import Sampler

Key = int | tuple[int, int]  # a dataset index, or (epoch, index) from a ResumableSampler


def split_key(key: Key) -> tuple[int, int]:
    """(epoch, index) of a sample key; a plain index (from any other sampler) counts as epoch 0."""
    return (0, int(key)) if isinstance(key, int | np.integer) else (int(key[0]), int(key[1]))


def derive_seed(*parts: int) -> int:
    """A well-mixed 63-bit seed from non-negative integers, e.g. (seed, epoch, index)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1, dtype=np.uint64)[0] >> 1)


def torch_generator(*parts: int) -> torch.Generator:
    return torch.Generator().manual_seed(derive_seed(*parts))


def seed_worker(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: seed Python's and NumPy's global RNGs from the worker's torch seed
    (itself derived from the loader's seeded generator), so code using them is reproducible per worker.
    """
    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    np.random.seed(seed)


class ResumableSampler(Sampler):
    """Sample keys of one epoch: a seeded permutation (or 0..n-1 when not shuffling), padded by
    wrapping around to a multiple of ``world_size`` and dealt round-robin to the ranks.

    ``state_dict()`` holds the epoch and the number of samples consumed by all ranks together;
    after ``load_state_dict`` the next iteration yields only the rest of that epoch, dealt over
    the current ranks (so a run may resume on another number of processes). ``len()`` is always
    the full per-rank epoch, as Lightning expects of a resumable loader.
    """

    def __init__(
        self,
        num_samples: int,
        *,
        seed: int,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
        with_epoch: bool = False,
    ) -> None:
        if num_samples < 1:
            raise ValueError(f"a sampler needs at least one sample, got num_samples={num_samples}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} is not in [0, world_size={world_size})")
        self.num_samples = num_samples
        self.seed = seed
        self.shuffle = shuffle
        self.rank = rank
        self.world_size = world_size
        self.with_epoch = with_epoch
        self.epoch = 0
        self.consumed = 0  # samples of this epoch handed out, summed over ranks
        self._resume_at = 0

    def __len__(self) -> int:
        return math.ceil(self.num_samples / self.world_size)

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self._resume_at = 0

    def order(self, epoch: int) -> list[int]:
        """The global order of an epoch, before sharding."""
        if not self.shuffle:
            return list(range(self.num_samples))
        return torch.randperm(self.num_samples, generator=torch_generator(self.seed, epoch)).tolist()

    def __iter__(self) -> Iterator[Key]:
        epoch, start = self.epoch, self._resume_at
        self._resume_at = 0
        rest = self.order(epoch)[start:]
        total = math.ceil(len(rest) / self.world_size) * self.world_size
        rest = (rest * math.ceil(total / max(len(rest), 1)))[:total] if rest else []
        self.consumed = start
        for index in rest[self.rank :: self.world_size]:
            self.consumed = min(self.consumed + self.world_size, self.num_samples)
            yield (epoch, index) if self.with_epoch else index

    def state_dict(self, consumed: int | None = None) -> dict[str, int]:
        """Where the order stands. ``consumed`` (all ranks) overrides the sampler's own count, which runs
        ahead of training by whatever the loader prefetched.
        """
        done = self.consumed if consumed is None else min(consumed, self.num_samples)
        epoch = self.epoch
        if done >= self.num_samples:  # a finished epoch resumes at the start of the next
            epoch, done = epoch + 1, 0
        return {"epoch": epoch, "consumed": done, "seed": self.seed, "num_samples": self.num_samples}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if (state["seed"], state["num_samples"]) != (self.seed, self.num_samples):
            raise ValueError(
                f"cannot resume the data order: the checkpoint's was seed={state['seed']} over "
                f"{state['num_samples']} samples, this run's is seed={self.seed} over {self.num_samples} "
                "(the data, data.seed or data.seq_len changed)"
            )
        self.epoch = int(state["epoch"])
        self.consumed = self._resume_at = int(state["consumed"])
