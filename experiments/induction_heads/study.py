"""Induction heads in a 2-layer decoder trained on repeated random segments (Olsson et al. 2022).

    python experiments/induction_heads/study.py --seed 0 --out experiments/induction_heads/results

Trains one seed on ``data.kind=repeated_segments`` (random letters whose end repeats a random segment of
random length; the loss is on the repeat after its first letter), evaluating every ``--eval-every`` steps
the loss on the repeat, the loss inside the first occurrence (random letters: nothing to learn) and every
head's induction score. On the trained model: every head's induction and previous-token scores,
activation patching of each head's output from clean sequences into ones whose first occurrence is
replaced by other letters (metric: minus the loss on the repeat), and zero and mean ablation of the
induction heads, of layer 0's previous-token heads and of every other head (the control), each group
together. Writes ``seed<N>.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import string
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import default_collate

from attnlab.data import build_datamodule
from attnlab.explain import ablate, patch_heads
from attnlab.explain.induction import induction_scores, previous_token_scores, repeats
from attnlab.models import build_model
from attnlab.schema.data import IGNORE_INDEX
from attnlab.schema.model import GPTConfig
from attnlab.schema.pos import pos_config
from attnlab.schema.synthetic_data import RepeatedSegmentsData
from attnlab.schema.task import CausalLMTask

INDUCTION = 0.3  # a head whose induction score reaches this is called an induction head
PREVIOUS = 0.3  # a layer-0 head whose previous-token score reaches this is called a previous-token head
LETTERS = len(string.ascii_lowercase)


@dataclass
class Size:
    """The study's model and training (every field is a flag of this script)."""

    d_model: int = 64
    n_heads: int = 4
    seq_len: int = 32
    batch_size: int = 32
    steps: int = 1000
    eval_every: int = 50
    lr: float = 1e-3
    eval_rows: int = 128
    pos: str = "rope"  # rotary: the heads formed sooner than with learned or T5-relative positions (README)
    d_ff: int = 0  # 0: attention-only layers (Olsson et al.'s smallest models)
    init_std: float = 0.1
    warmup: int = 100  # steps of linear learning-rate warm-up


def build(seed: int, size: Size) -> tuple[nn.Module, object]:
    """The seeded 2-layer decoder and the repeated-segments data module (set up)."""
    data = RepeatedSegmentsData(
        seq_len=size.seq_len, batch_size=size.batch_size, num_train=size.steps * size.batch_size, num_val=1024
    )
    model_cfg = GPTConfig(
        d_model=size.d_model,
        n_layers=2,
        n_heads=size.n_heads,
        dropout=0.0,
        max_seq_len=size.seq_len,
        pos=pos_config(size.pos),
        d_ff=size.d_ff,
        init_std=size.init_std,
    )
    dm = build_datamodule(data, needs=CausalLMTask.data_needs, seed=seed, model_cfg=model_cfg)
    dm.setup()
    model_cfg.vocab_size = dm.vocab_size
    torch.manual_seed(seed)
    return build_model(model_cfg), dm


def rows(dm: object, split: str, start: int, count: int) -> dict[str, Tensor]:
    """Rows ``start`` to ``start + count`` of a split as one batch."""
    dataset = dm.datasets[split]
    return default_collate([dataset[i] for i in range(start, start + count)])


