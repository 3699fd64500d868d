"""The training stream (endless, a pure function of seed and position, sharded over ranks, resumed
through a real Lightning Trainer) and evaluation shards that score every sample exactly once (under
FSDP padded with batches that keep the ranks' forwards in step)."""

from __future__ import annotations

import pickle

import pytest
import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import default_collate

from attnlab.data.sampling import ResumableLoader, SampleBatches, derive_seed, mixed_seed, split_key
from attnlab.schema.data import PADDING_BATCH


class Keys(torch.utils.data.Dataset):
    """Samples that are their own keys: (epoch, index)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key):
        return torch.tensor(split_key(key))


def keys(n=10, batch_size=4, world_size=1, rank=0, seed=3) -> SampleBatches:
    return SampleBatches(
        Keys(n), default_collate, seed=seed, batch_size=batch_size, rank=rank, world_size=world_size
    )


def test_every_epoch_is_a_seeded_permutation_and_batches_run_on_across_epochs():
    stream = keys(n=10, batch_size=4)
    drawn = torch.cat([stream[p] for p in range(0, 40, 4)])  # 10 batches = 4 epochs of 10
    assert drawn[:, 0].tolist() == [e for e in range(4) for _ in range(10)]
    epochs = [drawn[drawn[:, 0] == e, 1].tolist() for e in range(4)]
    assert all(sorted(order) == list(range(10)) for order in epochs)
    assert len({tuple(order) for order in epochs}) == 4  # another epoch, another order
    assert torch.equal(stream[8], keys(n=10, batch_size=4)[8])  # a pure function of (seed, position)
    assert not torch.equal(stream[8], keys(n=10, batch_size=4, seed=4)[8])
    assert split_key(5) == (0, 5) and derive_seed(1, 2, 3) == derive_seed(1, 2, 3) != derive_seed(1, 3, 2)
    # the per-step seed (StepSeeder): order matters, every part counts, 63 bits
    seeds = {mixed_seed(1, 2, 3, 0), mixed_seed(1, 3, 2, 0), mixed_seed(1, 2, 3, 1), mixed_seed(2, 2, 3, 0)}
    assert len(seeds) == 4 and mixed_seed(1, 2, 3, 0) == mixed_seed(1, 2, 3, 0) and max(seeds) < 2**63


def test_ranks_draw_the_rows_of_one_process_with_the_doubled_batch():
    one = keys(n=13, batch_size=6)
    ranks = [keys(n=13, batch_size=3, world_size=2, rank=r) for r in (0, 1)]
    for position in (0, 6, 12, 60):
        assert torch.equal(one[position], torch.cat([ranks[0][position], ranks[1][position]]))
    with pytest.raises(ValueError, match=r"rank=2 is not in \[0, world_size=2\)"):
        keys(rank=2, world_size=2)


def test_the_loader_resumes_at_its_saved_position():
    loader = ResumableLoader(keys(n=10, batch_size=4))
    it = iter(loader)
    first = [next(it) for _ in range(5)]
    state = loader.state_dict()
    assert state == {"position": 20, "seed": 3, "samples": 10}
    rest = [next(it) for _ in range(3)]
    resumed = ResumableLoader(keys(n=10, batch_size=4))
    resumed.load_state_dict(state)
    again = iter(resumed)
    assert all(torch.equal(a, next(again)) for a in rest)
    assert not torch.equal(first[0], rest[0])
    with pytest.raises(ValueError, match=r"cannot resume the training data: the checkpoint's stream was "):
        ResumableLoader(keys(n=11, batch_size=4)).load_state_dict(state)


def test_a_repeating_loader_starts_over_on_every_pass():
    """Lightning's overfit_batches: the same batches every epoch."""
    loader = ResumableLoader(keys(), repeat=True)
    a, b = next(iter(loader)), next(iter(loader))
    assert torch.equal(a, b) and loader.state_dict()["position"] == 0


