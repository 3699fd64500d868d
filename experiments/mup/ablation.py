"""What costs μP against a tuned sp at width 128: μP with one of its pieces replaced by
sp's at a time, each arm at a few rates around its optimum, against sp at its own rates, on the
transfer study's set-up (lr_transfer.py: a 2-layer, 2-head GPT with an untied readout, 8 windows of
64 characters a step of tinyshakespeare, attnlab's AdamW, constant rate; base width 16).

    OMP_NUM_THREADS=1 python experiments/mup/ablation.py [--steps 500] [--seeds 0] [--width 128]
        [--arms ARM ...] [--cumulative PIECE ...] [--rates E ...] [--output-multipliers 0.5 2 ...]
        [--attention-multipliers 2 ...]
        [--data /work/shared/data/tinyshakespeare.txt] [--out experiments/mup/results/ablation_500]
    python experiments/mup/ablation.py --merge A.csv B.csv ... --out DIR

Arms (at the width, m = width / 16):
  sp                    the standard parametrisation
  mup                   attnlab's μP (attnlab.models.parametrization)
  mup, sp attn scale    μP with sp's 1/sqrt(d_head) attention scale (``model.attn_scale``) instead of
                        sqrt(base d_head)/d_head
  mup, queries not 0    μP without the zero-initialised queries
  mup, readout not 0    μP with the untied readout initialised as sp's (``model.init_std``), not at
                        zero (its logits still times 1/m)
  mup, hidden rate lr   μP with the hidden matrices trained at sp's rate lr, not lr/m
  mup, hidden init sp   μP with the hidden matrices initialised as sp's, not times m^-1/2
  mup, logits not 1/m   μP without the logits' 1/m (the readout still starts at zero)
  mup, logits xA        μP with the logits times A/m: an output multiplier A (``--output-multipliers``),
                        tuned at the base width (``--width 16``) as Yang et al. tune theirs
  mup, attention xA     μP with the attention scores times A (``--attention-multipliers``), likewise
  sp + mup's X          sp with one piece X of μP: every piece but X replaced (the converse arms)
  mup, sp's X, Y, ...   μP with the pieces X, Y, ... replaced by sp's (``--cumulative X Y ...``: one
                        arm with X, one with X and Y, ..., each at sp's and μP's rates)
The first two replacements are made while the model is built (``mock.patch`` of
``zero_queries`` and of the ``MUP`` role table), the others on the built model and its optimiser, each
a one-line change of what ``build_model`` and ``adamw`` made. The embedding rate is not a piece of
its own: μP and sp both train the embeddings, vectors and readout at lr (``MUP[ParamRole.embedding]``
is the identity), so what differs is the hidden matrices' rate relative to theirs, the hidden-rate
arms' subject.
Written to ``--out``: ``ablation.csv`` (every run, with its wall time) and ``ablation.md`` (per arm the
held-out loss at each rate, seed-mean, its best, and the difference from sp's best paired by seed:
its 95% bootstrap interval over the seeds and the paired t-test's p, ``attnlab.report.significance``).
``--merge`` writes them from the ``ablation.csv`` of several runs (lanes split by seed or arm).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from unittest import mock

import pandas as pd
import torch
from lr_transfer import (
    BASE_WIDTH,
    BATCH,
    HELD_OUT_WINDOWS,
    N_HEADS,
    SEQ,
    character_ids,
    next_char_loss,
    windows,
)

import attnlab.models.parametrization as parametrization
from attnlab.blocks import LMHead, MultiHeadAttention
from attnlab.models import build_model
from attnlab.report.significance import compare
from attnlab.schema.model import GPTConfig
from attnlab.schema.optim import AdamWConfig
from attnlab.tasks.optim import adamw

SP_RATES = [10, 9, 8]  # exponents of 2: a x2 grid around sp's 60-step optimum at width 128 (2^-10)
MUP_RATES = [7, 6, 5]  # and around μP's (2^-6 at every width)
# The pieces in which attnlab's μP differs from sp at a width other than the base, and the arm that
# replaces each one alone by sp's, with its rate exponents.
PIECES = {
    "attn scale": ("mup, sp attn scale", MUP_RATES),
    "queries": ("mup, queries not 0", MUP_RATES),
    "readout": ("mup, readout not 0", MUP_RATES),
    "hidden rate": ("mup, hidden rate lr", [9, 8, 7]),  # the hidden matrices m times faster: sp's rates
    "hidden init": ("mup, hidden init sp", MUP_RATES),
    "logits": ("mup, logits not 1/m", [8, 7, 6]),  # the readout's logits m times larger: a lower rate
}
ARMS = {"sp": SP_RATES, "mup": MUP_RATES} | {arm: rates for arm, rates in PIECES.values()}
ARMS |= {f"sp + mup's {piece}": SP_RATES for piece in PIECES}  # the converse: every piece sp's but one


def replaced(arm: str) -> frozenset[str]:
    """The pieces of μP that ``arm`` replaces by sp's (none for ``mup``; every one but X for
    "sp + mup's X"; X, Y, ... for "mup, sp's X, Y, ...")."""
    if arm.startswith("sp + mup's "):
        return frozenset(PIECES) - {arm.removeprefix("sp + mup's ")}
    if arm.startswith("mup, sp's "):
        return frozenset(arm.removeprefix("mup, sp's ").split(", "))
    return frozenset(piece for piece, (name, _) in PIECES.items() if name == arm)


def cumulative_arms(pieces: list[str]) -> list[str]:
    """μP with the first 1, 2, ... of ``pieces`` replaced by sp's: "mup, sp's logits", "mup, sp's
    logits, attn scale", ..."""
    return [f"mup, sp's {', '.join(pieces[:k])}" for k in range(1, len(pieces) + 1)]


