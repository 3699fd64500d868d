"""Resumable, DDP-aware sample order, and exact resume through a real Lightning Trainer."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from torch import nn

from attnlab.data.sampling import ResumableSampler, derive_seed, split_key


def test_order_is_a_pure_function_of_seed_and_epoch():
    a, b = ResumableSampler(50, seed=3), ResumableSampler(50, seed=3)
    assert list(a) == list(b)
    assert sorted(a) == list(range(50))
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first and sorted(a) == list(range(50))
    assert list(ResumableSampler(50, seed=4)) != first
    assert list(ResumableSampler(5, seed=3, shuffle=False)) == [0, 1, 2, 3, 4]


def test_keys_carry_the_epoch():
    s = ResumableSampler(4, seed=0, with_epoch=True)
    s.set_epoch(7)
    assert {split_key(k)[0] for k in s} == {7}
    assert sorted(split_key(k)[1] for k in s) == [0, 1, 2, 3]
    assert split_key(5) == (0, 5)
    assert derive_seed(1, 2, 3) == derive_seed(1, 2, 3) != derive_seed(1, 3, 2)


def test_ranks_partition_the_epoch():
    shards = [list(ResumableSampler(10, seed=1, rank=r, world_size=3)) for r in range(3)]
    assert [len(s) for s in shards] == [4, 4, 4]
    assert len(ResumableSampler(10, seed=1, rank=0, world_size=3)) == 4
    covered = sorted(i for s in shards for i in s)
    assert set(covered) == set(range(10)) and len(covered) == 12  # two padded by wrapping around


def test_resume_yields_exactly_the_rest_of_the_epoch():
    full = ResumableSampler(20, seed=5)
    full.set_epoch(2)
    order = list(full)
    resumed = ResumableSampler(20, seed=5)
    resumed.load_state_dict({"epoch": 2, "consumed": 8, "seed": 5, "num_samples": 20})
    resumed.set_epoch(2)  # Lightning sets the same epoch again: the position must survive
    assert list(resumed) == order[8:]
    assert list(resumed) == order  # later iterations start the epoch from the beginning
    assert len(resumed) == 20


def test_resume_on_another_number_of_ranks_covers_the_rest_once():
    order = ResumableSampler(24, seed=9).order(0)
    state = {"epoch": 0, "consumed": 6, "seed": 9, "num_samples": 24}  # 2 ranks x 3 samples
    rest = []
    for rank in range(3):
        s = ResumableSampler(24, seed=9, rank=rank, world_size=3)
        s.load_state_dict(state)
        rest += list(s)
    assert sorted(rest) == sorted(order[6:])


def test_state_of_a_finished_epoch_points_at_the_next():
    s = ResumableSampler(6, seed=0)
    s.set_epoch(3)
    list(s)
    assert s.state_dict() == {"epoch": 4, "consumed": 0, "seed": 0, "num_samples": 6}
    assert s.state_dict(consumed=2) == {"epoch": 3, "consumed": 2, "seed": 0, "num_samples": 6}


def test_resuming_other_data_is_an_error():
    s = ResumableSampler(6, seed=0)
    with pytest.raises(
        ValueError, match=r"cannot resume the data order: the checkpoint's was seed=1 over 6 samples"
    ):
        s.load_state_dict({"epoch": 0, "consumed": 2, "seed": 1, "num_samples": 6})


class Recorder(pl.LightningModule):
    """Trains a linear layer and records the first input ids of every training batch."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Embedding(128, 1)
        self.seen: list[list[int]] = []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch["input_ids"][:, 0].tolist())
        return self.layer(batch["input_ids"]).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(dm, root, max_steps, ckpt_path=None, every=None):
    callbacks = (
        [pl.callbacks.ModelCheckpoint(dirpath=root, every_n_train_steps=every, save_top_k=-1)]
        if every
        else []
    )
    trainer = pl.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        use_distributed_sampler=False,
        limit_val_batches=0,
        enable_checkpointing=bool(every),
        default_root_dir=root,
    )
    model = Recorder()
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return model.seen


@pytest.mark.parametrize("workers", [0, 1])
def test_lightning_resume_continues_with_the_very_next_batch(make_dm, tmp_path, workers):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(chr(97 + (i * 7) % 26) for i in range(3000)))
    fields = {"path": str(corpus), "seq_len": 16, "batch_size": 8, "num_workers": workers}
    # 3000 chars -> ~170 windows -> 22 batches per epoch: 30 steps cross an epoch boundary
    reference = fit(make_dm("text", **fields), tmp_path / "a", max_steps=30)
    first = fit(make_dm("text", **fields), tmp_path / "b", max_steps=13, every=13)
    assert first == reference[:13]
    resumed = fit(
        make_dm("text", **fields),
        tmp_path / "c",
        max_steps=30,
        ckpt_path=str(tmp_path / "b" / "epoch=0-step=13.ckpt"),
    )
    assert resumed == reference[13:]


@pytest.mark.parametrize(
    ("kind", "fields"),
    [
        ("text", {"task": "mlm", "seq_len": 32}),
        ("listops", {"num_train": 20, "num_val": 5, "num_test": 5}),
        ("reverse", {"num_train": 20, "num_val": 5, "num_test": 5}),
        ("digits", {"model": {"image_size": 8, "patch_size": 2, "channels": 1}}),
    ],
)
def test_datasets_and_collate_survive_pickling(make_dm, kind, fields):
    """Worker processes started with 'spawn' (macOS, Windows) receive the dataset and collate_fn pickled."""
    import pickle

    dm = make_dm(kind, **fields)
    dataset = pickle.loads(pickle.dumps(dm.datasets["train"]))
    collate = pickle.loads(pickle.dumps(dm.collate_fn()))
    batch = collate([dataset[(1, 0)], dataset[(1, 1)]])
    expected = collate([dm.datasets["train"][(1, 0)], dm.datasets["train"][(1, 1)]])
    assert batch.keys() == expected.keys()
    assert all(torch.equal(batch[k], expected[k]) for k in batch)
