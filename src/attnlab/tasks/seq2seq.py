"""Sequence to sequence: teacher-forced cross-entropy; greedy-decoded exact match, BLEU and chrF.

Training and the val/test losses use teacher forcing. At val/test, when a tokenizer is given
and ``task.eval_decode`` is on, each batch is also decoded greedily (the cached loop of
``attnlab.generate.seq2seq.greedy_tokens``, which ``attnlab.generate.greedy_decode`` runs too) and
scored against its references: exact match, and sacrebleu's corpus BLEU and chrF (0-100),
whose sufficient statistics are summed in torchmetrics states so that they add up across processes.
Where every forward is a collective (FSDP), every process decodes as many steps (``tasks.lockstep``).
"""

from __future__ import annotations

from functools import cached_property

import sacrebleu
import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric, Metric

from attnlab.generate.seq2seq import greedy_tokens
from attnlab.generate.threads import single_query_threads
from attnlab.schema import task
from attnlab.schema.data import IGNORE_INDEX
from attnlab.tasks.base import TASK_CLASSES, TaskModule, Work, flops_per_token
from attnlab.tasks.lockstep import largest_over_processes
from attnlab.tasks.losses import count_labels, labelled, token_hits


@TASK_CLASSES.builds(task.Seq2SeqTask)
class Seq2SeqTask(TaskModule):
    """Batches hold ``src_ids``, ``src_mask``, ``tgt_in`` (bos + target), ``tgt_mask`` and
    ``labels`` (target + eos, IGNORE_INDEX at padding)."""

    reports_perplexity = True

    @property
    def decodes(self) -> bool:
        return self.tokenizer is not None and self.task_cfg.eval_decode

    def build_metrics(self) -> dict[str, Metric]:
        metrics = {"loss": MeanMetric(), "acc": MeanMetric()}
        if self.decodes:
            metrics |= {
                "exact_match": MeanMetric(),
                "bleu": CorpusScore("bleu"),
                "chrf": CorpusScore("chrf"),
            }
        return metrics

    def scored_logits(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Every target position (padding, labelled IGNORE_INDEX, is not scored)."""
        return labelled(self.logits(batch), batch["labels"])

    def training_loss(self, batch: dict[str, Tensor]) -> Tensor:
        return self.cross_entropy(self.logits(batch), batch["labels"], self.task_cfg.label_smoothing)

    def evaluate(self, batch: dict[str, Tensor], metrics: nn.ModuleDict) -> None:
        logits, labels = self.logits(batch), batch["labels"]
        metrics["loss"].update(self.cross_entropy(logits, labels), weight=count_labels(labels))
        metrics["acc"].update(token_hits(logits, labels))
        if self.decodes:
            max_new = min(labels.shape[1] + 16, self.model.cfg.max_seq_len)
            tok = self.tokenizer
            with single_query_threads(self.model):  # one-query decoding steps on one CPU thread
                hyps = greedy_tokens(
                    self.model,
                    batch["src_ids"],
                    batch.get("src_mask"),
                    bos_id=tok.bos_id,
                    eos_id=tok.eos_id,
                    max_new_tokens=max_new,
                    pad_id=tok.pad_id,
                    in_step=largest_over_processes(self._trainer, self),
                )
            self.score_decoded(hyps, labels, metrics)

    def score_decoded(self, hyps: list[list[int]], labels: Tensor, metrics: nn.ModuleDict) -> None:
        """Exact match of token sequences (each without its eos); BLEU and chrF of their decoded texts."""
        eos = self.tokenizer.eos_id
        refs = [[t for t in _until(row, eos) if t != IGNORE_INDEX] for row in labels.tolist()]
        metrics["exact_match"].update(torch.tensor([float(h == r) for h, r in zip(hyps, refs)]))
        hyp_text = [self.tokenizer.decode(h) for h in hyps]
        ref_text = [self.tokenizer.decode(r) for r in refs]
        metrics["bleu"].update(hyp_text, ref_text)
        metrics["chrf"].update(hyp_text, ref_text)

    def batch_work(self, batch: dict[str, Tensor]) -> Work:
        """Encoder FLOPs over source tokens plus decoder FLOPs (self- and cross-attention) over target tokens."""
        (b, s), t = batch["src_ids"].shape, batch["tgt_in"].shape[1]
        cfg, d = self.model.cfg, self.model.cfg.d_model
        n_dec_layers = cfg.n_decoder_layers or cfg.n_layers
        enc = b * s * flops_per_token(self.n_encoder_params, cfg.n_layers, s, d)
        dec = b * t * flops_per_token(self.n_matmul_params - self.n_encoder_params, n_dec_layers, t + s, d)
        return Work(b * (s + t), b, enc + dec)

    @cached_property
    def n_encoder_params(self) -> int:
        return sum(p.numel() for p in self.model.encoder.parameters())


class CorpusScore(Metric):
    """sacrebleu's corpus BLEU or chrF: per-sentence statistics are summed here and scored at the end.

    The statistics (n-gram counts and lengths) are what ``sacrebleu.corpus_bleu`` sums
    internally, so the score equals sacrebleu's over the same sentences, on one or many processes.
    """

    full_state_update = False

    def __init__(self, name: str) -> None:
        super().__init__()
        self.scorer = sacrebleu.BLEU() if name == "bleu" else sacrebleu.CHRF()
        size = len(self.scorer._extract_corpus_statistics(["a"], [["a"]])[0])
        self.add_state("stats", default=torch.zeros(size, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, hypotheses: list[str], references: list[str]) -> None:
        rows = self.scorer._extract_corpus_statistics(hypotheses, [references])
        self.stats += torch.tensor(rows, dtype=torch.long, device=self.stats.device).sum(0)

    def compute(self) -> Tensor:
        return torch.tensor(self.scorer._compute_score_from_stats(self.stats.tolist()).score)


def _until(tokens: list[int], eos: int) -> list[int]:
    """The tokens before the first ``eos``."""
    return tokens[: tokens.index(eos)] if eos in tokens else tokens
