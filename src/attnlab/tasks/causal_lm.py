"""Causal language modelling: predict every next token; loss, perplexity and bits per byte."""

from __future__ import annotations

import math

from torch import Tensor, nn
from torchmetrics import MeanMetric, Metric

from attnlab.schema import task
from attnlab.tasks.base import TASK_CLASSES, TaskModule, count_labels, labelled


@TASK_CLASSES.builds(task.CausalLMTask)
class CausalLMTask(TaskModule):
    """Batches hold ``input_ids`` (B, T) and ``labels`` (B, T), the next tokens (IGNORE_INDEX: ignored), and
    packed documents their ``document_ids`` (B, T) (``data.packing=documents``). Evaluation batches may
    hold ``label_bytes`` (B, T), the UTF-8 bytes of the text each label covers (0 where ignored): then
    ``bpb`` (bits per byte) is logged beside the loss, comparable across tokenizers."""

    reports_perplexity = True

    def scored_logits(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Every position with a next token (padding, labelled IGNORE_INDEX, is not scored)."""
        return labelled(self.logits(batch), batch["labels"])

    def training_loss(self, batch: dict[str, Tensor]) -> Tensor:
        return self.cross_entropy(self.logits(batch), batch["labels"], self.task_cfg.label_smoothing)

    def build_metrics(self) -> dict[str, Metric]:
        return {"loss": MeanMetric(), "bpb": MeanMetric()}

    def evaluate(self, batch: dict[str, Tensor], metrics: nn.ModuleDict) -> None:
        labels = batch["labels"]
        loss, count = self.cross_entropy(self.logits(batch), labels), count_labels(labels)
        metrics["loss"].update(loss, weight=count)
        if "label_bytes" in batch:
            update_bits_per_byte(metrics["bpb"], loss, count, batch["label_bytes"].sum())


def update_bits_per_byte(metric: MeanMetric, loss: Tensor, count: Tensor, n_bytes: Tensor) -> None:
    """Add a batch to ``metric``, the bits per byte of all batches so far: sum(nats) / ln 2 / sum(bytes).
    The batch's bits per byte (``loss`` is its mean over ``count`` tokens) weighted by its bytes makes
    the weighted mean exactly that ratio; a batch without bytes adds nothing (weight 0)."""
    value = loss.float() * count / n_bytes.clamp(min=1) / math.log(2)
    metric.update(value, weight=n_bytes)
