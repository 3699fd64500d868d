"""task=distill: the loss against the formula worked out by hand, the positions each objective
distils, and a teacher that stays frozen, out of the checkpoint and inside the throughput count."""

from __future__ import annotations

import math

import pytest
import torch
from test_tasks_losses import SIZES, lm_batch, mlm_batch, s2s_batch, task_for

from attnlab.schema.optim import AdamWConfig
from attnlab.schema.task import DistillTask
from attnlab.tasks import TASK_CLASSES, build_task
from attnlab.tasks.distill import distillation_loss
from attnlab.tasks.distill import distilled as student_class


def test_loss_equals_the_formula_on_a_case_worked_by_hand():
    # One row, two classes: the student is uniform, the teacher gives 3:1 odds; label 0.
    student = torch.tensor([[0.0, 0.0]])
    teacher = torch.tensor([[math.log(3.0), 0.0]])
    labels = torch.tensor([0])
    # T = 2: teacher_T = softmax([ln 3 / 2, 0]) = [sqrt3, 1] / (1 + sqrt3); student_T = [1/2, 1/2].
    p = [math.sqrt(3) / (1 + math.sqrt(3)), 1 / (1 + math.sqrt(3))]
    kl = p[0] * math.log(p[0] / 0.5) + p[1] * math.log(p[1] / 0.5)  # 0.036346
    ce = math.log(2.0)  # -log(1/2)
    expected = 0.25 * 4 * kl + 0.75 * ce  # alpha * T^2 * KL + (1 - alpha) * CE = 0.556201
    loss = distillation_loss(student, teacher, labels, alpha=0.25, temperature=2.0)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx(0.556201, abs=1e-6)


def test_loss_ends_are_the_hard_and_the_soft_term():
    g = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(5, 7, generator=g), torch.randn(5, 7, generator=g)
    labels = torch.randint(0, 7, (5,), generator=g)
    hard = distillation_loss(student, teacher, labels, alpha=0.0, temperature=3.0)
    assert hard.item() == pytest.approx(torch.nn.functional.cross_entropy(student, labels).item(), rel=1e-6)
    same = distillation_loss(teacher, teacher, labels, alpha=1.0, temperature=3.0)
    assert same.item() == pytest.approx(0.0, abs=1e-6)  # KL of a distribution with itself
    # The KL term, rows averaged, scaled by T^2, against the sum written out.
    t = 3.0
    p, q = (teacher / t).softmax(-1).double(), (student / t).softmax(-1).double()
    kl = (p * (p.log() - q.log())).sum(-1).mean().item()
    soft = distillation_loss(student, teacher, labels, alpha=1.0, temperature=t)
    assert soft.item() == pytest.approx(t * t * kl, rel=1e-5)


def distilled(model, teacher_model, objective: str, **task_kw):
    """The distill task of ``objective`` over ``model``, taught by the plain task over ``teacher_model``."""
    teacher = task_for(teacher_model, objective, **task_kw)
    cfg = DistillTask(teacher="teacher.ckpt", objective=objective, alpha=1.0, temperature=2.0, **task_kw)
    return build_task(cfg, AdamWConfig(schedule="constant"), model, max_steps=10, teacher=teacher), teacher


def soft_term(student: torch.Tensor, teacher: torch.Tensor, t: float = 2.0) -> float:
    """T^2 * mean over rows of KL(teacher_T || student_T), written out."""
    p, q = (teacher.double() / t).softmax(-1), (student.double() / t).softmax(-1)
    return t * t * (p * (p.log() - q.log())).sum(-1).mean().item()