def val_sources(dm) -> list[tuple[int, ...]]:
    """The source rows of the validation loader without their padding (batches pad to their own longest)."""
    return [
        tuple(ids[mask].tolist())
        for batch in dm.val_dataloader()
        for ids, mask in zip(batch["src_ids"], batch["src_mask"], strict=True)
    ]


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_evaluation_scores_every_sample_exactly_once(make_dm, monkeypatch, world_size):
    """No padded duplicates (a split of 23 is not a multiple of 2 or 3): the shards differ by one at most."""
    dm = make_dm("reverse", num_train=40, num_val=23, num_test=5, batch_size=4)
    everything = val_sources(dm)
    seen = []
    for rank in range(world_size):
        monkeypatch.setattr(dm, "_ranks", lambda rank=rank: (rank, world_size))
        shard = val_sources(dm)
        assert len(shard) in (23 // world_size, 23 // world_size + 1)
        seen += shard
    assert len(everything) == 23 and sorted(seen) == sorted(everything)


@pytest.fixture
def sharded_module(tmp_path):
    """A module whose layer FSDP2 shards over a gloo group of one (in this process): every forward of it
    is a collective, as under ``trainer=fsdp2``."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    module = nn.Sequential(nn.Linear(4, 4))
    fully_shard(module[0], mesh=init_device_mesh("cpu", (1,)))
    yield module
    dist.destroy_process_group()


def eval_batches(dm, module, rank: int, world_size: int) -> list[dict]:
    """The validation batches of ``rank`` of ``world_size`` under a Trainer running ``module``."""
    from types import SimpleNamespace

    dm.trainer = SimpleNamespace(
        distributed_sampler_kwargs={"rank": rank, "num_replicas": world_size},
        lightning_module=module,
        strategy=SimpleNamespace(root_device=torch.device("cpu")),
    )
    loader = dm.val_dataloader()
    batches = list(loader)
    assert len(loader) == len(batches)
    return batches


@pytest.mark.parametrize(
    ("samples", "world_size", "batch_size", "real_batches"),
    [(33, 2, 8, [3, 2]), (9, 4, 2, [2, 1, 1, 1]), (23, 3, 4, [2, 2, 2]), (2, 3, 4, [1, 1, 0])],
)
def test_where_the_forward_is_a_collective_every_rank_runs_as_many_batches(
    make_dm, sharded_module, samples, world_size, batch_size, real_batches
):
    """Under FSDP (the Trainer's module sharded: ``gathers_weights``) a rank whose shard makes fewer
    batches than rank 0's ends with padding batches (the split's first sample, marked PADDING_BATCH),
    its real batches still its own samples, every sample scored once; where the forward is each
    process's own (DDP: a plain module), the shards keep their own counts."""
    dm = make_dm("reverse", num_train=40, num_val=samples, num_test=5, batch_size=batch_size)
    seen = []
    for rank, real in enumerate(real_batches):
        padded = eval_batches(dm, sharded_module, rank, world_size)
        assert len(padded) == real_batches[0]
        assert [PADDING_BATCH in b for b in padded] == [False] * real + [True] * (real_batches[0] - real)
        for batch in padded[real:]:
            first = dm.padding_batch("val")
            assert batch.keys() == first.keys() and all(torch.equal(batch[k], first[k]) for k in batch)
            assert batch["src_ids"].shape[0] == 1 and batch[PADDING_BATCH].tolist() == [True]
        seen += [
            tuple(ids[mask].tolist()) for b in padded[:real] for ids, mask in zip(b["src_ids"], b["src_mask"])
        ]
        plain = eval_batches(dm, nn.Linear(4, 4), rank, world_size)
        assert len(plain) == real and not any(PADDING_BATCH in b for b in plain)
    dm.trainer = None
    assert sorted(seen) == sorted(val_sources(dm)) and len(seen) == samples


class Recorder(pl.LightningModule):
    """Trains an embedding and records the first (source) token of every row of every training batch."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Embedding(128, 1)
        self.seen: list[list[int]] = []

    def training_step(self, batch, batch_idx):
        ids = batch["input_ids"] if "input_ids" in batch else batch["src_ids"]
        self.seen.append(ids[:, 0].tolist())
        return self.layer(ids).mean()

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
        max_epochs=-1,
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
    assert trainer.fit_loop.epoch_progress.current.started == 1, trainer.fit_loop.epoch_progress  # no restart
    return model.seen


@pytest.mark.parametrize(("kind", "workers"), [("text", 0), ("text", 1), ("reverse", 0)])
def test_lightning_resume_continues_with_the_very_next_batch(make_dm, tmp_path, kind, workers):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(chr(97 + (i * 7) % 26) for i in range(3000)))
    if kind == "text":  # ~190 windows of 16: 30 steps of 8 would cross an epoch boundary of old
        fields = {"path": str(corpus), "seq_len": 16, "batch_size": 8, "num_workers": workers}
    else:  # 64 samples: 8 batches a permutation, so 30 steps read 4 of them
        fields = {"num_train": 64, "num_val": 8, "num_test": 8, "batch_size": 8}
    reference = fit(make_dm(kind, **fields), tmp_path / "a", max_steps=30)
    first = fit(make_dm(kind, **fields), tmp_path / "b", max_steps=13, every=13)
    assert first == reference[:13]
    resumed = fit(
        make_dm(kind, **fields),
        tmp_path / "c",
        max_steps=30,
        ckpt_path=str(tmp_path / "b" / "epoch=0-step=13.ckpt"),
    )
    assert resumed == reference[13:]


def test_a_checkpoint_of_the_former_sampler_is_refused(make_dm):
    dm = make_dm("reverse", num_train=20, num_val=5, num_test=5)
    with pytest.raises(ValueError, match=r"written by an earlier attnlab whose training data order differs"):
        dm.load_state_dict({"sampler": {"epoch": 0, "consumed": 8, "seed": 0, "num_samples": 20}})


@pytest.mark.parametrize(
    ("kind", "fields"),
    [
        ("text", {"task": "mlm", "seq_len": 32}),
        ("text", {"seq_len": 32}),
        ("listops", {"num_train": 20, "num_val": 5, "num_test": 5}),
        ("reverse", {"num_train": 20, "num_val": 5, "num_test": 5}),
        ("digits", {"model": {"image_size": 8, "patch_size": 2, "channels": 1}}),
    ],
)
def test_batches_survive_pickling(make_dm, kind, fields):
    """Worker processes started with 'spawn' (macOS, Windows) receive the batches and collate_fn pickled."""
    dm = make_dm(kind, **fields)
    batches = dm.train_dataloader().batches
    copy = pickle.loads(pickle.dumps(batches))
    assert all(torch.equal(copy[64][k], batches[64][k]) for k in batches[64])
    dataset = pickle.loads(pickle.dumps(dm.datasets["val"]))
    collate = pickle.loads(pickle.dumps(dm.collate_fn()))
    batch, expected = (
        collate([dataset[0], dataset[1]]),
        dm.collate_fn()([dm.datasets["val"][0], dm.datasets["val"][1]]),
    )
    assert batch.keys() == expected.keys() and all(torch.equal(batch[k], expected[k]) for k in batch)


@pytest.mark.parametrize(
    ("setting", "device", "pinned"), [(None, "cuda", True), (None, "cpu", False), (False, "cuda", False)]
)
def test_pinned_memory_follows_the_accelerator_unless_set(make_dm, setting, device, pinned):
    from types import SimpleNamespace

    dm = make_dm("reverse", num_train=20, num_val=5, num_test=5, pin_memory=setting)
    dm.trainer = SimpleNamespace(
        strategy=SimpleNamespace(root_device=torch.device(device)),
        global_rank=0,
        world_size=1,
        distributed_sampler_kwargs=None,
        lightning_module=None,
    )
    assert dm.pin_memory is pinned and dm.val_dataloader().pin_memory is pinned
