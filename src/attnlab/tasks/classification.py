"""Classification of texts (an encoder's pooled classifier) and images (ViT); accuracy and macro-F1."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric, Metric
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from attnlab.schema import task
from attnlab.schema.model import ModelConfig
from attnlab.tasks.base import TASK_CLASSES, TaskModule


@TASK_CLASSES.builds(task.ClassificationTask)
class ClassificationTask(TaskModule):
    """Batches hold ``labels`` (B,) and the model's input: ``pixel_values`` (B, C, H, W) for a ViT,
    ``input_ids`` and ``attention_mask`` (B, T) (and optionally ``token_type_ids``) for an encoder;
    the model's ``logits(batch)`` reads them."""

    @classmethod
    def check_model(cls, model: ModelConfig, num_classes: int) -> None:
        """A classifier of at least two classes, as many as the data's (when known)."""
        if model.num_classes < 2:
            raise ValueError(
                f"model.num_classes={model.num_classes}: classification needs at least 2 classes"
            )
        if num_classes and num_classes != model.num_classes:
            raise ValueError(
                f"model.num_classes={model.num_classes} does not match the data's {num_classes} classes"
            )

    def build_metrics(self) -> dict[str, Metric]:
        n = self.model.cfg.num_classes
        return {
            "loss": MeanMetric(),
            "acc": MulticlassAccuracy(n, average="micro"),
            "f1": MulticlassF1Score(n, average="macro"),
        }

    def scored_logits(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """The class logits of each example."""
        return self.logits(batch), batch["labels"]

    def training_loss(self, batch: dict[str, Tensor]) -> Tensor:
        return F.cross_entropy(
            self.logits(batch), batch["labels"], label_smoothing=self.task_cfg.label_smoothing
        )

    def evaluate(self, batch: dict[str, Tensor], metrics: nn.ModuleDict) -> None:
        logits, labels = self.logits(batch), batch["labels"]
        metrics["loss"].update(F.cross_entropy(logits, labels), weight=labels.shape[0])
        metrics["acc"].update(logits, labels)
        metrics["f1"].update(logits, labels)
