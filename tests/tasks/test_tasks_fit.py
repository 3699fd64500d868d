"""Short Lightning fits on learnable synthetic data, throughput logging, and checkpoint round trips."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import CSVLogger
from torch.utils.data import DataLoader

from attnlab.checkpoint import load_task_from_checkpoint
from attnlab.data.tokenizers import SPECIAL_TOKENS, char_tokenizer
from attnlab.models import build_model, count_parameters
from attnlab.schema.load import read_model_config, upgrade_group
from attnlab.schema.optim import AdamWConfig
from attnlab.schema.task import task_config
from attnlab.tasks import build_task, flops_per_token
from attnlab.training.callbacks import ThroughputLogger
from attnlab.training.callbacks.throughput import precision_dtype

# Two heads, a narrow feed-forward and the usual init: losses near log(vocab) at the start.
SIZES = dict(n_heads=2, d_ff=32, init_std=0.02)

VOCAB = 16
PEAK = 1e12  # FLOP/s of a device, as a GPU's datasheet would give it
DATA = Path(__file__).parent / "data"
SCHEMA_DATA = Path(__file__).parent.parent / "schema" / "data"


class LossRecorder(pl.Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


def trainer(max_steps: int, callbacks=(), logger=False, **kw) -> pl.Trainer:
    return pl.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=list(callbacks),
        **kw,
    )


def counting_batches(n: int = 64, t: int = 8) -> list[dict[str, torch.Tensor]]:
    """Sequences k, k+1, ... (mod VOCAB) from random starts: the next token is always the successor."""
    starts = torch.randint(0, VOCAB, (n, 1), generator=torch.Generator().manual_seed(0))
    seqs = (starts + torch.arange(t + 1)) % VOCAB
    return [{"input_ids": s[:-1], "labels": s[1:]} for s in seqs]


def bright_quadrant_images(n: int = 64) -> list[dict[str, torch.Tensor]]:
    """8x8 images whose class (0-3) is the quadrant that is bright."""
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 4, (n,), generator=g)
    images = 0.1 * torch.randn(n, 1, 8, 8, generator=g)
    for image, label in zip(images, labels.tolist()):
        row, col = divmod(label, 2)
        image[:, 4 * row : 4 * row + 4, 4 * col : 4 * col + 4] += 1.0
    return [{"pixel_values": x, "labels": y} for x, y in zip(images, labels)]


def fit_losses(task, data, steps: int = 30, callbacks=()) -> tuple[list[float], pl.Trainer]:
    recorder = LossRecorder()
    t = trainer(steps, [recorder, *callbacks], limit_val_batches=0, log_every_n_steps=5)
    t.fit(task, DataLoader(data, batch_size=8, shuffle=True))
    return recorder.losses, t


def test_causal_lm_fit_reduces_the_loss_and_logs_throughput(tiny_model):
    torch.manual_seed(0)
    task = build_task(
        task_config("causal_lm"),
        AdamWConfig(lr=1e-2, warmup_steps=5),
        tiny_model("gpt", **SIZES),
        max_steps=30,
    )
    losses, t = fit_losses(task, counting_batches(), callbacks=[ThroughputLogger()])
    assert len(losses) == 30
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5
    metrics = t.callback_metrics
    assert "train/tokens_per_s" in metrics and "train/mfu" not in metrics  # a CPU has no known peak
    schedule = task.lr_schedulers().lr_lambdas[0]
    assert metrics["lr"].item() == pytest.approx(1e-2 * schedule(29), rel=1e-5)  # the last step's lr


def test_loss_lr_and_throughput_reach_the_logger_on_its_steps(tmp_path, tiny_model):
    task = build_task(
        task_config("causal_lm"),
        AdamWConfig(schedule="constant", lr=1e-3, warmup_steps=0),
        tiny_model("gpt", **SIZES),
        max_steps=12,
    )
    t = pl.Trainer(
        max_steps=12,
        accelerator="cpu",
        logger=CSVLogger(tmp_path),
        log_every_n_steps=5,
        limit_val_batches=0,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[throughput := ThroughputLogger(peak_flops=PEAK), recorder := LossRecorder()],
    )
    t.fit(task, DataLoader(counting_batches(), batch_size=8))
    with open(tmp_path / "lightning_logs" / "version_0" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    logged = {int(r["step"]): {k for k, v in r.items() if v and k not in ("step", "epoch")} for r in rows}
    assert logged == {
        4: {"train/loss", "lr", "train/tokens_per_s", "train/mfu"},
        9: {"train/loss", "lr", "train/tokens_per_s", "train/mfu"},
    }
    assert all(float(r["lr"]) == pytest.approx(1e-3) for r in rows)
    assert float(rows[1]["train/loss"]) == pytest.approx(recorder.losses[9])
    assert t.callback_metrics["train/loss"].item() == pytest.approx(recorder.losses[-1])  # the last step's
    assert set(t.progress_bar_metrics) == {"train/loss", "train/tokens_per_s"}
    # Not through self.log (tasks.step_log): Lightning would turn its stored values into dictionaries
    # at every step, logging or not, and its result collection stays empty.
    assert not t.fit_loop.epoch_loop._results
    # Each value is the rate since the previous log (steps 1-5, then 6-10: batches of 64 tokens), and
    # the run's mean throughput weighs them by their time.
    first, second = (float(r["train/tokens_per_s"]) for r in rows)
    assert throughput.unit == "tokens"
    assert throughput.mean_rate == pytest.approx(10 * 64 / (5 * 64 / first + 5 * 64 / second))
    # The MFU is the FLOP rate of the same window over the peak: FLOPs per token in the closed form.
    per_token = flops_per_token(task.n_matmul_params, 2, 8, task.model.cfg.d_model)
    for r in rows:
        assert float(r["train/mfu"]) * PEAK == pytest.approx(
            float(r["train/tokens_per_s"]) * per_token, rel=1e-5
        )


def test_flops_of_a_batch_are_the_closed_form_of_the_config(tiny_model):
    """6 N + 12 L T d per token (PaLM), N the parameters of the products (not the positional table),
    counted when the task is built: a strategy that shards the model later does not change it."""
    model = tiny_model("gpt", **SIZES)
    cfg = model.cfg
    task = build_task(task_config("causal_lm"), AdamWConfig(), model, max_steps=1)
    n = count_parameters(model) - cfg.max_seq_len * cfg.d_model  # the learned positions are lookups
    b, t = 4, 8
    work = task.batch_work({"input_ids": torch.zeros(b, t, dtype=torch.long)})
    assert (work.tokens, work.samples) == (b * t, b)
    assert work.flops == b * t * (6 * n + 12 * cfg.n_layers * t * cfg.d_model)
    with torch.no_grad():
        for p in model.parameters():  # what a shard keeps of each parameter
            p.data = p.data.flatten()[:1]
    assert task.batch_work({"input_ids": torch.zeros(b, t, dtype=torch.long)}).flops == work.flops
    assert precision_dtype("bf16-mixed") == torch.bfloat16 and precision_dtype("16-mixed") == torch.float16
    assert precision_dtype("32-true") == torch.float32


def test_image_classification_fit_reduces_the_loss(tiny_model):
    torch.manual_seed(0)
    task = build_task(
        task_config("classification"),
        AdamWConfig(lr=1e-2, warmup_steps=5),
        tiny_model("vit", num_classes=4, patch_size=4, **SIZES),  # a patch per quadrant
        max_steps=30,
    )
    losses, t = fit_losses(task, bright_quadrant_images(), callbacks=[ThroughputLogger()])
    assert sum(losses[-5:]) / 5 < 0.75 * sum(losses[:5]) / 5  # from ln 4 = 1.39 to about 0.8
    assert "train/samples_per_s" in t.callback_metrics and "train/tokens_per_s" not in t.callback_metrics


def test_bf16_mixed_precision_with_gradient_clipping_and_accumulation_trains(tmp_path, tiny_model):
    """Lightning cannot clip under AMP with the fused AdamW kernel; the task then uses the plain one.
    The step's values reach the logger once per optimizer step, never mid-accumulation."""
    task = build_task(
        task_config("causal_lm"),
        AdamWConfig(lr=1e-2, warmup_steps=0),
        tiny_model("gpt", **SIZES),
        max_steps=4,
    )
    t = trainer(
        4,
        precision="bf16-mixed",
        gradient_clip_val=1.0,
        accumulate_grad_batches=2,
        limit_val_batches=0,
        logger=CSVLogger(tmp_path),
        log_every_n_steps=2,
    )
    t.fit(task, DataLoader(counting_batches(), batch_size=8))
    assert t.global_step == 4 and not t.optimizers[0].defaults["fused"]
    with open(tmp_path / "lightning_logs" / "version_0" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(int(r["step"]), bool(r["train/loss"]), bool(r["lr"])) for r in rows] == [
        (1, True, True),
        (3, True, True),
    ]


