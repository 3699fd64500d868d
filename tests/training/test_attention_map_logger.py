"""The Lightning callback that logs attention heat maps during validation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger, WandbLogger
from torch.utils.data import DataLoader

from attnlab.explain.attention import select_layers
from attnlab.training.callbacks import AttentionMapLogger
from attnlab.training.callbacks.attention_maps import first_example, log_images


class TinyTask(pl.LightningModule):
    """The shape of an attnlab task module as the callback sees it: ``.model`` and dict batches."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def training_step(self, batch, batch_idx):
        logits = self.model(batch["input_ids"])
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())

    def validation_step(self, batch, batch_idx):
        self.log("val/loss", self.training_step(batch, batch_idx))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def loader() -> DataLoader:
    ids = torch.randint(1, 23, (4, 13), generator=torch.Generator().manual_seed(0))
    rows = [{"input_ids": r[:-1], "labels": r[1:]} for r in ids]
    return DataLoader(rows, batch_size=2)


def fit(
    model: torch.nn.Module, logger, every: int, epochs: int, tmp_path: Path, **kwargs
) -> AttentionMapLogger:
    callback = AttentionMapLogger(every, max_tokens=8, **kwargs)
    trainer = pl.Trainer(
        max_epochs=epochs,
        logger=logger,
        callbacks=[callback],
        default_root_dir=tmp_path,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator="cpu",
        num_sanity_val_steps=1,
    )
    trainer.fit(TinyTask(model), loader(), loader())
    return callback


def test_tensorboard_gets_heat_maps_every_n_epochs(tiny_model, tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = TensorBoardLogger(tmp_path, name="tb")
    fit(tiny_model("gpt"), logger, every=2, epochs=3, tmp_path=tmp_path)
    events = EventAccumulator(logger.log_dir, size_guidance={"images": 0})
    events.Reload()
    assert sorted(events.Tags()["images"]) == ["attention/layer_0_self", "attention/layer_1_self"]
    logged = events.Images("attention/layer_0_self")
    assert [e.step for e in logged] == [4]  # epoch 2 of 3 only, after its 4 optimizer steps (2 per epoch)
    assert logged[0].width > 100 and logged[0].height > 100


def test_without_an_image_logger_pngs_go_to_save_dir(tiny_model, tmp_path: Path) -> None:
    fit(
        tiny_model("gpt"),
        CSVLogger(tmp_path),
        every=1,
        epochs=1,
        tmp_path=tmp_path,
        layers=[-1],
        save_dir=tmp_path / "att",
    )
    assert sorted(p.name for p in (tmp_path / "att").iterdir()) == ["attention_layer_1_self_epoch0.png"]


def test_wandb_logger_gets_images(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logger = WandbLogger(save_dir=tmp_path, offline=True)
    calls = []
    monkeypatch.setattr(logger, "log_image", lambda **kw: calls.append(kw))
    image = np.zeros((20, 30, 3), dtype=np.uint8)
    assert log_images([logger], {"attention/layer_0_self": image}, step=5) == 1
    assert calls[0]["key"] == "attention/layer_0_self" and calls[0]["step"] == 5
    assert calls[0]["images"][0] is image


def test_layer_selection_per_stack_and_example_cut() -> None:
    names = [f"encoder.layers.{i}.self_attn.fn" for i in range(3)]
    names += [f"decoder.layers.{i}.{k}_attn.fn" for i in range(2) for k in ("self", "cross")]
    assert select_layers(names, [0, -1]) == [
        "encoder.layers.0.self_attn.fn",
        "encoder.layers.2.self_attn.fn",
        "decoder.layers.0.self_attn.fn",
        "decoder.layers.1.self_attn.fn",
        "decoder.layers.0.cross_attn.fn",
        "decoder.layers.1.cross_attn.fn",
    ]
    example = first_example({"input_ids": torch.ones(3, 10), "labels": torch.ones(3), "name": "x"}, 4)
    assert list(example) == ["input_ids"] and example["input_ids"].shape == (1, 4)


def test_interval_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r"task\.log_attention_every_n_epochs=0"):
        AttentionMapLogger(0)


@pytest.mark.slow  # starts wandb's service process
def test_wandb_offline_run_holds_the_heat_maps(
    tiny_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = WandbLogger(save_dir=tmp_path, offline=True, project="attnlab-test")
    try:
        fit(tiny_model("gpt"), logger, every=1, epochs=1, tmp_path=tmp_path, layers=[0])
    finally:
        wandb.finish()
    images = sorted(p.name for p in tmp_path.glob("wandb/offline-run-*/files/media/images/attention/*.png"))
    assert len(images) == 1 and images[0].startswith("layer_0_self_")
