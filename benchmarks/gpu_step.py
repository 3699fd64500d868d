"""Parts (b) and (c) of ``benchmarks.gpu``: GPT-2 training steps and decoding, three models in one process.

(b) One GPT-2 configuration as three models with the same weights: attnlab's (mapped from the
Hugging Face one), nanoGPT's ``model.py`` (imported from ``NANOGPT_DIR``; without it, the
hand-written nanoGPT-style model of ``benchmarks/nanogpt.py``) and Hugging Face's
``GPT2LMHeadModel``. Each trains with fused AdamW under bf16 autocast (on a GPU), eager and then
``torch.compile``d, the models taking turns (the order reversed every round). Reported per model:
tokens/s, MFU (FLOPs per token ``6 N + 12 L T d`` as nanoGPT's ``estimate_mfu`` counts them, over a
measured bf16 matmul peak) and peak memory: the parameters and optimizer state it holds plus the
largest growth of allocated memory during one of its steps (so the other models held at the same
time do not count).

(c) Greedy decoding of gpt2-small dimensions from an 8-token prompt, attnlab's ``generate`` (KV
cache) against Hugging Face's ``generate``, same weights, never stopping early.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.generate import generate
from benchmarks import models
from benchmarks.common import interleaved
from benchmarks.mfu import matmul_flops
from benchmarks.models import GPTSize

# GPT-2 124M as nanoGPT trains it (vocab padded to 50304), and a CPU smoke-test size.
GPT2_124M = GPTSize("gpt2-124M", 12, 12, 768, 1024, 12, vocab=50304)
GPT2_TINY = GPTSize("gpt2-tiny", 1, 2, 32, 32, 2, vocab=64)
PROMPT_LEN = 8


@dataclass
class StepFigures:
    """One model in one mode: tokens/s per round, its MFU and peak memory (NaN where not measured)."""

    tok_s: list[float]
    mfu: float
    peak_gib: float


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def nanogpt_model(size: GPTSize, hf: nn.Module, nanogpt_dir: Path | None) -> nn.Module:
    """nanoGPT's GPT (bias=True, dropout 0) with the Hugging Face model's weights, as its
    ``from_pretrained`` copies them (``models.nanogpt_own``); the nanoGPT-style model of
    benchmarks/nanogpt.py without a checkout."""
    own = models.nanogpt_own(size, hf, nanogpt_dir) if nanogpt_dir is not None else None
    return own if own is not None else models.nanogpt_like(size, hf)


def losses(size: GPTSize, device: str, nanogpt_dir: Path | None) -> dict[str, tuple[nn.Module, Callable]]:
    """{name: (model, loss function)} of the three models on one fixed batch, on ``device``."""
    hf = models.hf_gpt2(size)
    ours = models.twin(hf)
    nano = nanogpt_model(size, hf, nanogpt_dir)
    ids, labels = (t.to(device) for t in models.gpt_batch(size))

    def ce(logits: Tensor) -> Tensor:
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten())

    def nano_loss(m: nn.Module) -> Tensor:  # nanoGPT's own loss; benchmarks/nanogpt.py returns logits
        return m(ids, labels)[1] if nanogpt_dir is not None else ce(m(ids))

    return {
        "attnlab": (ours.to(device), lambda m: ce(m(ids))),
        "nanoGPT": (nano.to(device), nano_loss),
        "HF": (hf.to(device), lambda m: ce(m(input_ids=ids).logits)),
    }


def check_same_loss(contenders: dict[str, tuple[nn.Module, Callable]], tol: float) -> dict[str, float]:
    """The first loss of each model; ValueError if they differ by more than ``tol`` (not the same work).
    nanoGPT's exact GELU against GPT-2's tanh approximation moves the loss a little."""
    with torch.no_grad():
        first = {name: float(loss(model)) for name, (model, loss) in contenders.items()}
    if max(first.values()) - min(first.values()) > tol:
        raise ValueError(f"the three GPT-2 models' first losses differ by more than {tol}: {first}")
    return first


class Stepper:
    """``steps`` fused-AdamW training steps of ``model`` per call (synchronised at the end); on CUDA
    it records the largest growth of allocated memory within a call, once the optimizer has its state
    (the first call allocates it, and ``held_bytes`` counts it)."""

    def __init__(self, model: nn.Module, loss: Callable, device: str, bf16: bool, steps: int) -> None:
        self.model, self.loss, self.device, self.bf16, self.steps = model, loss, device, bf16, steps
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
        self.growth = 0

    def __call__(self) -> None:
        measured = self.device == "cuda" and bool(self.optimizer.state)  # not the call that makes the state
        if measured:
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        for _ in range(self.steps):
            with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.bf16):
                value = self.loss(self.model)
            value.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        synchronize(self.device)
        if measured:
            self.growth = max(self.growth, torch.cuda.max_memory_allocated() - base)


def held_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the parameters and the optimizer's state between steps."""
    tensors = list(model.parameters())
    tensors += [t for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t)]
    return sum(t.numel() * t.element_size() for t in tensors)


