"""Scores of a synthetic task's answers on one batch: the answer-token loss (teacher-forced) and
whether each generated answer is exact, decoded greedily on the KV cache by ``attnlab.generate``.

The batch says which family it is for: a causal LM's row holds its prompt and answer in
``input_ids`` (the answer's labels are the only ones not ignored), an encoder-decoder's holds the
prompt as ``src_ids`` and the answer, closed by eos, as ``labels``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.generate import generate, greedy_decode
from attnlab.schema.data import IGNORE_INDEX
from attnlab.schema.pos import LearnedPos
from attnlab.tasks.causal_lm import exact_answers


@dataclass
class AnswerTotals:
    """Sums over the batches of one setting, and their means."""

    loss_sum: float = 0.0  # nats over every answer token
    tokens: int = 0
    exact: int = 0  # generated answers equal to the reference
    teacher_forced_exact: int = 0  # answers whose every token is the teacher-forced argmax
    examples: int = 0

    def means(self) -> dict[str, float]:
        return {
            "exact_match": self.exact / max(self.examples, 1),
            "answer_loss": self.loss_sum / max(self.tokens, 1),
            "teacher_forced_exact": self.teacher_forced_exact / max(self.examples, 1),
        }


@torch.inference_mode()
def add_batch(
    totals: AnswerTotals, model: nn.Module, batch: dict[str, Tensor], specials: dict[str, int]
) -> None:
    """Add one batch's loss and exact answers to ``totals`` (``specials``: pad, bos and eos ids)."""
    logits, labels = model.logits(batch), batch["labels"]
    totals.loss_sum += float(
        F.cross_entropy(
            logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX, reduction="sum"
        )
    )
    totals.tokens += int((labels != IGNORE_INDEX).sum())
    totals.teacher_forced_exact += int(exact_answers(logits, labels).sum())
    totals.examples += labels.shape[0]
    hits = (
        encoder_decoder_hits(model, batch, specials)
        if "src_ids" in batch
        else decoder_hits(model, batch, specials)
    )
    totals.exact += int(hits.sum())


def decoder_hits(model: nn.Module, batch: dict[str, Tensor], specials: dict[str, int]) -> Tensor:
    """(B,) bool: the greedy continuation of each row's prompt is its answer. The prompt ends where
    the first answer label is predicted, and as many tokens as the answer has are generated."""
    ids, labels = batch["input_ids"], batch["labels"]
    starts = (labels != IGNORE_INDEX).int().argmax(dim=1).tolist()
    prompts = [row[: start + 1].tolist() for row, start in zip(ids, starts)]
    answers = [[t for t in row[start:].tolist() if t != IGNORE_INDEX] for row, start in zip(labels, starts)]
    cfg = model.cfg
    # a learned table has no position past max_seq_len; the answer's last token needs none
    context = cfg.max_seq_len if isinstance(cfg.pos, LearnedPos) else None
    new = generate(
        model,
        prompts,
        max_new_tokens=max(len(a) for a in answers),
        temperature=0.0,
        pad_id=specials["pad"],
        max_context=context,
    )
    return torch.tensor([got[: len(want)] == want for got, want in zip(new, answers)])


def encoder_decoder_hits(model: nn.Module, batch: dict[str, Tensor], specials: dict[str, int]) -> Tensor:
    """(B,) bool: the greedy decoding of each source (up to its eos) is its answer."""
    labels = batch["labels"]
    refs = [until_eos(row, specials["eos"]) for row in labels.tolist()]
    hyps = greedy_decode(
        model,
        batch["src_ids"],
        src_mask=batch.get("src_mask"),
        bos_id=specials["bos"],
        eos_id=specials["eos"],
        max_new_tokens=labels.shape[1],
        pad_id=specials["pad"],
    )
    return torch.tensor([hyp == ref for hyp, ref in zip(hyps, refs)])


def until_eos(row: list[int], eos: int) -> list[int]:
    """A label row's answer: its tokens before eos (padding, IGNORE_INDEX, dropped)."""
    out = []
    for token in row:
        if token == eos:
            break
        if token != IGNORE_INDEX:
            out.append(token)
    return out
