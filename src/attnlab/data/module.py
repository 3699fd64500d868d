"""The Lightning DataModule every data kind builds on: the endless training stream, evaluation shards.

A subclass implements ``build()`` (the three datasets, and the tokenizer or number of classes) and
``collate_fn()`` (samples -> a batch of the data<->task contract); one whose training batches are
drawn whole (LM windows) also overrides ``train_batches``. Ranks are sharded here, so the Trainer
must be built with ``use_distributed_sampler=False`` (Lightning would otherwise shard the evaluation
shards again). The training loader's position travels in every checkpoint (``sampling.py``). Where
every forward is a collective (FSDP), the evaluation shards end in padding batches that give every
rank as many batches (``PaddedBatches``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, Subset, default_collate

from attnlab.data.sampling import ResumableLoader, SampleBatches, ShardedBatches
from attnlab.data.sources import load_hf
from attnlab.data.tokenizers import Tokenizer
from attnlab.models.parallel import gathers_weights
from attnlab.schema.data import PADDING_BATCH, CarvedData, DataConfig, DataNeeds, SourcedData
from attnlab.schema.errors import ConfigError
from attnlab.schema.model import ModelConfig
from attnlab.schema.rundir import LABELS_FILE


class AttnlabDataModule(pl.LightningDataModule):
    """After ``setup()``: ``tokenizer`` (None for images), ``vocab_size``, ``num_classes`` (0 if n/a),
    ``pad_id``, ``label_names`` (None unless labels were strings) and the ``datasets`` per split.
    """

    def __init__(self, cfg: DataConfig, *, seed: int, model_cfg: ModelConfig, needs: DataNeeds) -> None:
        super().__init__()
        self.cfg = cfg
        self.seed = cfg.seed if cfg.seed is not None else seed
        self.model_cfg = model_cfg
        self.needs = needs  # what the task's batches carry: special tokens, masking, labels
        self.tokenizer: Tokenizer | None = None
        self.num_classes = 0
        self.label_names: list[str] | None = None
        self.datasets: dict[str, Dataset] = {}

    # -- what subclasses provide -----------------------------------------------------------

    def build(self) -> dict[str, Dataset]:
        """The train/val/test datasets; sets ``tokenizer`` or ``num_classes`` on the way."""
        raise NotImplementedError

    def collate_fn(self) -> Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]]:
        """Samples -> batch; a module-level function (or a partial of one), so worker processes can pickle it."""
        return default_collate

    def eval_collate_fn(self) -> Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]]:
        """Samples -> an evaluation batch: ``collate_fn()``'s, unless a kind adds what only evaluation reads."""
        return self.collate_fn()

    def train_batches(self, **shard: int) -> ShardedBatches:
        """This rank's training batch at each stream position (``shard``: seed, batch_size, rank, world_size)."""
        return SampleBatches(self.datasets["train"], self.collate_fn(), **shard)

    # -- setup -----------------------------------------------------------------------------

    @property
    def special_roles(self) -> tuple[str, ...]:
        """The special tokens the task puts into batches (``DataNeeds.specials``)."""
        return self.needs.specials

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size if self.tokenizer is not None else 0

    @property
    def pad_id(self) -> int:
        """The padding id of batches; 0 where nothing is padded (windows, images)."""
        pad = self.tokenizer.pad_id if self.tokenizer is not None else None
        return pad if pad is not None else 0

    def prepare_data(self) -> None:
        """Download a Hugging Face dataset into its cache once (Lightning calls this on one process)."""
        if isinstance(self.cfg, SourcedData) and self.cfg.hf_name:
            load_hf(self.cfg)

    def setup(self, stage: str | None = None) -> None:
        """Build the datasets once (later calls, e.g. from the Trainer, are no-ops).

        With ``data.test_fraction=0`` and no test split in the source, the validation split doubles as test.
        """
        if self.datasets:
            return
        datasets = self.build()
        asked_for_none = isinstance(self.cfg, CarvedData) and self.cfg.test_fraction == 0
        if asked_for_none and len(datasets.get("test", ())) == 0:
            datasets["test"] = datasets["val"]  # no test data asked for: test on the validation split
        for split, dataset in datasets.items():
            if len(dataset) == 0:
                key = "data.val_fraction" if split == "val" else "data.test_fraction"
                raise ValueError(
                    f"the {split} split of data.kind={self.cfg.kind!r} is empty; raise {key} or give "
                    f"the source a {split} split"
                )
        self.check_model()
        self.datasets = datasets

    def tokenizer_label(self) -> str:
        """`` (data.tokenizer=...)`` where the data kind names its tokenizer; generated kinds build their own."""
        name = getattr(self.cfg, "tokenizer", None)
        return f" (data.tokenizer={name!r})" if name is not None else ""

    def check_model(self) -> None:
        """The tokenizer and the labels must fit a model whose sizes are already fixed (e.g. a checkpoint)."""
        model = self.model_cfg
        if (
            self.tokenizer is not None
            and model.vocab_size > 0
            and model.vocab_size != self.tokenizer.vocab_size
        ):
            raise ConfigError(
                "model.vocab_size",
                model.vocab_size,
                f"the tokenizer{self.tokenizer_label()} has {self.tokenizer.vocab_size} tokens; "
                "set 0 to size the model from the data, or use the tokenizer the model was trained with",
            )
        if self.num_classes and model.num_classes > 0 and self.num_classes > model.num_classes:
            raise ConfigError(
                "model.num_classes",
                model.num_classes,
                f"the data has {self.num_classes} classes{self.label_source()}; set at least "
                f"{self.num_classes}, or 0 to size the head from the data",
            )
        if self.num_classes and model.num_classes > self.num_classes:
            self.num_classes = model.num_classes  # integer labels that leave the top classes unused

    def label_source(self) -> str:
        """Where the labels come from, for messages: the label column of kinds that read one, else the kind."""
        column = getattr(self.cfg, "label_column", None)
        return f" (data.label_column={column!r})" if column else f" (data.kind={self.cfg.kind})"

    # -- loaders ---------------------------------------------------------------------------

    def _ranks(self) -> tuple[int, int]:
        trainer = self.trainer
        if trainer is not None:  # the data-parallel rank: tensor-parallel processes read the same batch
            ranks = trainer.distributed_sampler_kwargs
            return (ranks["rank"], ranks["num_replicas"]) if ranks else (0, 1)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        return 0, 1

    @property
    def pin_memory(self) -> bool:
        """``data.pin_memory``; unset, pinned exactly when the Trainer runs on CUDA (Lightning then copies
        batches to the GPU with ``non_blocking=True``)."""
        if self.cfg.pin_memory is not None:
            return self.cfg.pin_memory
        trainer = self.trainer
        return trainer is not None and trainer.strategy.root_device.type == "cuda"

    def train_dataloader(self) -> ResumableLoader:
        rank, world_size = self._ranks()
        batches = self.train_batches(
            seed=self.seed, batch_size=self.cfg.batch_size, rank=rank, world_size=world_size
        )
        repeat = self.trainer is not None and self.trainer.overfit_batches > 0
        return ResumableLoader(
            batches, num_workers=self.cfg.num_workers, pin_memory=self.pin_memory, repeat=repeat
        )

    def _eval_loader(self, split: str) -> DataLoader | PaddedBatches:
        """Every sample of the split exactly once over all ranks: rank r reads samples r, r + W, ...
        (shards differ by at most one sample; nothing is repeated to even them out). Where every
        forward is a collective (``gathers_weights``: FSDP), a rank whose shard makes a batch fewer than
        rank 0's (the largest) ends with a padding batch, so that every rank runs as many forwards."""
        rank, world_size = self._ranks()
        dataset = self.datasets[split]
        loader = DataLoader(
            Subset(dataset, range(rank, len(dataset), world_size)),
            batch_size=self.cfg.batch_size,
            num_workers=self.cfg.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.cfg.num_workers > 0,
            collate_fn=self.eval_collate_fn(),
        )
        module = self.trainer.lightning_module if self.trainer is not None else None
        if module is None or not gathers_weights(module):
            return loader
        most = math.ceil(math.ceil(len(dataset) / world_size) / self.cfg.batch_size)  # rank 0's count
        return PaddedBatches(loader, most - len(loader), self.padding_batch(split))

    def padding_batch(self, split: str) -> dict[str, torch.Tensor]:
        """The split's first sample as a batch of one, marked ``PADDING_BATCH``: the task runs its
        forward and scores it in no metric."""
        batch = self.eval_collate_fn()([self.datasets[split][0]])
        batch[PADDING_BATCH] = torch.ones(1, dtype=torch.bool)
        return batch

    def val_dataloader(self) -> DataLoader | PaddedBatches:
        return self._eval_loader("val")

    def test_dataloader(self) -> DataLoader | PaddedBatches:
        return self._eval_loader("test")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Checkpoints keep the data position in the training loader's state; one that kept it here was
        written by an attnlab whose data order differs, so it cannot be resumed exactly."""
        if "sampler" in state:
            raise ValueError(
                "the checkpoint was written by an earlier attnlab whose training data order differs from "
                "this version's, so the run cannot be resumed exactly; evaluate or sample from it, or "
                "train a new run"
            )

    # -- files -----------------------------------------------------------------------------

    def save_tokenizer(self, run_dir: str | Path) -> list[Path]:
        """Write the tokenizer (tokenizer.json) and string-label names (labels.json) into ``run_dir``."""
        run_dir = Path(run_dir)
        written = []
        if self.tokenizer is not None:
            written.append(self.tokenizer.save(run_dir))
        if self.label_names is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
            path = run_dir / LABELS_FILE
            path.write_text(json.dumps(self.label_names, ensure_ascii=False, indent=1), encoding="utf-8")
            written.append(path)
        return written


class PaddedBatches:
    """A loader's batches, then ``extra`` copies of ``padding`` (a batch marked ``PADDING_BATCH``): the
    evaluation shard of a rank with fewer batches than another, where every forward is a collective."""

    def __init__(self, loader: DataLoader, extra: int, padding: dict[str, torch.Tensor]) -> None:
        self.loader, self.extra, self.padding = loader, extra, padding

    def __len__(self) -> int:
        return len(self.loader) + self.extra

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        yield from self.loader
        for _ in range(self.extra):
            yield dict(self.padding)
