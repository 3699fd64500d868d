"""Induction heads in a 2-layer decoder trained on repeated random segments (Olsson et al. 2022).

    python experiments/induction_heads/study.py --seed 0 --out experiments/induction_heads/results

Trains one seed on ``data.kind=repeated_segments`` (random letters whose end repeats a random segment of
random length; the loss is on the repeat after its first letter), evaluating every ``--eval-every`` steps
the loss on the repeat and every head's induction score. On the trained model: every head's induction
and previous-token scores; activation patching of each head's output from clean sequences into ones
whose first occurrence is replaced by other letters (metric: minus the loss on the repeat); zero and
mean ablation of the induction heads, of layer 0's previous-token heads and of every other head, each
group together; the same ablations of ``--controls`` random head sets of each group's size and layer,
so that a group is set against sets that could matter as much; and the K- and Q-composition scores of
every layer-1 head with every layer-0 head, read from the weights (Elhage et al. 2021). Writes
``seed<N>.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import string
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import default_collate

from attnlab.data import build_datamodule
from attnlab.explain import ablate, ablated, patch_heads
from attnlab.explain.ablation import site_means
from attnlab.explain.composition import composition_scores
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
    controls: int = 20  # random head sets of the induction set's size, ablated as a control


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
        "random_controls": random_controls(model, batch, reference, chosen_sets(scores, heads), size, seed),
        "k_composition": k_composition(model, size.seq_len, heads),
    }


def chosen_sets(scores: Tensor, heads: dict[str, list]) -> dict[str, list[tuple[int, int]]]:
    """The head sets whose ablation is set against random size-matched sets of their layer: the
    induction heads, layer 1's top half by induction score (which has controls even when every head
    of the layer is an induction head) and layer 0's previous-token heads (where there are any)."""
    sets = {
        "induction_heads": heads["induction"],
        "top_half_by_induction_score": top_heads(scores, 1, scores.shape[1] // 2),
        "previous_token_heads": heads["previous_token"],
    }
    return {name: group for name, group in sets.items() if group}


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


def control_sets(n_heads: int, chosen: list[tuple[int, int]], count: int, seed: int) -> tuple[str, list]:
    """``count`` random head sets of ``chosen``'s size from its layer, drawn without replacement: from the
    layer's other heads when they make ``count`` sets ("disjoint"), else from every set of the layer but
    ``chosen`` itself ("overlapping", as many as there are up to ``count``); ("none", []) when no set is
    left or ``chosen`` spans two layers."""
    layer, size = chosen[0][0], len(chosen)
    others = [(layer, h) for h in range(n_heads) if (layer, h) not in chosen]
    sets, kind = [list(c) for c in itertools.combinations(others, size)], "disjoint"
    if len(sets) < count:
        every = itertools.combinations([(layer, h) for h in range(n_heads)], size)
        sets, kind = [list(c) for c in every if sorted(c) != sorted(chosen)], "overlapping"
    if not sets or any(h[0] != layer for h in chosen):
        return "none", []
    return kind, random.Random(seed).sample(sets, min(count, len(sets)))


def top_heads(scores: Tensor, layer: int, count: int) -> list[tuple[int, int]]:
    """The ``count`` heads of ``layer`` with the highest scores."""
    return sorted((layer, int(h)) for h in scores[layer].argsort(descending=True)[:count])


def random_controls(
    model: nn.Module,
    batch: dict[str, Tensor],
    reference: list[dict[str, Tensor]],
    chosen: dict[str, list[tuple[int, int]]],
    size: Size,
    seed: int,
) -> dict[str, dict]:
    """For each chosen head set (by name), zero and mean ablation of random size-matched sets of its
    layer (``control_sets``) beside its own: the loss on the repeat with each set ablated, and where the
    chosen set ranks among them (``rank_among``)."""

    def loss(b: dict[str, Tensor]) -> Tensor:
        return repeat_loss(model, b)

    sites = [f"layers.{layer}.attn_heads" for layer in range(2)]
    means = {"zero": None, "mean": site_means(model, reference, sites)}
    out = {}
    for name, heads in chosen.items():
        kind, sets = control_sets(size.n_heads, heads, size.controls, seed)
        out[name] = {
            "heads": [list(h) for h in heads],
            "kind": kind,
            "sets": [[list(h) for h in s] for s in sets],
        }
        for mode, m in means.items():
            own = ablated(model, batch, loss, [head_name(*h) for h in heads], m)
            losses = [ablated(model, batch, loss, [head_name(*h) for h in s], m) for s in sets]
            rank, p = rank_among(own, losses)
            out[name][mode] = {"chosen": own, "controls": losses, "rank": rank, "p": p}
    return out


def rank_among(own: float, losses: list[float]) -> tuple[int, float]:
    """A chosen set's rank among its control sets by the loss their ablation leaves (1: highest), and
    the share of all sets, itself counted, that leave at least its loss (a permutation p-value)."""
    return 1 + sum(x > own for x in losses), (1 + sum(x >= own for x in losses)) / (1 + len(losses))


def k_composition(model: nn.Module, seq_len: int, heads: dict[str, list]) -> dict:
    """K-composition scores of every layer-1 head with every layer-0 head (``attnlab.explain.composition``):
    without rotation (offset 0) and averaged over the query-key distances 1 to ``seq_len - 1``; each
    induction head's top layer-0 partner by each, and whether it is a previous-token head."""
    plain = composition_scores(model, kind="k", offset=0)
    rotated = torch.stack([composition_scores(model, kind="k", offset=o) for o in range(1, seq_len)]).mean(0)
    previous = [h for _, h in heads["previous_token"]]
    out: dict = {"offset_0": plain.tolist(), "mean_over_offsets": rotated.tolist(), "partners": {}}
    out["q_composition_offset_0"] = composition_scores(model, kind="q").tolist()  # the other way to read
    for name, matrix in (("offset_0", plain), ("mean_over_offsets", rotated)):
        partners = {f"L{layer}H{h}": int(matrix[h].argmax()) for layer, h in heads["induction"] if layer == 1}
        out["partners"][name] = {
            head: {"layer_0_head": p, "is_previous_token_head": p in previous} for head, p in partners.items()
        }
    return out


def run(seed: int, size: Size, verbose: bool = False) -> dict:
    """Train one seed and analyse it; every figure of the study for that seed."""
    start, cpu = time.perf_counter(), time.process_time()
    model, dm = build(seed, size)
    untrained = composition_scores(model, kind="k").tolist()  # the scores' level before any learning
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
        "curve": curve,
        **analysis,
        "k_composition_untrained": untrained,
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
