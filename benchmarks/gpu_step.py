"""Parts (b) and (c) of ``benchmarks.gpu``: GPT-2 training steps and decoding, three models in one process.

(b) One GPT-2 configuration as three models with the same weights: attnlab's (mapped from the
Hugging Face one), nanoGPT's ``model.py`` (imported from ``NANOGPT_DIR``; without it, the
hand-written nanoGPT-style model of ``benchmarks/nanogpt/handwritten.py``) and Hugging Face's
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

import copy
import functools
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.generate import generate
from attnlab.models.flops import flops_per_token, matmul_params
from attnlab.models.speedups import compile_layers, convert_to_float8
from attnlab.tasks.losses import cross_entropy
from benchmarks import models
from benchmarks.common import interleaved
from benchmarks.mfu import matmul_flops
from benchmarks.models import GPTSize
from benchmarks.nanogpt.checkout import own_gpt
from benchmarks.nanogpt.handwritten import with_gpt2_weights

# GPT-2 124M as nanoGPT trains it (vocab padded to 50304), and a CPU smoke-test size.
GPT2_124M = GPTSize("gpt2-124M", 12, 12, 768, 1024, 12, vocab=50304)
GPT2_TINY = GPTSize("gpt2-tiny", 1, 2, 32, 32, 2, vocab=64)
PROMPT_LEN = 8
# The tiny CPU run's prompt: one token, the shape of every later step, so the compiled prefill shares
# most of the step's inductor kernels (each a g++ run on a cold cache); it checks the machinery only.
TINY_PROMPT_LEN = 1


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
    ``from_pretrained`` copies them (``nanogpt.checkout.own_gpt``); the nanoGPT-style model of
    ``benchmarks/nanogpt/handwritten.py`` without a checkout."""
    own = own_gpt(size, hf, nanogpt_dir) if nanogpt_dir is not None else None
    return own if own is not None else with_gpt2_weights(size, hf)


def losses(
    size: GPTSize, device: str, nanogpt_dir: Path | None, references: tuple[str, ...] = ("nanoGPT", "HF")
) -> dict[str, tuple[nn.Module, Callable]]:
    """{name: (model, loss function)} of attnlab's model and the ``references`` on one fixed batch, on
    ``device``."""
    hf = models.hf_gpt2(size)
    ours = models.twin(hf)
    nano = nanogpt_model(size, hf, nanogpt_dir)
    ids, labels = (t.to(device) for t in models.gpt_batch(size))

    def ce(logits: Tensor) -> Tensor:
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten())

    def nano_loss(m: nn.Module) -> Tensor:  # nanoGPT's own loss; the hand-written GPT returns logits
        return m(ids, labels)[1] if nanogpt_dir is not None else ce(m(ids))

    models_and_losses = {
        # attnlab-train's loss: compiled with the model (attnlab.tasks.losses.cross_entropy)
        "attnlab": (
            ours.to(device),
            lambda m, compiled=False: cross_entropy(m(ids), labels, compiled=compiled),
        ),
        "nanoGPT": (nano.to(device), nano_loss),
        "HF": (hf.to(device), lambda m: ce(m(input_ids=ids).logits)),
    }
    return {name: pair for name, pair in models_and_losses.items() if name == "attnlab" or name in references}


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


def step_flops_per_token(size: GPTSize, model: nn.Module) -> float:
    """nanoGPT's estimate_mfu count: 6 N + 12 L T d, N the parameters without the position table."""
    return flops_per_token(matmul_params(model), size.n_layers, size.seq_len, size.d_model)


def attnlab_variant(model: nn.Module, mode: str, device: str) -> nn.Module:
    """attnlab's model as ``mode`` runs it: itself (eager), compiled whole, compiled layer by layer,
    or layer by layer with float8 projections (emulated off a GPU: a smoke test, not a speed)."""
    if mode == "eager":
        return model
    if mode == "compiled":
        return torch.compile(model)
    variant = copy.deepcopy(model)
    if mode == "layers+float8":
        convert_to_float8(variant, emulate=device != "cuda")
    return compile_layers(variant)