@contextmanager
def build_patches(pieces: frozenset[str]):
    """The replacements made while the model is built: ``zero_queries`` and the readout's row of the
    ``MUP`` role table patched for the build."""
    with ExitStack() as stack:
        if "queries" in pieces:
            stack.enter_context(mock.patch.object(parametrization, "zero_queries", lambda attention: None))
        if "readout" in pieces:
            table = dict(parametrization.MUP)
            table[parametrization.ParamRole.readout] = parametrization.RoleScaling()
            stack.enter_context(mock.patch.object(parametrization, "MUP", table))
        yield


def multiplier(arm: str, piece: str) -> float | None:
    """A of an arm named "mup, <piece> xA" (piece ``logits`` or ``attention``); None for the others."""
    prefix = f"mup, {piece} x"
    return float(arm[len(prefix) :]) if arm.startswith(prefix) else None


def edit_built(arm: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer, lr: float) -> None:
    """The arm's change to the μP model and optimiser ``build_model`` and ``adamw`` made: the
    replaced pieces made after the build, and a multiplier arm's multiplier."""
    m, pieces = parametrization.width_multiplier(model.cfg), replaced(arm)
    if "hidden rate" in pieces:
        for group in optimizer.param_groups:  # the hidden matrices' group was at lr / m
            group["lr"] = lr
    if "hidden init" in pieces:
        with torch.no_grad():
            for weight in parametrization.hidden_matrices(model):
                weight.mul_(math.sqrt(m))  # undo μP's m^-1/2 (zero-initialised queries stay zero)
    if "logits" in pieces:
        lm_head(model).scale *= m  # 1/m back to 1
    if multiplier(arm, "logits") is not None:
        lm_head(model).scale *= multiplier(arm, "logits")  # 1/m to A/m
    if multiplier(arm, "attention") is not None:
        for module in model.modules():
            if isinstance(module, MultiHeadAttention):
                module.scale *= multiplier(arm, "attention")


def lm_head(model: torch.nn.Module) -> LMHead:
    return next(module for module in model.modules() if isinstance(module, LMHead))