def repeat_loss(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """The mean cross-entropy on the repeat (its tokens after the first: the labelled ones)."""
    logits = model.logits(batch)
    return F.cross_entropy(logits.transpose(1, 2), batch["labels"], ignore_index=IGNORE_INDEX)


def first_occurrence_loss(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """The mean cross-entropy of the first occurrence's tokens after its first (random: ln 26 at best)."""
    second, length = repeats(batch["labels"])
    ids = batch["input_ids"]
    targets = torch.full_like(ids, IGNORE_INDEX)
    for b, (s, n) in enumerate(zip(second.tolist(), length.tolist())):
        targets[b, s - n : s - 1] = ids[b, s - n + 1 : s]
    return F.cross_entropy(model.logits(batch).transpose(1, 2), targets, ignore_index=IGNORE_INDEX)


def corrupted(batch: dict[str, Tensor], letter_ids: Tensor, seed: int) -> dict[str, Tensor]:
    """The batch with each row's first occurrence replaced by other random letters."""
    generator = torch.Generator().manual_seed(seed)
    ids = batch["input_ids"].clone()
    second, length = repeats(batch["labels"])
    for b, (s, n) in enumerate(zip(second.tolist(), length.tolist())):
        ids[b, s - n : s] = letter_ids[torch.randint(LETTERS, (n,), generator=generator)]
    return {**batch, "input_ids": ids}


def evaluate(model: nn.Module, batch: dict[str, Tensor], step: int) -> dict:
    with torch.no_grad():
        scores = induction_scores(model, batch)
        return {
            "step": step,
            "repeat_loss": float(repeat_loss(model, batch)),
            "first_occurrence_loss": float(first_occurrence_loss(model, batch)),
            "induction_scores": scores.tolist(),
            "top_induction_score": float(scores.max()),
        }


def train(
    model: nn.Module, dm: object, size: Size, held_out: dict[str, Tensor], verbose: bool = False
) -> list[dict]:
    """AdamW on the repeat loss; the evaluations along the way (the first before any step)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=size.lr, weight_decay=0.0)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / size.warmup))
    curve = [evaluate(model.eval(), held_out, 0)]
    for step in range(1, size.steps + 1):
        model.train()
        loss = repeat_loss(model, rows(dm, "train", (step - 1) * size.batch_size, size.batch_size))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        warmup.step()
        if step % size.eval_every == 0:
            curve.append(evaluate(model.eval(), held_out, step))
            if verbose:
                point = curve[-1]
                print(
                    f"step {step}: repeat loss {point['repeat_loss']:.3f}, top induction score "
                    f"{point['top_induction_score']:.3f}",
                    flush=True,
                )
    return curve


def first_step(
    curve: list[dict], key: str, below: float | None = None, above: float | None = None
) -> int | None:
    """The first evaluated step whose ``key`` is below ``below`` (or above ``above``); None: never."""
    for point in curve:
        if (below is not None and point[key] < below) or (above is not None and point[key] >= above):
            return point["step"]
    return None


def head_name(layer: int, head: int) -> str:
    return f"layers.{layer}.attn_heads.{head}"


def analyse(model: nn.Module, dm: object, size: Size, seed: int) -> dict:
    """Scores, patching and ablations of the trained model on held-out rows."""
    batch = rows(dm, "val", 0, size.eval_rows)
    reference = [rows(dm, "val", size.eval_rows, size.eval_rows)]  # the means of mean ablation
    letter_ids = torch.tensor(dm.tokenizer.encode(string.ascii_lowercase))
    model.eval()
    with torch.no_grad():
        scores = induction_scores(model, batch)
        previous = previous_token_scores(model, batch)
    labels = batch["labels"]
    result = patch_heads(
        model,
        batch,
        corrupted(batch, letter_ids, seed),
        lambda logits: -F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=IGNORE_INDEX),
    )
    restored = result.restored().float()
    top_score = divmod(int(scores.argmax()), scores.shape[1])
    top_patch = divmod(int(restored.nan_to_num(-1e9).argmax()), restored.shape[1])
    heads = roles(scores, previous)
    strongest = restored.nan_to_num(-1e9).flatten().argsort(descending=True)[: len(heads["induction"])]
    patched = sorted(divmod(int(i), restored.shape[1]) for i in strongest)
    return {
        "induction_scores": scores.tolist(),
        "previous_token_scores": previous.tolist(),
        "patching_restored": restored.tolist(),
        "patching_clean": result.clean,
        "patching_corrupted": result.corrupted,
        "top_head_by_induction_score": list(top_score),
        "top_head_by_patching": list(top_patch),
        "same_top_head": top_score == top_patch,
        "top_heads_by_patching": [list(h) for h in patched],  # as many as there are induction heads
        "same_heads": sorted(heads["induction"]) == patched,
        "induction_heads": [list(h) for h in heads["induction"]],
        "previous_token_heads": [list(h) for h in heads["previous_token"]],
        "control_heads": [list(h) for h in heads["control"]],
        "ablation": ablations(model, batch, reference, heads),
    }


def roles(scores: Tensor, previous: Tensor) -> dict[str, list[tuple[int, int]]]:
    """The heads by role: induction heads (induction score >= INDUCTION; else the top one), layer 0's
    previous-token heads (previous-token score >= PREVIOUS), and the control heads: every head in
    neither role (their ablation shows what removing heads that are not the circuit costs)."""
    every = [(layer, h) for layer in range(scores.shape[0]) for h in range(scores.shape[1])]
    top = divmod(int(scores.argmax()), scores.shape[1])
    induction = [(layer, h) for layer, h in every if scores[layer, h] >= INDUCTION] or [top]
    previous_token = [
        (0, h) for h in range(scores.shape[1]) if previous[0, h] >= PREVIOUS and (0, h) not in induction
    ]
    control = [head for head in every if head not in induction and head not in previous_token]
    return {"induction": induction, "previous_token": previous_token, "control": control}


def ablations(
    model: nn.Module, batch: dict[str, Tensor], reference: list[dict[str, Tensor]], heads: dict[str, list]
) -> dict[str, dict]:
    """Zero and mean ablation of each role's heads together (None where a role has no head), and of
    each induction head alone: the loss on the repeat before and after."""

    def loss(b: dict[str, Tensor]) -> Tensor:
        return repeat_loss(model, b)

    out = {}
    for mode in ("zero", "mean"):
        together = {
            role: ablate(model, batch, loss, [head_name(*h) for h in group], mode, reference)
            if group
            else None
            for role, group in heads.items()
        }
        out[mode] = {
            "before": together["induction"].before,
            "induction_heads": together["induction"].together,
            "each_induction_head": together["induction"].after,
            "previous_token_heads": together["previous_token"].together
            if together["previous_token"]
            else None,
            "control_heads": together["control"].together if together["control"] else None,
        }
    return out


def run(seed: int, size: Size, verbose: bool = False) -> dict:
    """Train one seed and analyse it; every figure of the study for that seed."""
    start, cpu = time.perf_counter(), time.process_time()
    model, dm = build(seed, size)
    held_out = rows(dm, "val", 0, size.eval_rows)
    curve = train(model, dm, size, held_out, verbose)
    uniform = math.log(LETTERS)
    analysis = analyse(model, dm, size, seed)
    return {
        "seed": seed,
        "size": asdict(size),
        "threads": torch.get_num_threads(),
        "uniform_loss": uniform,
        "phase_change_step": first_step(curve, "repeat_loss", below=uniform / 2),
        "induction_step": first_step(curve, "top_induction_score", above=INDUCTION),
        "final_repeat_loss": curve[-1]["repeat_loss"],
        "final_first_occurrence_loss": curve[-1]["first_occurrence_loss"],
        "curve": curve,
        **analysis,
        "wall_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    for name, default in asdict(Size()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    args = parser.parse_args()
    size = Size(**{name: getattr(args, name) for name in asdict(Size())})
    result = run(args.seed, size, verbose=True)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"seed{args.seed}.json"
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(
        f"{path}: phase change at step {result['phase_change_step']}, top head "
        f"{result['top_head_by_induction_score']} (patching {result['top_head_by_patching']}), "
        f"{result['wall_s']:.0f} s"
    )


if __name__ == "__main__":
    main()
