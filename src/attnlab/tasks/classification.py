"""Classification of texts (an encoder's pooled classifier) and images (ViT); accuracy and macro-F1."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric, Metric
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from attnlab.tasks.base import TaskModule, Work
from attnlab.tasks.callbacks import flops_per_token


class ClassificationTask(TaskModule):
    """Batches hold ``labels`` (B,) and either ``pixel_values`` (B, C, H, W) for a ViT or
    ``input_ids`` and ``attention_mask`` (B, T) (and optionally ``token_type_ids``) for an encoder."""

    def build_metrics(self) -> dict[str, Metric]:
        n = self.model.cfg.num_classes
        return {
            "loss": MeanMetric(),
            "acc": MulticlassAccuracy(n, average="micro"),
            "f1": MulticlassF1Score(n, average="macro"),
        }

    def logits(self, batch: dict[str, Tensor]) -> Tensor:
        if "pixel_values" in batch:
            return self.model(batch["pixel_values"])
        mask = batch.get("attention_mask")
        hidden = self.model(batch["input_ids"], mask, batch.get("token_type_ids"))
        return self.model.classify(hidden, mask)

    def training_loss(self, batch: dict[str, Tensor]) -> Tensor:
        return F.cross_entropy(
            self.logits(batch), batch["labels"], label_smoothing=self.task_cfg.label_smoothing
        )

    def evaluate(self, batch: dict[str, Tensor], metrics: nn.ModuleDict) -> None:
        logits, labels = self.logits(batch), batch["labels"]
        metrics["loss"].update(F.cross_entropy(logits, labels), weight=labels.shape[0])
        metrics["acc"].update(logits, labels)
        metrics["f1"].update(logits, labels)

    def batch_work(self, batch: dict[str, Tensor]) -> Work:
        if "pixel_values" not in batch:
            return super().batch_work(batch)
        cfg = self.model.cfg
        b, t = (
            batch["pixel_values"].shape[0],
            (cfg.image_size // cfg.patch_size) ** 2 + int(cfg.pooling == "cls"),
        )
        return Work(b * t, b, b * t * flops_per_token(self.n_matmul_params, cfg.n_layers, t, cfg.d_model))