def build_arm(arm: str, width: int, vocab: int, lr: float) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The arm's model and AdamW at ``width`` (from the current torch seed)."""
    cfg = GPTConfig(
        d_model=width,
        n_layers=2,
        n_heads=N_HEADS,
        vocab_size=vocab,
        max_seq_len=SEQ,
        dropout=0.0,
        tie_embeddings=False,
        parametrization="sp" if arm == "sp" else "mup",
        mup_base_width=BASE_WIDTH,
        attn_scale=1 / math.sqrt(width // N_HEADS) if "attn scale" in replaced(arm) else None,
    )
    with build_patches(replaced(arm)):
        model = build_model(cfg)
    optimizer = adamw(model, AdamWConfig(lr=lr, weight_decay=0.0), fused=False)
    if arm != "sp":
        edit_built(arm, model, optimizer, lr)
    return model, optimizer


def train_once(train, held_out, vocab: int, width: int, lr: float, arm: str, seed: int, steps: int) -> dict:
    """One run of ``arm``: its held-out loss after ``steps`` steps (NaN where it diverged)."""
    started = time.perf_counter()
    torch.manual_seed(seed)
    model, optimizer = build_arm(arm, width, vocab, lr)
    batches = torch.Generator().manual_seed(1000 + seed)
    for _ in range(steps):
        loss = next_char_loss(model, windows(train, BATCH, batches))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        held = next_char_loss(model, held_out).item()
    return {
        "arm": arm,
        "width": width,
        "seed": seed,
        "lr": lr,
        "held_out_loss": held if math.isfinite(held) else float("nan"),
        "wall_seconds": round(time.perf_counter() - started, 1),
    }


def exponent(rate: float) -> str:
    return f"2^{round(math.log2(rate))}"


def table(runs: pd.DataFrame) -> list[str]:
    """Per arm (``ARMS``' order, then the multiplier arms as first run) the seed-mean loss at each
    rate, the best on it, and that best against sp's, paired by seed at each one's best rate."""
    mean = runs.groupby(["arm", "lr"])["held_out_loss"].mean()
    by_seed = runs.set_index(["arm", "lr", "seed"])["held_out_loss"].sort_index()
    sp_rate = mean["sp"].idxmin() if "sp" in mean else None
    lines = [
        "| arm | rates | held-out loss at each rate | best rate | best loss | minus sp's best "
        "| 95% interval | p |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ran = set(runs["arm"])
    for arm in [a for a in ARMS if a in ran] + [a for a in dict.fromkeys(runs["arm"]) if a not in ARMS]:
        losses, best = mean[arm], mean[arm].idxmin()
        against = "| | |"  # no sp runs in this table: nothing to compare with
        if sp_rate is not None:
            c = compare(by_seed["sp", sp_rate].to_dict(), by_seed[arm, best].to_dict())
            against = (
                f"{losses.min() - mean['sp'].min():+.3f} | [{c.low:+.3f}, {c.high:+.3f}] | {c.p_value:.2g}"
            )
        lines.append(
            f"| {arm} | {', '.join(map(exponent, losses.index))} | {', '.join(f'{x:.3f}' for x in losses)} "
            f"| {exponent(best)} | {losses.min():.3f} | {against} |"
        )
    return lines


def write(runs: pd.DataFrame, out: Path, steps: int) -> None:
    """``ablation.csv`` and ``ablation.md`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    runs.to_csv(out / "ablation.csv", index=False)
    widths, seeds = sorted(runs["width"].unique()), sorted(runs["seed"].unique())
    timed = runs["wall_seconds"].dropna() if "wall_seconds" in runs else pd.Series(dtype=float)
    lines = [
        f"# μP's pieces at width {', '.join(map(str, widths))}, {steps} steps, seeds "
        f"{' '.join(map(str, seeds))} (seed-mean held-out loss, nats/char)",
        "",
        *table(runs),
        "",
        f"wall time: {timed.sum():.0f} s for the {len(timed)} of {len(runs)} runs that were timed, one torch "
        f"thread, torch {torch.__version__}",
    ]
    (out / "ablation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def arm_rates(
    named: list[str], output: list[float], attention: list[float], cumulative: list[str] = ()
) -> dict[str, list[int]]:
    """Each arm to run with its rate exponents: the named ones, then one per output and attention
    multiplier (at μP's rates), then μP with more and more of the ``cumulative`` pieces replaced by
    sp's (at sp's and μP's rates both: the optimum moves from one to the other)."""
    arms = {arm: ARMS[arm] for arm in named}
    arms |= {arm: SP_RATES + MUP_RATES for arm in cumulative_arms(list(cumulative))}
    arms |= {f"mup, logits x{a:g}": MUP_RATES for a in output}
    return arms | {f"mup, attention x{a:g}": MUP_RATES for a in attention}


def merge(paths: list[Path], out: Path, steps: int) -> int:
    """The tables of several lanes' ``ablation.csv`` (one width) written together into ``out``."""
    missing = [path for path in paths if not path.is_file()]
    if missing:
        print(
            f"--merge {missing[0]}: no such file; give ablation.csv files this script wrote", file=sys.stderr
        )
        return 2
    runs = pd.concat([pd.read_csv(path) for path in paths], ignore_index=True)
    if runs["width"].nunique() > 1:
        widths = sorted(runs["width"].unique().tolist())
        print(f"--merge: the runs are of widths {widths}; merge one width", file=sys.stderr)
        return 2
    write(runs, out, steps)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data/tinyshakespeare.txt"))
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument(
        "--arms", nargs="*", choices=list(ARMS), default=list(ARMS), help="none: multipliers only"
    )
    parser.add_argument("--output-multipliers", type=float, nargs="+", default=[], metavar="A")
    parser.add_argument("--attention-multipliers", type=float, nargs="+", default=[], metavar="A")
    parser.add_argument("--cumulative", nargs="+", choices=list(PIECES), default=[], metavar="PIECE")
    parser.add_argument("--rates", type=int, nargs="+", help="exponents e of 2^-e for every arm run")
    parser.add_argument("--merge", type=Path, nargs="+", help="write the tables of these ablation.csv")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "ablation_500")
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out, args.steps)
    if not args.data.is_file():
        print(f"--data {args.data}: no such file; give the path of tinyshakespeare.txt", file=sys.stderr)
        return 2
    arms = arm_rates(args.arms, args.output_multipliers, args.attention_multipliers, args.cumulative)
    ids, vocab = character_ids(args.data)
    split = int(0.9 * len(ids))  # as lr_transfer.py
    held_out = windows(ids[split:], HELD_OUT_WINDOWS, torch.Generator().manual_seed(0))
    rows = []
    for seed in args.seeds:
        for arm, exponents in arms.items():
            for e in args.rates or exponents:
                rows.append(
                    train_once(ids[:split], held_out, vocab, args.width, 2.0**-e, arm, seed, args.steps)
                )
                print(rows[-1], flush=True)
    write(pd.DataFrame(rows), args.out, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
