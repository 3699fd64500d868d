"""One GPU, the engines of "Scaling out" in one script: ``python -m benchmarks.gpu_scaling [--smoke]``.

(1) GPT-2 124M at T 1024 (batch 12, bf16 autocast, fused AdamW) trained four ways, each timed in turns
    with nanoGPT's ``model.py`` (``NANOGPT_DIR``; without it ``benchmarks/nanogpt.py``) in one process
    (``benchmarks.gpu_step.train_figures``): eager, compiled whole, compiled layer by layer
    (``compile=block``) and layer by layer with torchao float8 projections. Per mode and model:
    tokens/s, MFU of the GPU's dense bf16 peak (the table ``attnlab-train`` logs with) and of a measured
    matmul peak, peak memory; and float8 ÷ bf16 per-block-compiled, whose issue target is 1.1x (at
    124M the matrix products are small: the figure says whether the casts pay for themselves).
(2) FSDP2 on one GPU, deterministic, gradient clipping on: 40 steps straight, and 20 steps resumed from
    ``last.ckpt`` to 40 (``benchmarks.gpu_fsdp2``): the largest difference of the loss and gradient norm
    over steps 21-40 (0 when the resume is exact).

Writes ``benchmarks/gpu_runs/<date>-<gpu>/scaling.json`` (``--out`` to choose) and prints it. About 6
minutes on one H100 (compilation included; budget: 8). ``--smoke`` runs the same on the CPU at tiny
sizes in a minute or two (float8 emulated, one resume of a tiny model): a check of the machinery, its
figures mean nothing. Async tensor parallel needs two GPUs or more: (3) is recorded as not measured on one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import torch

MODES = ["eager", "compiled", "layers", "layers+float8"]
# (2) at --smoke: a model small enough that three attnlab-train runs take seconds on a CPU
SMOKE_MODEL = ["model.n_layers=1", "model.d_model=32", "model.n_heads=2", "model.d_ff=64", "data.seq_len=32"]


def step_figures(smoke: bool, device: str, nanogpt_dir: Path | None, failures: list[str]) -> dict:
    """(1): {mode: {model: figures}} and the ratios the issue asks for."""
    from attnlab.training.callbacks.throughput import dense_peak
    from benchmarks import gpu_step

    size = gpu_step.GPT2_TINY if smoke else gpu_step.GPT2_124M
    rounds, steps, warmup = (2, 1, 1) if smoke else (5, 5, 2)
    results, measured_peak, first = gpu_step.train_figures(
        size, device, nanogpt_dir, MODES, rounds, steps, warmup, ("nanoGPT",), failures
    )
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else None
    peak = dense_peak(gpu, torch.bfloat16, tf32=True) if gpu else None
    modes = {}
    for mode, models in results.items():
        modes[mode] = {}
        for name, figures in models.items():
            tok_s = statistics.median(figures.tok_s)
            mfu_dense = 100 * figures.mfu * measured_peak / peak if peak else None
            modes[mode][name] = {**asdict(figures), "tok_s_median": tok_s, "mfu_dense_peak": mfu_dense}
    return {
        "size": asdict(size),
        "rounds": rounds,
        "steps_per_round": steps,
        "dense_bf16_peak_flops": peak,
        "measured_matmul_peak_flops": measured_peak,
        "first_losses": first,
        "modes": modes,
        "ratios": ratios(modes),
    }


def ratios(modes: dict) -> dict[str, float]:
    """attnlab's median tokens/s in one mode over another's, and over nanoGPT's in the same mode."""
    tok = {mode: models["attnlab"]["tok_s_median"] for mode, models in modes.items() if "attnlab" in models}
    out = {
        f"attnlab {mode} / nanoGPT": tok[mode] / models["nanoGPT"]["tok_s_median"]
        for mode, models in modes.items()
        if mode in tok and "nanoGPT" in models
    }
    for new, old in (("layers+float8", "layers"), ("layers+float8", "compiled"), ("layers", "compiled")):
        if new in tok and old in tok:
            out[f"attnlab {new} / {old}"] = tok[new] / tok[old]
    return out


def fsdp2_resume(smoke: bool, device: str, timeout: float) -> dict:
    """(2): the straight and the resumed run's largest differences over steps 21-40, and wall times."""
    from benchmarks import gpu_fsdp2

    extra = SMOKE_MODEL if smoke else []
    with tempfile.TemporaryDirectory(prefix="gpu-scaling-") as work:
        straight, halves = Path(work, "straight"), Path(work, "halves")
        steps = gpu_fsdp2.STEPS
        times = {
            "40 steps": gpu_fsdp2.train(straight, device, steps, extra, timeout),
            "20 steps": gpu_fsdp2.train(halves, device, steps // 2, extra, timeout),
            "resumed to 40": gpu_fsdp2.train(halves, device, steps, [*extra, "ckpt_path=last"], timeout),
        }
        diffs = {}
        for key in ("train/loss", "train/grad_norm"):
            a, b = gpu_fsdp2.logged(straight, key), gpu_fsdp2.logged(halves, key)
            resumed = [s for s in a if s > steps // 2 and s in b]
            diffs[key] = {"max_abs_diff": max(abs(a[s] - b[s]) for s in resumed), "steps": len(resumed)}
    return {"deterministic": True, "gradient_clip_val": 0.5, "max_difference": diffs, "wall_s": times}


def strict(value: object) -> object:
    """``value`` with NaN (a figure not measured, such as peak memory off CUDA) as None: strict JSON."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict(v) for v in value]
    return value


def default_out() -> Path:
    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    day = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    return Path("benchmarks/gpu_runs") / f"{day}-{'-'.join(name.lower().split())}" / "scaling.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU: a check, not a figure")
    parser.add_argument("--out", type=Path, default=None, help="the JSON file (default: under gpu_runs/)")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per attnlab-train run")
    args = parser.parse_args(argv)
    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run it on a GPU, or check it here with --smoke")
        return 2
    nanogpt = os.environ.get("NANOGPT_DIR")
    start, failures = time.perf_counter(), []
    report = {
        "command": " ".join(
            ["python -m benchmarks.gpu_scaling", *(argv if argv is not None else sys.argv[1:])]
        ),
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu (smoke)",
        "torch": torch.__version__,
        "nanogpt": nanogpt or "benchmarks/nanogpt.py",
        "steps": step_figures(args.smoke, device, Path(nanogpt) if nanogpt else None, failures),
        "fsdp2_resume": fsdp2_resume(args.smoke, device, args.timeout),
        "async_tp": "not measured: needs 2+ GPUs (trainer=tp trainer.sequence_parallel=true "
        "trainer.async_tensor_parallel=true compile=block)",
        "failures": failures,
    }
    report["wall_s"] = time.perf_counter() - start
    out = args.out or default_out()
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(strict(report), indent=1, default=str, allow_nan=False)
    out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