def scored_rows(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return logits[labels != -100]


def test_causal_lm_distils_every_labelled_position(tiny_model):
    student, teacher = tiny_model("gpt", **SIZES), tiny_model("gpt", **{**SIZES, "init_std": 0.5})
    task, _ = distilled(student, teacher, "causal_lm")
    batch = lm_batch()
    logits, _labels = task.scored_logits(batch)
    assert logits.shape[0] == (batch["labels"] != -100).sum() == 3 * 7 - 3  # all but the skipped prompt
    expected = soft_term(
        scored_rows(student(batch["input_ids"]), batch["labels"]),
        scored_rows(teacher(batch["input_ids"]), batch["labels"]),
    )
    assert task.training_loss(batch).item() == pytest.approx(expected, rel=1e-5)


def test_mlm_distils_the_masked_positions_only(tiny_model):
    student = tiny_model("bert", mlm_head=True, **SIZES)
    teacher = tiny_model("bert", mlm_head=True, **{**SIZES, "init_std": 0.5})
    task, _ = distilled(student, teacher, "mlm")
    batch = mlm_batch()
    _logits, labels = task.scored_logits(batch)
    assert labels.tolist() == [3, 9, 12]  # the three masked positions

    def masked(model):
        hidden = model(batch["input_ids"], batch["attention_mask"])
        return model.mlm_logits(hidden[batch["labels"] != -100])

    assert task.training_loss(batch).item() == pytest.approx(
        soft_term(masked(student), masked(teacher)), rel=1e-5
    )


def test_seq2seq_distils_the_target_positions(tiny_model):
    student, teacher = tiny_model("seq2seq", **SIZES), tiny_model("seq2seq", **{**SIZES, "init_std": 0.5})
    task, _ = distilled(student, teacher, "seq2seq", label_smoothing=0.0)
    batch = s2s_batch()
    _logits, labels = task.scored_logits(batch)
    assert labels.numel() == 5 + 3  # the second target is padded after 3 tokens

    def targets(model):
        out = model(batch["src_ids"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
        return scored_rows(out, batch["labels"])

    assert task.training_loss(batch).item() == pytest.approx(
        soft_term(targets(student), targets(teacher)), rel=1e-5
    )


def test_classification_distils_the_class_logits(tiny_model):
    student = tiny_model("vit", num_classes=3, **SIZES)
    teacher = tiny_model("vit", num_classes=3, **{**SIZES, "init_std": 0.5})
    task, _ = distilled(student, teacher, "classification")
    batch = {
        "pixel_values": torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(4)),
        "labels": torch.tensor([0, 1, 2, 1]),
    }
    logits, _labels = task.scored_logits(batch)
    assert logits.shape == (4, 3)
    expected = soft_term(student(batch["pixel_values"]), teacher(batch["pixel_values"]))
    assert task.training_loss(batch).item() == pytest.approx(expected, rel=1e-5)


def test_teacher_is_frozen_in_eval_mode_and_left_out_of_the_checkpoint(tiny_model):
    student, teacher_model = tiny_model("gpt", **SIZES), tiny_model("gpt", **SIZES, dropout=0.5)
    teacher = task_for(teacher_model, "causal_lm").train()  # in train mode until it teaches
    cfg = DistillTask(teacher="teacher.ckpt", objective="causal_lm")
    task = build_task(cfg, AdamWConfig(), student, max_steps=10, teacher=teacher)
    assert isinstance(task, student_class(TASK_CLASSES["causal_lm"]))
    task.train()
    task.training_loss(lm_batch()).backward()
    assert not teacher.training and not teacher_model.training
    assert all(p.grad is None and not p.requires_grad for p in teacher_model.parameters())
    assert all(p.grad is not None for p in student.parameters() if p.requires_grad)
    assert {id(p) for p in task.parameters()} == {id(p) for p in student.parameters()}
    assert all(key.startswith(("model.", "metrics.")) for key in task.state_dict())
    assert task.hparams["task"]["name"] == "causal_lm"  # loads as a plain causal LM


def test_throughput_counts_the_teachers_forward(tiny_model):
    student, teacher_model = tiny_model("gpt", **SIZES, n_layers=1), tiny_model("gpt", **SIZES)
    task, teacher = distilled(student, teacher_model, "causal_lm")
    batch = lm_batch()
    own, theirs, work = (
        task_for(student, "causal_lm").batch_work(batch),
        teacher.batch_work(batch),
        task.batch_work(batch),
    )
    assert (work.tokens, work.samples) == (own.tokens, own.samples)
    assert work.flops == pytest.approx(
        own.flops + theirs.flops / 3
    )  # forward: 2 of the 6 FLOPs per parameter
