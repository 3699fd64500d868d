"""trainer.on_nonfinite: a step whose loss or gradient is not finite never changes the weights; ``stop``
ends the fit at that step, ``skip`` drops it (counted, at most N in a row); checkpoints hold finite
weights only, and a non-finite validation value is never the best."""

from __future__ import annotations

import math

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader

from attnlab.data.tokenizers import SPECIAL_TOKENS, char_tokenizer
from attnlab.schema.optim import AdamWConfig
from attnlab.schema.task import task_config
from attnlab.tasks import build_task
from attnlab.tasks.base import NONFINITE_KEY, TOKENIZER_KEY, tokenizer_files
from attnlab.tasks.nonfinite import NonFiniteGuard, NonFiniteStep, NonFiniteWeights, all_finite
from attnlab.training.callbacks import BestCheckpoint

VOCAB = 16


def batches(n: int = 64, t: int = 8) -> list[dict[str, torch.Tensor]]:
    starts = torch.randint(0, VOCAB, (n, 1), generator=torch.Generator().manual_seed(0))
    seqs = (starts + torch.arange(t + 1)) % VOCAB
    return [{"input_ids": s[:-1], "labels": s[1:]} for s in seqs]


class WeightsAfterEachStep(pl.Callback):
    """{optimizer step: a copy of the weights after it}, and the gradient norm each step left."""

    def __init__(self) -> None:
        self.weights: dict[int, dict[str, torch.Tensor]] = {}
        self.grad_norms: dict[int, float] = {}

    def on_train_batch_end(self, trainer, pl_module, *args) -> None:
        step = trainer.global_step
        self.weights[step] = {k: v.clone() for k, v in pl_module.state_dict().items()}
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        if grads:
            self.grad_norms[step] = float(torch.nn.utils.get_total_norm(grads))


def task_with_bad_steps(tiny_model, bad_loss=(), bad_grad=(), on_nonfinite="stop", max_skips=10):
    """A tiny causal LM whose loss is NaN at the optimizer steps ``bad_loss`` (1-based), and whose
    gradient of one weight is infinite (the loss finite) at the steps ``bad_grad``."""
    torch.manual_seed(0)
    task = build_task(
        task_config("causal_lm"),
        AdamWConfig(lr=1e-2, warmup_steps=0),
        tiny_model("gpt", n_heads=2, d_ff=32),
        max_steps=6,
    )
    task.nonfinite = NonFiniteGuard(on_nonfinite, max_skips)
    loss_of = task.training_loss
    weight = next(task.model.parameters())
    weight.register_hook(lambda g: torch.full_like(g, math.inf) if task.global_step + 1 in bad_grad else g)

    def training_loss(batch):
        loss = loss_of(batch)
        return loss * math.nan if task.global_step + 1 in bad_loss else loss

    task.training_loss = training_loss
    return task


def fit(task, steps: int = 6, clip: float | None = 1.0, callbacks=()) -> WeightsAfterEachStep:
    record = WeightsAfterEachStep()
    trainer = pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        gradient_clip_val=clip,
        callbacks=[record, *callbacks],
    )
    trainer.fit(task, DataLoader(batches(), batch_size=8))
    return record


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("clip", [1.0, 0.0])
def test_stop_ends_the_fit_at_a_nan_loss_before_the_weights_change(tiny_model, clip) -> None:
    task = task_with_bad_steps(tiny_model, bad_loss={3})
    record = WeightsAfterEachStep()
    with pytest.raises(NonFiniteStep) as err:
        fit(task, clip=clip, callbacks=[record])
    assert str(err.value) == (
        "step 3: loss=nan, gradient norm=nan (trainer.on_nonfinite=stop): stopped before the optimizer "
        "step, so the weights and checkpoints stay finite"
    )
    assert sorted(record.weights) == [1, 2]
    assert same({k: v for k, v in task.state_dict().items()}, record.weights[2])


@pytest.mark.parametrize("clip", [1.0, 0.0])
def test_an_infinite_gradient_of_a_finite_loss_is_caught_too(tiny_model, clip) -> None:
    task = task_with_bad_steps(tiny_model, bad_grad={2})
    with pytest.raises(NonFiniteStep, match=r"^step 2: loss=[0-9.]+, gradient norm=(inf|nan) "):
        fit(task, clip=clip)


