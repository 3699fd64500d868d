"""Masked language modelling (BERT): predict the tokens the data module masked; loss, perplexity, accuracy."""

from __future__ import annotations

from torch import Tensor, nn
from torchmetrics import MeanMetric, Metric

from attnlab.schema import task
from attnlab.schema.data import IGNORE_INDEX
from attnlab.schema.model import ModelConfig
from attnlab.tasks.base import TASK_CLASSES, TaskModule
from attnlab.tasks.losses import count_labels, token_hits


@TASK_CLASSES.builds(task.MaskedLMTask)
class MaskedLMTask(TaskModule):
    """Batches hold ``input_ids``, ``attention_mask``, ``labels`` (IGNORE_INDEX where not predicted) and
    optionally ``token_type_ids``. The data module does BERT's 80/10/10 masking; the vocabulary
    projection runs on the predicted positions only (about 15% of them), not on every token.
    """

    reports_perplexity = True

    @classmethod
    def check_model(cls, model: ModelConfig, num_classes: int) -> None:
        """The encoder's masked-LM head."""
        if not model.mlm_head:
            raise ValueError("model.mlm_head=false: task.name='mlm' needs the encoder's masked-LM head")

    def build_metrics(self) -> dict[str, Metric]:
        return {"loss": MeanMetric(), "acc": MeanMetric()}

    def masked_logits(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Logits (N, V) and labels (N,) of the N predicted positions."""
        hidden = self.model(
            batch["input_ids"],
            batch.get("attention_mask"),
            batch.get("token_type_ids"),
            batch.get("document_ids"),
        )
        labels = batch["labels"]
        predicted = labels != IGNORE_INDEX
        return self.model.mlm_logits(hidden[predicted]), labels[predicted]

    def scored_logits(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """The masked positions only."""
        return self.masked_logits(batch)

    def training_loss(self, batch: dict[str, Tensor]) -> Tensor:
        logits, labels = self.masked_logits(batch)
        if labels.numel() == 0:  # nothing masked in this batch: a zero loss that keeps the graph
            return logits.sum()
        return self.cross_entropy(logits, labels, self.task_cfg.label_smoothing)

    def evaluate(self, batch: dict[str, Tensor], metrics: nn.ModuleDict) -> None:
        logits, labels = self.masked_logits(batch)
        if labels.numel() == 0:
            return
        metrics["loss"].update(self.cross_entropy(logits, labels), weight=count_labels(labels))
        metrics["acc"].update(token_hits(logits, labels))