def test_validate_logs_perplexity_as_exp_of_the_token_mean_loss(tiny_model):
    task = build_task(
        task_config("causal_lm"), AdamWConfig(schedule="constant"), tiny_model("gpt", **SIZES), max_steps=1
    )
    (result,) = trainer(1).validate(task, DataLoader(counting_batches(20), batch_size=8), verbose=False)
    assert set(result) == {"val/loss", "val/ppl", "step", "epoch"}  # step and epoch label the logged values
    assert result["step"] == 0  # the optimizer step of the evaluated weights
    assert result["val/ppl"] == pytest.approx(math.exp(result["val/loss"]), rel=1e-5)


def test_test_metrics_of_a_classifier(tiny_model):
    task = build_task(
        task_config("classification"), AdamWConfig(), tiny_model("vit", num_classes=4, **SIZES), max_steps=1
    )
    (result,) = trainer(1).test(task, DataLoader(bright_quadrant_images(16), batch_size=8), verbose=False)
    assert set(result) == {"test/loss", "test/acc", "test/f1", "step", "epoch"}


def family_batch(family: str) -> dict[str, torch.Tensor]:
    ids = torch.randint(7, VOCAB, (2, 6), generator=torch.Generator().manual_seed(5))
    mask = torch.ones(2, 6, dtype=torch.bool)
    if family == "gpt":
        return {"input_ids": ids, "labels": ids.roll(-1, 1)}
    if family == "bert":
        labels = torch.full_like(ids, -100)
        labels[:, 2] = ids[:, 2]
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}
    if family == "seq2seq":
        return {
            "src_ids": ids,
            "src_mask": mask,
            "tgt_in": ids.flip(1),
            "tgt_mask": mask,
            "labels": ids.flip(1),
        }
    return {"pixel_values": torch.randn(2, 1, 8, 8), "labels": torch.tensor([0, 1])}