def flops_per_token(size: GPTSize, model: nn.Module) -> float:
    """nanoGPT's estimate_mfu count: 6 N + 12 L T d, N the parameters without the position table."""
    n = sum(p.numel() for p in model.parameters()) - size.seq_len * size.d_model
    return 6 * n + 12 * size.n_layers * size.seq_len * size.d_model


def train_figures(
    size: GPTSize,
    device: str,
    nanogpt_dir: Path | None,
    modes: list[str],
    rounds: int,
    steps: int,
    warmup: int,
) -> tuple[dict[str, dict[str, StepFigures]], float, dict[str, float]]:
    """{mode: {model: figures}} for each of ``modes`` (eager, compiled), the matmul peak (FLOP/s) and
    the first losses."""
    bf16 = device == "cuda"
    peak = matmul_flops(8192, "cuda", torch.bfloat16, repeats=10) if bf16 else matmul_flops(256)
    contenders = losses(size, device, nanogpt_dir)
    first = check_same_loss(contenders, tol=0.05)
    flops = flops_per_token(size, contenders["HF"][0])
    results = {}
    for mode in modes:
        steppers = {
            name: Stepper(torch.compile(model) if mode == "compiled" else model, loss, device, bf16, steps)
            for name, (model, loss) in contenders.items()
        }
        times = interleaved(steppers, repeats=rounds, warmup=warmup)
        results[mode] = {}
        for name, seconds in times.items():
            tok_s = [steps * size.batch * size.seq_len / s for s in seconds]
            stepper = steppers[name]
            held = held_bytes(contenders[name][0], stepper.optimizer)
            peak_gib = (held + stepper.growth) / 2**30 if device == "cuda" else float("nan")
            mfu = 100 * flops * statistics.median(tok_s) / peak
            results[mode][name] = StepFigures(tok_s, mfu, peak_gib)
        del steppers
        if device == "cuda":
            torch.cuda.empty_cache()
    return results, peak, first


def decode_figures(
    size: GPTSize, device: str, batches: tuple[int, ...], new_tokens: int, rounds: int
) -> dict[int, dict[str, list[float]]]:
    """{batch: {"attnlab"|"HF": tokens/s per round}}: greedy decoding, bf16 weights on a GPU."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    hf = models.hf_gpt2(size, seq_len=max(size.seq_len, PROMPT_LEN + new_tokens)).eval()
    hf.generation_config.eos_token_id = None  # decode every token asked for
    hf.generation_config.pad_token_id = 0
    ours = models.twin(hf).eval().to(device, dtype)
    hf = hf.to(device, dtype)
    results = {}
    for batch in batches:
        prompt = torch.randint(0, size.vocab, (batch, PROMPT_LEN), generator=torch.Generator().manual_seed(0))
        prompt = prompt.to(device)
        mask = torch.ones_like(prompt)

        def ours_call(prompt: Tensor = prompt) -> None:
            generate(ours, prompt, max_new_tokens=new_tokens, temperature=0)
            synchronize(device)

        def hf_call(prompt: Tensor = prompt, mask: Tensor = mask) -> None:
            with torch.no_grad():
                hf.generate(prompt, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False)
            synchronize(device)

        times = interleaved({"attnlab": ours_call, "HF": hf_call}, repeats=rounds, warmup=1)
        results[batch] = {name: [batch * new_tokens / s for s in seconds] for name, seconds in times.items()}
    return results