def test_skip_drops_the_step_counts_it_and_goes_on(tiny_model) -> None:
    task = task_with_bad_steps(tiny_model, bad_loss={3, 4}, on_nonfinite="skip", max_skips=3)
    record = fit(task)
    assert sorted(record.weights) == [1, 2, 3, 4, 5, 6]  # the skipped steps count as steps
    assert same(record.weights[2], record.weights[4])  # steps 3 and 4 changed nothing
    assert not same(record.weights[4], record.weights[5])
    assert task.nonfinite.state_dict() == {"skipped": 2, "in_a_row": 0}
    (optimizer,) = task.trainer.optimizers
    assert {int(s["step"]) for s in optimizer.state.values()} == {4}  # AdamW's own count: 2 steps skipped
    assert task.trainer.callback_metrics["train/skipped_steps"].item() == 2


def test_skip_stops_at_the_nth_skipped_step_in_a_row(tiny_model) -> None:
    task = task_with_bad_steps(tiny_model, bad_loss={2, 3, 4}, on_nonfinite="skip", max_skips=3)
    with pytest.raises(NonFiniteStep) as err:
        fit(task)
    assert str(err.value) == (
        "step 4: loss=nan, gradient norm=nan: 3 optimizer steps in a row skipped, the most "
        "trainer.max_nonfinite_skips=3 allows"
    )
    assert task.nonfinite.skipped == 3


def test_skips_in_a_row_restart_at_a_finite_step(tiny_model) -> None:
    task = task_with_bad_steps(tiny_model, bad_loss={2, 4, 6}, on_nonfinite="skip", max_skips=2)
    fit(task)
    assert task.nonfinite.state_dict() == {"skipped": 3, "in_a_row": 1}


def test_clipping_by_norm_still_clips(tiny_model) -> None:
    """The task clips by norm itself (to keep the norm it checks): the gradients stay within the bound."""
    record = fit(task_with_bad_steps(tiny_model), clip=0.01)
    assert max(record.grad_norms.values()) <= 0.01 * (1 + 1e-5)
    assert max(fit(task_with_bad_steps(tiny_model), clip=0.0).grad_norms.values()) > 0.1


def test_clipping_by_norm_computes_the_norm_it_checks_once(tiny_model, monkeypatch) -> None:
    """The checked norm is the one clipping computed: no second pass over the gradients per step."""
    import attnlab.tasks.base as base

    calls = []
    monkeypatch.setattr(base, "gradient_norm", lambda params: calls.append(1) or torch.tensor(0.0))
    fit(task_with_bad_steps(tiny_model), clip=1.0)
    assert calls == []
    fit(task_with_bad_steps(tiny_model), clip=0.0)
    assert len(calls) == 6  # without clipping, the norm is computed for the check alone


def test_a_checkpoint_of_non_finite_weights_is_refused_and_the_skip_counts_are_kept(tiny_model) -> None:
    task = task_with_bad_steps(tiny_model)
    task.nonfinite.skipped, task.nonfinite.in_a_row = 5, 2
    checkpoint = {"state_dict": task.state_dict(), "global_step": 7}
    task.on_save_checkpoint(checkpoint)
    assert checkpoint[NONFINITE_KEY] == {"skipped": 5, "in_a_row": 2}
    fresh = task_with_bad_steps(tiny_model)
    fresh.on_load_checkpoint(checkpoint)
    assert fresh.nonfinite.state_dict() == {"skipped": 5, "in_a_row": 2}
    name, weight = list(task.named_parameters())[-1]
    with torch.no_grad():
        weight.view(-1)[0] = math.inf
    with pytest.raises(NonFiniteWeights) as err:
        task.on_save_checkpoint({"state_dict": task.state_dict(), "global_step": 8})
    assert (
        str(err.value) == f"step 8: weight {name} is not finite: checkpoint not written, the last one is kept"
    )
    first, _ = next(iter(task.named_parameters()))
    with torch.no_grad():  # a NaN in another weight: the first one bad is named
        weight.view(-1)[0] = 1.0
        next(iter(task.parameters())).view(-1)[-1] = math.nan
    with pytest.raises(NonFiniteWeights, match=f"step 9: weight {first} is not finite"):
        task.on_save_checkpoint({"state_dict": task.state_dict(), "global_step": 9})


