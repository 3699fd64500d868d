"""The Lightning DataModule every data kind builds on: loaders, DDP sharding, exact resume.

A subclass implements ``build()`` (the three datasets, and the tokenizer or number of classes)
and ``collate_fn()`` (samples -> a batch of the data<->task contract). Ranks are sharded by
``ResumableSampler``, so the Trainer must be built with ``use_distributed_sampler=False``.
The sampler position is saved with the checkpoint through ``state_dict()`` (Lightning calls it
on the data module), so ``ckpt_path=`` resumes with the very next batch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from attnlab.data.sampling import ResumableSampler, seed_worker
from attnlab.data.sources import load_hf
from attnlab.data.tokenizers import Tokenizer
from attnlab.schema.data import DataConfig
from attnlab.schema.model import ModelConfig
from attnlab.schema.rundir import LABELS_FILE


class AttnlabDataModule(pl.LightningDataModule):
    """After ``setup()``: ``tokenizer`` (None for images), ``vocab_size``, ``num_classes`` (0 if n/a),
    ``pad_id``, ``label_names`` (None unless labels were strings) and the ``datasets`` per split.
    """

    def __init__(self, cfg: DataConfig, *, seed: int, model_cfg: ModelConfig, task: str) -> None:
        super().__init__()
        self.cfg = cfg
        self.seed = cfg.seed if cfg.seed is not None else seed
        self.model_cfg = model_cfg
        self.task = task
        self.tokenizer: Tokenizer | None = None
        self.num_classes = 0
        self.label_names: list[str] | None = None
        self.datasets: dict[str, Dataset] = {}
        self._train_sampler: ResumableSampler | None = None
        self._sampler_state: dict[str, int] | None = None

    # -- what subclasses provide -----------------------------------------------------------

    def build(self) -> dict[str, Dataset]:
        """The train/val/test datasets; sets ``tokenizer`` or ``num_classes`` on the way."""
        raise NotImplementedError

    def collate_fn(self) -> Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]]:
        """Samples -> batch; a module-level function (or a partial of one), so worker processes can pickle it."""
        return default_collate

    # -- setup -----------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size if self.tokenizer is not None else 0

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_id if self.tokenizer is not None else 0

    def prepare_data(self) -> None:
        """Download a Hugging Face dataset into its cache once (Lightning calls this on one process)."""
        if self.cfg.hf_name:
            load_hf(self.cfg)

    def setup(self, stage: str | None = None) -> None:
        """Build the datasets once (later calls, e.g. from the Trainer, are no-ops).

        With ``data.test_fraction=0`` and no test split in the source, the validation split doubles as test.
        """
        if self.datasets:
            return
        datasets = self.build()
        if self.cfg.test_fraction == 0 and len(datasets.get("test", ())) == 0:
            datasets["test"] = datasets["val"]  # no test data asked for: test on the validation split
        for split, dataset in datasets.items():
            if len(dataset) == 0:
                raise ValueError(
                    f"the {split} split of data.kind={self.cfg.kind!r} is empty; "
                    "check data.val_fraction / data.test_fraction or the split files"
                )
        self.check_model()
        self.datasets = datasets

    def check_model(self) -> None:
        """The tokenizer and the labels must fit a model whose sizes are already fixed (e.g. a checkpoint)."""
        model = self.model_cfg
        if (
            self.tokenizer is not None
            and model.vocab_size > 0
            and model.vocab_size != self.tokenizer.vocab_size
        ):
            raise ValueError(
                f"the tokenizer (data.tokenizer={self.cfg.tokenizer!r}) has {self.tokenizer.vocab_size} tokens but "
                f"model.vocab_size={model.vocab_size}; use the tokenizer the model was trained with, or 0 to size "
                "the model from the data"
            )
        if self.num_classes and model.num_classes > 0 and self.num_classes > model.num_classes:
            raise ValueError(
                f"the data has {self.num_classes} classes (data.label_column={self.cfg.label_column!r}) but the "
                f"model's head has model.num_classes={model.num_classes}"
            )
        if self.num_classes and model.num_classes > self.num_classes:
            self.num_classes = model.num_classes  # integer labels that leave the top classes unused

    # -- loaders ---------------------------------------------------------------------------

    def _ranks(self) -> tuple[int, int]:
        trainer = self.trainer
        if trainer is not None:
            return trainer.global_rank, trainer.world_size
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        return 0, 1

    def _loader(self, split: str, sampler: ResumableSampler) -> DataLoader:
        rank = sampler.rank
        return DataLoader(
            self.datasets[split],
            batch_size=self.cfg.batch_size,
            sampler=sampler,
            num_workers=self.cfg.num_workers,
            pin_memory=self.cfg.pin_memory,
            persistent_workers=self.cfg.num_workers > 0,
            worker_init_fn=seed_worker,
            generator=torch.Generator().manual_seed(self.seed + 1000 * rank),
            collate_fn=self.collate_fn(),
        )

    def train_dataloader(self) -> DataLoader:
        rank, world_size = self._ranks()
        trainer = self.trainer
        if (
            world_size > 1
            and trainer is not None
            and getattr(trainer._accelerator_connector, "use_distributed_sampler", False)
        ):
            raise ValueError(
                "attnlab's data modules shard the data over ranks themselves: "
                "build the Trainer with use_distributed_sampler=False"
            )
        sampler = ResumableSampler(
            len(self.datasets["train"]), seed=self.seed, rank=rank, world_size=world_size, with_epoch=True
        )
        if self._sampler_state is not None:
            sampler.load_state_dict(self._sampler_state)
            self._sampler_state = None
        self._train_sampler = sampler
        return self._loader("train", sampler)

    def _eval_loader(self, split: str) -> DataLoader:
        rank, world_size = self._ranks()
        sampler = ResumableSampler(
            len(self.datasets[split]), seed=self.seed, shuffle=False, rank=rank, world_size=world_size
        )
        return self._loader(split, sampler)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")

    # -- resume ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The training order's position: taken from the Trainer's count of finished batches (the
        sampler's own count runs ahead by what the loader prefetched).
        """
        sampler = self._train_sampler
        if sampler is None:
            return {}
        trainer = self.trainer
        consumed = None
        if trainer is not None:
            batches = trainer.fit_loop.epoch_loop.batch_progress.current.processed
            consumed = batches * self.cfg.batch_size * sampler.world_size
        return {"sampler": sampler.state_dict(consumed)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the position; the next ``train_dataloader()`` continues from it."""
        if "sampler" not in state:
            return
        if self._train_sampler is not None:
            self._train_sampler.load_state_dict(state["sampler"])
        else:
            self._sampler_state = dict(state["sampler"])

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