FAMILY_TASKS = [
    ("gpt", "causal_lm", {}),
    ("bert", "mlm", {}),
    ("seq2seq", "seq2seq", {}),
    ("vit", "classification", {"num_classes": 2}),
]


@pytest.mark.parametrize(("family", "name", "overrides"), FAMILY_TASKS)
def test_checkpoint_round_trip_rebuilds_an_identical_model(tmp_path, tiny_model, family, name, overrides):
    tokenizer = char_tokenizer(["abcdefghi"], roles=SPECIAL_TOKENS) if family != "vit" else None
    model = tiny_model(family, **overrides, **SIZES)
    task = build_task(
        task_config(name),
        AdamWConfig(lr=1e-2, schedule="constant"),
        model,
        tokenizer=tokenizer,
        max_steps=2,
    )
    batch = family_batch(family)
    t = trainer(2, limit_val_batches=0)
    t.fit(task, DataLoader([batch], batch_size=None))
    path = tmp_path / "run.ckpt"
    t.save_checkpoint(path)

    loaded = load_task_from_checkpoint(path)
    assert type(loaded) is type(task) and loaded.model.cfg == model.cfg
    assert loaded.task_cfg == task.task_cfg and loaded.optim_cfg == task.optim_cfg
    task.eval()
    with torch.no_grad():
        assert torch.equal(loaded.training_loss(batch), task.training_loss(batch))
    if tokenizer is not None:
        assert loaded.tokenizer.encode("fab") == tokenizer.encode("fab")
        assert loaded.tokenizer.eos_id == tokenizer.eos_id
    else:
        assert loaded.tokenizer is None