@pytest.mark.parametrize(
    ("loss", "norm", "finite"),
    [(2.5, 1e30, True), (math.nan, 1.0, False), (1.0, math.inf, False), (-math.inf, 1.0, False)],
)
def test_a_step_is_finite_only_if_its_loss_and_gradient_norm_are(loss, norm, finite) -> None:
    guard = NonFiniteGuard("skip", max_skips=5)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    values = torch.tensor(loss), torch.tensor(norm, dtype=torch.float64)
    assert all_finite(list(values)) is finite
    assert guard.check(1, *values, optimizer) is finite
    assert guard.skipped == (0 if finite else 1)


def test_the_embedded_tokenizer_is_written_out_once_per_tokenizer(tiny_model, monkeypatch) -> None:
    """Every checkpoint embeds the tokenizer's files; the tokenizer does not change during a run."""
    task = task_with_bad_steps(tiny_model)
    saves = []
    task.tokenizer = char_tokenizer(["abcdef"], roles=SPECIAL_TOKENS)
    write = task.tokenizer.save
    monkeypatch.setattr(task.tokenizer, "save", lambda d: saves.append(d) or write(d))
    first, second = ({"state_dict": task.state_dict(), "global_step": s} for s in (1, 2))
    task.on_save_checkpoint(first)
    task.on_save_checkpoint(second)
    assert len(saves) == 1 and first[TOKENIZER_KEY] == second[TOKENIZER_KEY] == tokenizer_files(
        task.tokenizer
    )
    assert first[TOKENIZER_KEY] is not second[TOKENIZER_KEY]
    task.tokenizer = char_tokenizer(["xyz"], roles=SPECIAL_TOKENS)  # another tokenizer: its own files
    task.on_save_checkpoint(third := {"state_dict": task.state_dict(), "global_step": 3})
    assert third[TOKENIZER_KEY] == tokenizer_files(task.tokenizer) != first[TOKENIZER_KEY]


def test_the_best_checkpoint_passes_train_batches_by_unless_it_saves_on_them(tmp_path, monkeypatch) -> None:
    """Lightning's hook looks at the loop and the clock every step; the best checkpoint saves at
    validations only, as attnlab builds it (its step or time options still work)."""
    calls = []
    monkeypatch.setattr(ModelCheckpoint, "on_train_batch_end", lambda self, *a: calls.append(self))
    at_validation = BestCheckpoint(dirpath=tmp_path, monitor="val/loss", save_top_k=1)
    by_steps = BestCheckpoint(dirpath=tmp_path, monitor="val/loss", every_n_train_steps=5)
    for best in (at_validation, by_steps):
        best.on_train_batch_end(None, None, None, None, 0)
    assert calls == [by_steps]


def test_a_non_finite_validation_value_is_never_the_best(tmp_path) -> None:
    best = BestCheckpoint(dirpath=tmp_path, monitor="val/loss", mode="min", save_top_k=1)
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    assert not best.check_monitor_top_k(trainer, torch.tensor(math.nan))
    assert not best.check_monitor_top_k(trainer, torch.tensor(math.inf))
    assert best.check_monitor_top_k(trainer, torch.tensor(2.5))
    # Lightning's own would keep the NaN while it holds fewer than save_top_k checkpoints
    assert ModelCheckpoint(dirpath=tmp_path, monitor="val/loss").check_monitor_top_k(
        trainer, torch.tensor(math.nan)
    )
    # resumes find the state that checkpoints written with Lightning's class hold
    lightning = ModelCheckpoint(dirpath=tmp_path, monitor="val/loss", mode="min", save_top_k=1)
    assert best.state_key == lightning.state_key


def test_the_best_checkpoints_state_key_is_built_once(tmp_path, monkeypatch) -> None:
    """Lightning reads a callback's state key at every hook call; ModelCheckpoint renders it each time."""
    calls = []
    render = ModelCheckpoint._generate_state_key
    monkeypatch.setattr(
        ModelCheckpoint, "_generate_state_key", lambda s, **kw: calls.append(1) or render(s, **kw)
    )
    best = BestCheckpoint(dirpath=tmp_path, monitor="val/loss", mode="min", save_top_k=1)
    keys = {best.state_key for _ in range(5)}
    assert len(calls) == 1
    assert keys == {ModelCheckpoint(dirpath=tmp_path, monitor="val/loss", mode="min").state_key}
