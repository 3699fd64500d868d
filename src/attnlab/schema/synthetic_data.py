"""The data kinds of the synthetic tasks (copy, passkey, associative recall, addition, repeated
segments): generated from the seed, each a prompt and an exact answer in ``data.seq_len`` tokens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnlab.schema.data import DATA, DataKind, GeneratedData, SequenceData
from attnlab.schema.errors import ConfigError, at_least_one


@dataclass
class SyntheticData(SequenceData, GeneratedData):
    """A synthetic task, generated per example from the seed: a prompt, then an exact answer, in at
    most ``seq_len`` + 1 characters (one token each). A causal LM's labels are the answer's tokens
    only, so its loss is the answer-token loss and ``exact_match`` scores whole answers; an
    encoder-decoder reads the prompt as source and the answer as target."""

    seq_len: int = 64
    batch_size: int = 64
    # None: every example at seq_len. A length: each training example at its own length, drawn
    # uniformly from [train_min_len, seq_len] (so copy's offset and recall's number of pairs vary
    # within training, as Kazemnejad et al. 2023 train); validation and test stay at seq_len.
    train_min_len: int | None = None
    min_seq_len: ClassVar[int] = 2  # the shortest row that holds one example of the task

    def check(self) -> None:
        super().check()
        if self.seq_len < self.min_seq_len:
            raise ConfigError(
                "data.seq_len",
                self.seq_len,
                f"is too short for data.kind={self.kind}; it needs at least {self.min_seq_len}",
            )
        if self.train_min_len is not None and not self.min_seq_len <= self.train_min_len <= self.seq_len:
            raise ConfigError(
                "data.train_min_len",
                self.train_min_len,
                f"must be from {self.min_seq_len} (the shortest row of data.kind={self.kind}) to "
                f"data.seq_len={self.seq_len}, or null (every example at data.seq_len)",
            )


@DATA.register
@dataclass
class CopyData(SyntheticData):
    """A random string of letters, '=', then the same string again (the answer)."""

    kind: DataKind = DataKind.copy
    module: ClassVar[str] = "attnlab.data.synthetic:CopyDataModule"


@DATA.register
@dataclass
class PasskeyData(SyntheticData):
    """Filler text with 'k:<digits>;' hidden at ``passkey_depth`` of it, then '?k:' asks for the digits."""

    kind: DataKind = DataKind.passkey
    module: ClassVar[str] = "attnlab.data.synthetic:PasskeyDataModule"
    passkey_digits: int = 5
    passkey_depth: float | None = (
        None  # where the key sits in the filler, 0 (start) to 1 (end); None: uniform
    )

    @property
    def min_seq_len(self) -> int:  # type: ignore[override]
        return 2 * self.passkey_digits + 5  # needle, query and answer with no filler

    def check(self) -> None:
        at_least_one("data.passkey_digits", self.passkey_digits)
        if self.passkey_depth is not None and not 0.0 <= self.passkey_depth <= 1.0:
            raise ConfigError(
                "data.passkey_depth", self.passkey_depth, "must be in [0, 1], or null (uniform)"
            )
        super().check()


@DATA.register
@dataclass
class RecallData(SyntheticData):
    """Associative recall: key-value pairs (two letters, one digit), then '?' and a key; the answer is
    its value."""

    kind: DataKind = DataKind.recall
    module: ClassVar[str] = "attnlab.data.synthetic:RecallDataModule"
    min_seq_len: ClassVar[int] = 6


@DATA.register
@dataclass
class AdditionData(SyntheticData):
    """Multi-digit addition 'a+b=' of two n-digit numbers; the answer is the sum in n + 1 digits."""

    kind: DataKind = DataKind.addition
    module: ClassVar[str] = "attnlab.data.synthetic:AdditionDataModule"
    min_seq_len: ClassVar[int] = 5


@DATA.register
@dataclass
class RepeatedSegmentsData(SyntheticData):
    """Random letters whose last stretch repeats a random segment: the answer is the repeat after its
    first token, which only a model that looks back to what followed the earlier occurrence predicts
    (an induction head, Olsson et al. 2022). The segment's length and start vary per example, so no
    fixed offset finds it."""

    kind: DataKind = DataKind.repeated_segments
    module: ClassVar[str] = "attnlab.data.synthetic:RepeatedSegmentsDataModule"
    min_seq_len: ClassVar[int] = 7  # a segment of at least 4 letters, twice
