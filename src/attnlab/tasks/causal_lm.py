"""Causal language modelling: predict every next token; loss and perplexity."""

from __future__ import annotations

from torch import Tensor, nn

from attnlab.tasks.base import TaskModule, count_labels, labelled


class CausalLMTask(TaskModule):
    """Batches hold ``input_ids`` (B, T) and ``labels`` (B, T), the next tokens (-100: ignored), and
    packed documents their ``document_ids`` (B, T) (``data.packing=documents``)."""

    reports_perplexity = True

    def logits(self, batch: dict[str, Tensor]) -> Tensor:
        return self.model(
            batch["input_ids"],
            attention_mask=batch.get("attention_mask"),
            document_ids=batch.get("document_ids"),
        )

    def scored_logits(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Every position with a next token (padding, labelled -100, is not scored)."""
        return labelled(self.logits(batch), batch["labels"])

    def training_loss(self, batch: dict[str, Tensor]) -> Tensor:
        return self.cross_entropy(self.logits(batch), batch["labels"], self.task_cfg.label_smoothing)

    def evaluate(self, batch: dict[str, Tensor], metrics: nn.ModuleDict) -> None:
        labels = batch["labels"]
        metrics["loss"].update(self.cross_entropy(self.logits(batch), labels), weight=count_labels(labels))
