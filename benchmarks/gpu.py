"""The GPU benchmark, one table: ``python -m benchmarks.gpu [--tiny] [--device cpu] [--parts ...]``.

(a) ``recipe``: nanoGPT's shakespeare_char recipe end to end, ``attnlab-train
    experiment=nanogpt_shakespeare_char trainer=gpu`` against nanoGPT's ``train.py
    config/train_shakespeare_char.py``: wall time and best val loss (``benchmarks/gpu_recipe.py``).
(b) ``train``: GPT-2 124M (12 L, 12 H, d 768, T 1024, batch 12, vocab 50304, bf16 autocast, fused
    AdamW), eager and compiled: tokens/s, MFU of a measured bf16 matmul peak and peak memory, attnlab
    against nanoGPT's ``model.py`` and Hugging Face's GPT2LMHeadModel, built in one process and timed
    in turns (``benchmarks/gpu_step.py``).
(c) ``decode``: greedy decoding tokens/s, gpt2-small dimensions at batch 1 and 8, attnlab's
    ``generate`` against Hugging Face's ``generate``.

Ratios are attnlab ÷ reference, the median over rounds where the programs take turns. The
targets are in the table. Without CUDA it says so in one line; ``--device cpu --tiny`` runs all of it
on tiny shapes in seconds (a smoke test of the machinery: its figures mean nothing).

On a bare GPU machine (torch, Lightning and transformers installed; hydra-core, omegaconf, antlr4 and
wandb not), from the repository root:

    # here, once: the wheels attnlab needs beyond those, the text and nanoGPT, in git-ignored folders
    ../shared/tools/gpu-wheels.sh                       # hydra-core, omegaconf, antlr4 -> .whl/
    mkdir -p .gpubench && cp ../shared/data/tinyshakespeare.txt .gpubench/
    cp -r /path/to/nanoGPT .gpubench/nanoGPT            # a karpathy/nanoGPT checkout, never committed
    echo /.gpubench/ >> .git/info/exclude
    # there, with .whl and .gpubench carried along:
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD/src:$PWD
    NANOGPT_DIR=$PWD/.gpubench/nanoGPT python3 -m benchmarks.gpu --text .gpubench/tinyshakespeare.txt \
        --out benchmarks/gpu_results.md

First run on one H100 on 2026-11-27 (``benchmarks/results.md``, "On one H100"; the raw tables in
``benchmarks/gpu_runs/``): the recipe took 151 s against nanoGPT's 182 s, parts (b) and (c) about 4
minutes together. ``--parts train,decode`` leaves the recipe out, ``--recipe-steps 1000`` shortens it,
``--train-references nanoGPT`` skips compiling Hugging Face's model. Checked on a CPU with
``--device cpu --tiny``, also with hydra, omegaconf and antlr4 importable only from the wheels'
``--target`` folder and wandb and datasets not at all, as on such a machine.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import torch

from benchmarks.common import ROOT, machine, versions

REFERENCES = ("nanoGPT", "HF")
# (b)'s targets (tokens/s, MFU, peak memory), for the compiled step.
# (b)'s ways of running attnlab's model (benchmarks.gpu_step.attnlab_variant); their targets
MODES = ("eager", "compiled", "layers", "layers+float8")
TRAIN_TARGETS = {"eager": ("", "", ""), "compiled": ("≥ 1.0× nanoGPT", "≥ 45%", "≤ 1.1× nanoGPT")}
FORMATS = {
    "×": "{:.2f}×",
    "s": "{:.1f} s",
    "loss": "{:.4f}",
    "tok/s": "{:,.0f}",
    "%": "{:.1f}%",
    "GiB": "{:.2f} GiB",
}
COLUMNS = ("part", "measure", "configuration", "attnlab", *REFERENCES)
COLUMNS += (*(f"attnlab ÷ {r}" for r in REFERENCES), "target", "detail")


@dataclass
class GpuRow:
    """One measure: attnlab's value and the references' (NaN: not measured), and attnlab ÷ each."""

    part: str
    measure: str
    config: str
    unit: str
    values: dict[str, float]
    ratios: dict[str, float] = field(default_factory=dict)
    target: str = ""
    detail: str = ""


def median_ratio(ours: list[float], theirs: list[float]) -> float:
    """The median over rounds of ours ÷ theirs (each round's pair measured side by side)."""
    return statistics.median(o / t for o, t in zip(ours, theirs))


def text_ratio(values: dict[str, float]) -> dict[str, float]:
    return {r: values["attnlab"] / values[r] for r in REFERENCES if r in values and values[r] > 0}


# -- the three parts ----------------------------------------------------------------------------


# Each part imports its modules itself: without CUDA the command ends in one line, before transformers
# and torch.compile's modules are loaded.


def recipe_rows(args: argparse.Namespace, notes: list[str]) -> list[GpuRow]:
    from benchmarks import gpu_recipe

    steps = args.recipe_steps or (2 if args.tiny else 5000)
    with tempfile.TemporaryDirectory(prefix="gpubench-") as work:
        runs = {"attnlab": gpu_recipe.run_attnlab(args.text, Path(work), steps, args.tiny, args.timeout)}
        if args.nanogpt_dir is None:
            notes.append("(a) nanoGPT's train.py: not run (set NANOGPT_DIR to a karpathy/nanoGPT checkout)")
        else:
            try:  # attnlab's figures stand without nanoGPT's
                runs["nanoGPT"] = gpu_recipe.run_nanogpt(
                    args.nanogpt_dir, args.text, Path(work), steps, args.tiny, args.timeout
                )
            except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as err:
                notes.append(f"(a) nanoGPT's train.py failed: {str(err).splitlines()[0][:300]}")
    config = f"experiment=nanogpt_shakespeare_char, {steps} steps" + (
        ", tiny CPU shapes" if args.tiny else ""
    )
    wall = {name: run.wall_s for name, run in runs.items()}
    loss = {name: run.best_val for name, run in runs.items()}
    steps_text = ", ".join(f"{name} at step {run.best_step}" for name, run in runs.items())
    difference = (
        f"; attnlab - nanoGPT = {loss['attnlab'] - loss['nanoGPT']:+.4f}" if "nanoGPT" in loss else ""
    )
    for run in runs.values():
        notes.append(f"(a) {run.program}: {run.command}")
    return [
        GpuRow("a", "recipe wall time, start to exit", config, "s", wall, text_ratio(wall), "≤ 1.0× nanoGPT"),
        GpuRow(
            "a",
            "best val loss",
            config,
            "loss",
            loss,
            {},
            "within 0.01 of nanoGPT",
            f"{steps_text}{difference}; attnlab: whole val split, nanoGPT: mean of eval_iters random batches",
        ),
    ]


def train_rows(args: argparse.Namespace, notes: list[str]) -> list[GpuRow]:
    from benchmarks import gpu_step

    size = gpu_step.GPT2_TINY if args.tiny else gpu_step.GPT2_124M
    size = replace(size, batch=args.batch or size.batch, seq_len=args.seq_len or size.seq_len)
    rounds, steps, warmup = (
        args.rounds or (2 if args.tiny else 6),
        1 if args.tiny else 5,
        1 if args.tiny else 2,
    )
    failures: list[str] = []
    results, peak, first = gpu_step.train_figures(
        size,
        args.device,
        args.nanogpt_dir,
        args.modes,
        rounds,
        steps,
        warmup,
        tuple(args.train_references),
        failures,
    )
    notes += failures
    precision = "bf16 autocast" if args.device == "cuda" else "fp32"
    config = f"L{size.n_layers} H{size.n_heads} d{size.d_model} T{size.seq_len} B{size.batch} V{size.vocab}"
    config += f", {precision}, fused AdamW"
    peak_unit = "bf16" if args.device == "cuda" else "fp32"
    notes.append(
        f"(b) MFU is of a measured {peak_unit} matmul peak of {peak / 1e12:.3g} TFLOP/s; first losses "
        + ", ".join(f"{k} {v:.4f}" for k, v in first.items())
        + ("" if args.nanogpt_dir else "; nanoGPT = benchmarks/nanogpt/handwritten.py (NANOGPT_DIR not set)")
    )
    notes.append(
        "(b) modes: attnlab eager against eager references; compiled whole (torch.compile), compiled layer "
        "by layer (attnlab.models.speedups.compile_layers) and layer by layer with torchao float8 "
        "projections, each against the references compiled whole"
        + ("" if args.device == "cuda" else " (float8 emulated on the CPU: no speed)")
    )
    memory_detail = "parameters + optimizer state + the largest growth within a step"
    rows = []
    for mode, figures in results.items():
        speed, mfu, memory = TRAIN_TARGETS.get(mode, ("", "", ""))
        refs = [r for r in REFERENCES if r in figures]
        tok_s = {name: statistics.median(f.tok_s) for name, f in figures.items()}
        ratios = {r: median_ratio(figures["attnlab"].tok_s, figures[r].tok_s) for r in refs}
        detail = f"{rounds} rounds of {steps} steps, after {warmup} untimed"
        peak_gib = {n: f.peak_gib for n, f in figures.items()}
        rows += [
            GpuRow("b", f"{mode} step tokens/s", config, "tok/s", tok_s, ratios, speed, detail),
            GpuRow("b", f"{mode} MFU", config, "%", {n: f.mfu for n, f in figures.items()}, target=mfu),
            GpuRow(
                "b",
                f"{mode} peak memory",
                config,
                "GiB",
                peak_gib,
                text_ratio(peak_gib),
                memory,
                memory_detail if args.device == "cuda" else "CUDA only",
            ),
        ]
    if "compiled" in results and "layers+float8" in results:
        gain = median_ratio(results["layers+float8"]["attnlab"].tok_s, results["compiled"]["attnlab"].tok_s)
        notes.append(f"(b) attnlab layers+float8 ÷ compiled whole, tokens/s: {gain:.2f}× (target ≥ 1.1×)")
    return rows


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def decode_rows(args: argparse.Namespace, notes: list[str]) -> list[GpuRow]:
    from benchmarks import gpu_step
    from benchmarks.models import GPT2_SMALL

    size = gpu_step.GPT2_TINY if args.tiny else GPT2_SMALL
    new_tokens = args.new_tokens or (8 if args.tiny else 256)
    rounds = args.rounds or (2 if args.tiny else 5)
    prompt_len = gpu_step.TINY_PROMPT_LEN if args.tiny else gpu_step.PROMPT_LEN
    bandwidth = gpu_step.copy_bandwidth(args.device)
    if args.device == "cuda":
        notes.append(
            f"(c) device-to-device copy bandwidth {bandwidth / 1e12:.2f} TB/s (reads and writes counted)"
        )
    rows = []
    for dtype_name in args.decode_dtypes:
        results = gpu_step.decode_figures(
            size, args.device, tuple(args.decode_batches), new_tokens, rounds, DTYPES[dtype_name], prompt_len
        )
        for batch, figures in results.items():
            shape = (batch, prompt_len, new_tokens)
            rows += decode_batch_rows(size, shape, dtype_name, rounds, figures, bandwidth)
            notes.append(
                f"(c) {dtype_name}, batch {batch}: attnlab compiled and HF greedy tokens agree for "
                f"{figures.same_as_hf} of {figures.new_tokens} (row 0; TF32 off)"
            )
    return rows


def decode_batch_rows(size, shape, dtype_name, rounds, figures, bandwidth) -> list[GpuRow]:
    """Eager and compiled attnlab against HF at one (batch, prompt length, new tokens); the bandwidth
    floor's share in detail."""
    batch, prompt_len, new_tokens = shape
    config = f"L{size.n_layers} H{size.n_heads} d{size.d_model} V{size.vocab}, B{batch}, {dtype_name}"
    config += f", prompt {prompt_len} + {new_tokens} new, greedy"
    ceiling = batch * bandwidth / figures.weight_bytes  # tokens/s if each step only read the weights once
    rows = []
    for name in ("attnlab", "attnlab compiled"):
        speeds = figures.tok_s[name]
        values = {"attnlab": statistics.median(speeds), "HF": statistics.median(figures.tok_s["HF"])}
        detail = f"{rounds} rounds"
        if name == "attnlab compiled":
            gain = median_ratio(speeds, figures.tok_s["attnlab"])
            detail += f"; {gain:.2f}× eager"
            if math.isfinite(ceiling):
                detail += (
                    f"; {100 * values['attnlab'] / ceiling:.0f}% of the bandwidth floor {ceiling:,.0f} tok/s"
                )
        rows.append(
            GpuRow(
                "c",
                f"decoding tokens/s, batch {batch}, {'compiled' if 'compiled' in name else 'eager'}",
                config,
                "tok/s",
                values,
                {"HF": median_ratio(speeds, figures.tok_s["HF"])},
                "≥ 4× eager, ≥ 40% of floor" if name == "attnlab compiled" and batch == 1 else "",
                detail,
            )
        )
    return rows


PARTS = {"recipe": recipe_rows, "train": train_rows, "decode": decode_rows}


# -- the table ----------------------------------------------------------------------------------


def cell(x: float | None, unit: str) -> str:
    if x is None or math.isnan(x):
        return "—"
    return FORMATS.get(unit, "{:.3g} " + unit).format(x)


def table(rows: list[GpuRow]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        cells = [row.part, row.measure, row.config]
        cells += [cell(row.values.get(name), row.unit) for name in ("attnlab", *REFERENCES)]
        cells += [cell(row.ratios.get(r), "×") if r in row.ratios else "—" for r in REFERENCES]
        cells += [row.target, row.detail]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(rows: list[GpuRow], notes: list[str], command: str, started: str) -> str:
    header = [
        f"# GPU benchmark, {started}",
        "",
        f"Command: `{command}`",
        f"Machine: {machine()}; {versions()}",
        "",
    ]
    return "\n".join([*header, table(rows), "", *(f"- {n}" for n in notes), ""])


# -- the command --------------------------------------------------------------------------------


def default_text() -> Path:
    return Path(os.environ.get("TINYSHAKESPEARE") or ROOT.parent / "shared" / "data" / "tinyshakespeare.txt")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes: checks the machinery, not speed")
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated subset of {', '.join(PARTS)}"
    )
    parser.add_argument("--text", type=Path, default=default_text(), help="Tiny Shakespeare (for the recipe)")
    nanogpt = os.environ.get("NANOGPT_DIR")
    parser.add_argument("--nanogpt-dir", type=Path, default=Path(nanogpt) if nanogpt else None)
    parser.add_argument("--recipe-steps", type=int, help="the recipe's steps (default 5000; tiny 2)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds each recipe run may take")
    parser.add_argument("--batch", type=int, help="(b) batch size (default 12)")
    parser.add_argument("--seq-len", type=int, help="(b) sequence length (default 1024)")
    parser.add_argument(
        "--modes",
        type=lambda s: s.split(","),
        default=["eager", "compiled", "layers", "layers+float8"],
        help="(b) comma-separated: eager, compiled, layers, layers+float8 (default all)",
    )
    parser.add_argument(
        "--train-references",
        type=lambda s: [r for r in s.split(",") if r],
        default=list(REFERENCES),
        help="(b) the references timed beside attnlab: nanoGPT, HF or both (default)",
    )
    parser.add_argument(
        "--decode-dtypes",
        type=lambda s: s.split(","),
        default=["float32"],
        help="(c) comma-separated: float32, bfloat16 (default float32)",
    )
    parser.add_argument("--rounds", type=int, help="turns of each model (default 6 in (b), 5 in (c); tiny 2)")
    parser.add_argument("--new-tokens", type=int, help="(c) tokens decoded per call (default 256; tiny 8)")
    parser.add_argument("--decode-batches", type=lambda s: [int(b) for b in s.split(",")], default=[1, 8])
    parser.add_argument("--out", type=Path, help="also write the table (markdown) here")
    args = parser.parse_args(argv)
    unknown = [p for p in args.parts.split(",") if p not in PARTS]
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    if not args.modes or set(args.modes) - set(MODES):
        parser.error(f"--modes={','.join(args.modes)}: choose from {', '.join(MODES)}")
    if set(args.train_references) - set(REFERENCES):
        parser.error(
            f"--train-references={','.join(args.train_references)}: choose from {', '.join(REFERENCES)}"
        )
    if not args.decode_dtypes or set(args.decode_dtypes) - set(DTYPES):
        parser.error(f"--decode-dtypes={','.join(args.decode_dtypes)}: choose from {', '.join(DTYPES)}")
    if "recipe" in args.parts.split(",") and not args.text.is_file():
        parser.error(f"--text={args.text}: no such file (Tiny Shakespeare; or set TINYSHAKESPEARE)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            f"benchmarks.gpu: no CUDA device here (torch {torch.__version__}); nothing measured. "
            "A smoke run on tiny shapes: python -m benchmarks.gpu --device cpu --tiny"
        )
        return 2
    for key, value in (
        ("HF_HUB_OFFLINE", "1"),
        ("TRANSFORMERS_VERBOSITY", "error"),
        ("WANDB_MODE", "offline"),
    ):
        os.environ.setdefault(key, value)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # as nanoGPT's train.py sets it
        torch.backends.cudnn.allow_tf32 = True
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows, notes, failed = [], [], False
    for part in args.parts.split(","):
        torch.manual_seed(0)
        try:
            rows += PARTS[part](args, notes)
            if args.out:  # each part's figures are kept, should a later one run out of time
                args.out.write_text(report(rows, notes, "(partial) " + part, started), encoding="utf-8")
        except Exception as err:  # one broken part must not lose the others' figures
            traceback.print_exc()
            notes.append(f"part {part} failed: {type(err).__name__}: {str(err).splitlines()[0][:300]}")
            failed = True
    command = "python -m benchmarks.gpu " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(rows, notes, command.strip(), started)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