def train_figures(
    size: GPTSize,
    device: str,
    nanogpt_dir: Path | None,
    modes: list[str],
    rounds: int,
    steps: int,
    warmup: int,
    references: tuple[str, ...] = ("nanoGPT", "HF"),
    failures: list[str] | None = None,
) -> tuple[dict[str, dict[str, StepFigures]], float, dict[str, float]]:
    """{mode: {model: figures}} for each of ``modes`` (``MODES``), the matmul peak (FLOP/s) and the first
    losses. The references take turns with attnlab in every mode: eager in "eager", compiled otherwise."""
    bf16 = device == "cuda"
    peak = matmul_flops(8192, "cuda", torch.bfloat16, repeats=10) if bf16 else matmul_flops(256)
    contenders = losses(size, device, nanogpt_dir, references)
    first = check_same_loss(contenders, tol=0.05)
    flops = step_flops_per_token(size, contenders["attnlab"][0])
    results = {}
    failures = failures if failures is not None else []
    compiled_refs = {
        name: torch.compile(model) for name, (model, _) in contenders.items() if name != "attnlab"
    }

    def run_as(name: str, model: nn.Module, mode: str) -> nn.Module:
        """How ``name``'s model runs in ``mode``: attnlab's variant, or a reference eager or compiled whole."""
        if name == "attnlab":
            return attnlab_variant(model, mode, device)
        return model if mode == "eager" else compiled_refs[name]

    def loss_as(name: str, loss: Callable, mode: str) -> Callable:
        """attnlab's loss is compiled when its model is, as attnlab-train does."""
        return functools.partial(loss, compiled=mode != "eager") if name == "attnlab" else loss

    for mode in modes:
        try:  # a mode that fails (float8 on an unsuited GPU or torchao) must not lose the others
            steppers = {
                name: Stepper(run_as(name, model, mode), loss_as(name, loss, mode), device, bf16, steps)
                for name, (model, loss) in contenders.items()
            }
            times = interleaved(steppers, repeats=rounds, warmup=warmup)
        except Exception as err:
            failures.append(f"(b) mode {mode} failed: {type(err).__name__}: {str(err).splitlines()[0][:300]}")
            continue
        results[mode] = {}
        for name, seconds in times.items():
            tok_s = [steps * size.batch * size.seq_len / s for s in seconds]
            stepper = steppers[name]
            held = held_bytes(stepper.model, stepper.optimizer)
            peak_gib = (held + stepper.growth) / 2**30 if device == "cuda" else float("nan")
            mfu = 100 * flops * statistics.median(tok_s) / peak
            results[mode][name] = StepFigures(tok_s, mfu, peak_gib)
        del steppers
        if device == "cuda":
            torch.cuda.empty_cache()
    return results, peak, first


@dataclass
class DecodeFigures:
    """Greedy decoding at one batch size: tokens/s per round of each contender, and how many of the
    first row's new tokens attnlab's compiled decoding shares with Hugging Face's before they differ."""

    tok_s: dict[str, list[float]]
    same_as_hf: int
    new_tokens: int
    weight_bytes: int  # what each step reads at least once: the bandwidth floor's numerator


DECODERS = ("attnlab", "attnlab compiled", "HF")


def decode_figures(
    size: GPTSize,
    device: str,
    batches: tuple[int, ...],
    new_tokens: int,
    rounds: int,
    dtype: torch.dtype,
    prompt_len: int = PROMPT_LEN,
) -> dict[int, DecodeFigures]:
    """{batch: figures}: greedy decoding of ``new_tokens`` after a ``prompt_len``-token prompt (8 unless
    the tiny run's) by attnlab's eager ``generate``, its compiled one (static cache; CUDA graphs on a
    GPU) and Hugging Face's ``generate``, the same weights in ``dtype``, taking turns. TF32 is off: the
    token comparison is of fp32 arithmetic."""
    hf = models.hf_gpt2(size, seq_len=max(size.seq_len, prompt_len + new_tokens)).eval()
    hf.generation_config.eos_token_id = None  # decode every token asked for
    hf.generation_config.pad_token_id = 0
    ours = models.twin(hf).eval().to(device, dtype)
    hf = hf.to(device, dtype)
    results = {}
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for batch in batches:
            prompt = torch.randint(
                0, size.vocab, (batch, prompt_len), generator=torch.Generator().manual_seed(0)
            )
            results[batch] = _decode_batch(ours, hf, prompt.to(device), new_tokens, rounds, device)
            results[batch].weight_bytes = sum(p.numel() * p.element_size() for p in ours.parameters())
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return results


def _decode_batch(
    ours: nn.Module, hf: nn.Module, prompt: Tensor, new_tokens: int, rounds: int, device: str
) -> DecodeFigures:
    outputs: dict[str, list[int]] = {}

    def attnlab_call(compile: bool) -> Callable[[], None]:
        def call() -> None:
            rows = generate(ours, prompt, max_new_tokens=new_tokens, temperature=0, compile=compile)
            outputs["attnlab compiled" if compile else "attnlab"] = rows[0]
            synchronize(device)

        return call

    def hf_call() -> None:
        with torch.no_grad():
            out = hf.generate(
                prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens, do_sample=False
            )
        outputs["HF"] = out[0, prompt.shape[1] :].tolist()
        synchronize(device)

    calls = {"attnlab": attnlab_call(False), "attnlab compiled": attnlab_call(True), "HF": hf_call}
    times = interleaved(calls, repeats=rounds, warmup=1)
    batch = prompt.shape[0]
    same = next(
        (i for i, (a, b) in enumerate(zip(outputs["attnlab compiled"], outputs["HF"])) if a != b), new_tokens
    )
    tok_s = {name: [batch * new_tokens / s for s in seconds] for name, seconds in times.items()}
    return DecodeFigures(tok_s, same, new_tokens, weight_bytes=0)


def copy_bandwidth(device: str, n_bytes: int = 2**30) -> float:
    """Bytes per second a device-to-device copy moves, reads and writes counted (the best of 10)."""
    if device != "cuda":
        return float("nan")
    source = torch.empty(n_bytes, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        target.copy_(source)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return 2 * n_bytes / best