@pytest.fixture
def gpt_checkpoint(tmp_path, tiny_model):
    """A checkpoint of one training step of a tiny GPT, and its task module."""
    task = build_task(
        task_config("causal_lm"), AdamWConfig(schedule="constant"), tiny_model("gpt", **SIZES), max_steps=1
    )
    t = trainer(1, limit_val_batches=0)
    t.fit(task, DataLoader([family_batch("gpt")], batch_size=None))
    t.save_checkpoint(tmp_path / "plain.ckpt")
    return tmp_path / "plain.ckpt", task.eval()


def test_a_task_module_loads_with_lightnings_own_loader(gpt_checkpoint):
    """The hyperparameters are plain data from which the module builds its model."""
    path, task = gpt_checkpoint
    loaded = type(task).load_from_checkpoint(path, weights_only=True).eval()
    ids = family_batch("gpt")["input_ids"]
    assert loaded.model.cfg == task.model.cfg and torch.equal(loaded.model(ids), task.model(ids))


def test_a_checkpoint_written_by_format_2_loads_with_its_tokenizer():
    """tests/tasks/data/format_2_gpt.ckpt: a tiny GPT and its tokenizer saved by attnlab-train's task
    module at commit 88c8b54 (configs and tokenizer in an "attnlab" entry), with its logits. They were
    computed on another CPU: float32 kernels for another instruction set round differently (a few ulps:
    6.6e-7 at logits of about 4 on an AVX-512 Xeon), so equal means equal to float32 rounding."""
    loaded = load_task_from_checkpoint(DATA / "format_2_gpt.ckpt")
    assert loaded.tokenizer.decode(loaded.tokenizer.encode("bad")) == "bad"
    ids = torch.randint(0, loaded.tokenizer.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = loaded.model(ids[:, :-1])
    torch.testing.assert_close(logits, torch.load(DATA / "format_2_gpt_logits.pt"), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("family", ["vit", "bert"])
def test_a_checkpoint_of_format_1_loads(tmp_path, family):
    """The configs of a format-1 checkpoint (flat classes, tests/schema/data) with weights that fit them."""
    saved = json.loads((SCHEMA_DATA / f"format_1_{family}.json").read_text())["checkpoint"]
    saved = {**saved, "max_steps": 7, "tokenizer": None}
    model = build_model(read_model_config(upgrade_group("model", saved["model"])))
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    lightning = {"pytorch-lightning_version": "2.5.0", "hyper_parameters": {}}
    torch.save({"state_dict": state, "attnlab": saved, **lightning}, tmp_path / "old.ckpt")
    loaded = load_task_from_checkpoint(tmp_path / "old.ckpt")
    assert loaded.model.cfg == model.cfg and loaded.max_steps == 7
    assert loaded.optim_cfg.betas == saved["optim"]["betas"]
    assert all(torch.equal(loaded.model.state_dict()[k], v) for k, v in model.state_dict().items())


def test_checkpoint_with_unknown_config_keys_or_other_weights_is_a_clear_error(tmp_path, gpt_checkpoint):
    path, _ = gpt_checkpoint
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["hyper_parameters"]["model"]["n_experts"] = 8
    torch.save(checkpoint, tmp_path / "newer.ckpt")
    with pytest.raises(
        ValueError, match=r"holds a config this attnlab cannot read: model\.n_experts=8: not a known key"
    ):
        load_task_from_checkpoint(tmp_path / "newer.ckpt")
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["hyper_parameters"]["model"]["d_ff"] = 64
    torch.save(checkpoint, tmp_path / "other.ckpt")
    with pytest.raises(ValueError, match="do not fit the model its config describes"):
        load_task_from_checkpoint(tmp_path / "other.ckpt")


def test_a_run_bounded_by_epochs_decays_over_lightnings_step_estimate(tiny_model):
    task = build_task(
        task_config("causal_lm"),
        AdamWConfig(schedule="cosine", warmup_steps=0),
        tiny_model("gpt", **SIZES),
        max_steps=-1,
    )
    t = pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    t.fit(task, DataLoader(counting_batches(16), batch_size=8))  # 2 batches x 2 epochs
    assert t.global_step == 4 and task.lr_schedulers().lr_lambdas[0].max_steps == 4


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    path = tmp_path / "nope.ckpt"
    with pytest.raises(FileNotFoundError, match=re.escape(f"checkpoint {str(path)!r} does not exist")):
        load_task_from_checkpoint(path)


def test_corrupt_checkpoint_is_a_clear_error(tmp_path, tiny_model):
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"this is not a checkpoint")
    with pytest.raises(ValueError, match=re.escape(f"{str(garbage)!r} is not a readable PyTorch checkpoint")):
        load_task_from_checkpoint(garbage)
    truncated = tmp_path / "truncated.ckpt"
    torch.save({"state_dict": tiny_model("gpt", **SIZES).state_dict()}, truncated)
    truncated.write_bytes(truncated.read_bytes()[:1000])
    with pytest.raises(ValueError, match="is not a readable PyTorch checkpoint"):
        load_task_from_checkpoint(truncated)


def test_foreign_checkpoint_is_a_clear_error(tmp_path, tiny_model):
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": tiny_model("gpt", **SIZES).state_dict(), "epoch": 3}, foreign)
    with pytest.raises(ValueError, match=re.escape(f"{str(foreign)!r} is not an attnlab checkpoint")):
        load_task_from_checkpoint(foreign)


@pytest.mark.parametrize(
    ("family", "task", "model", "settings"),
    [
        ("gpt", "causal_lm", {}, {}),
        ("bert", "mlm", {"mlm_head": True}, {}),
        ("bert", "classification", {"num_classes": 3}, {}),
        ("seq2seq", "seq2seq", {}, {}),
        ("seq2seq", "seq2seq", {}, {"eval_decode": False}),
        ("vit", "classification", {"num_classes": 3}, {}),
    ],
)
def test_each_task_logs_at_validation_the_metrics_its_schema_lets_task_monitor_name(
    tiny_model, family, task, model, settings
):
    """``task.monitor`` is checked against ``val_metrics`` of the task's schema before a run starts;
    the task module must log exactly those (it logs ``ppl`` next to the metrics it builds)."""
    cfg = task_config(task, **settings)
    tokenizer = char_tokenizer(["abcdefghijklmnop"], roles=SPECIAL_TOKENS)
    module = build_task(cfg, AdamWConfig(), tiny_model(family, **model), tokenizer=tokenizer, max_steps=1)
    logged = set(module.build_metrics()) | ({"ppl"} if module.reports_perplexity else set())
    assert logged == set(cfg.val_metrics())


@pytest.mark.parametrize(
    ("name", "dtype", "tf32", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", torch.bfloat16, True, 989.4e12),  # H100 SXM, dense
        ("NVIDIA H200", torch.bfloat16, True, 989e12),  # Lightning's table does not know this name
        ("NVIDIA H100 PCIe", torch.bfloat16, True, 756e12),
        ("NVIDIA A100-SXM4-80GB", torch.bfloat16, True, 312e12),
        ("NVIDIA A100-SXM4-80GB", torch.float32, True, 156e12),  # TF32 tensor cores
        ("NVIDIA A100-SXM4-80GB", torch.float32, False, 19.5e12),
        ("Tesla T4", torch.bfloat16, True, None),  # not in attnlab's table: Lightning's is asked
    ],
)
def test_mfu_divides_by_the_dense_peak_of_the_gpu(
    name: str, dtype: torch.dtype, tf32: bool, peak: float | None
) -> None:
    from attnlab.training.callbacks.throughput import dense_peak

    assert dense_peak(name, dtype, tf32) == peak
