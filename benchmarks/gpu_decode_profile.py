"""Where a compiled decoding step's time goes: ``python -m benchmarks.gpu_decode_profile [--device cpu --tiny]``.

On one H100, gpt2-small's compiled greedy decoding (static cache, CUDA graphs) reached 17% of its
bandwidth floor at batch 1: 0.98 ms a token where reading the fp32 weights takes 0.17 ms
(``benchmarks/results.md``). This prints the torch profiler's table of ``--tokens`` steps after a
warm-up (host and device time per operator, sorted by host time) and the wall time per token with
and without the profiler, so one short GPU call says whether the time is the host's (the loop,
dynamo's entry and guards, CUDA graph bookkeeping) or the device's.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from attnlab.generate import generate
from benchmarks import gpu_step, models


def per_token_ms(model: torch.nn.Module, prompt: torch.Tensor, tokens: int, device: str) -> float:
    """Milliseconds per new token of one compiled greedy decoding of ``tokens`` (after the prompt)."""
    start = time.perf_counter()
    generate(model, prompt, max_new_tokens=tokens, temperature=0, compile=True)
    gpu_step.synchronize(device)
    return 1e3 * (time.perf_counter() - start) / tokens


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_decode_profile", description=__doc__)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes: checks the machinery")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rows", type=int, default=25, help="operators shown")
    args = parser.parse_args(argv)
    size = gpu_step.GPT2_TINY if args.tiny else models.GPT2_SMALL
    hf = models.hf_gpt2(size, seq_len=max(size.seq_len, gpu_step.PROMPT_LEN + args.tokens)).eval()
    model = models.twin(hf).eval().to(args.device)
    prompt = torch.randint(
        0, size.vocab, (1, gpu_step.PROMPT_LEN), generator=torch.Generator().manual_seed(0)
    )
    prompt = prompt.to(args.device)
    per_token_ms(model, prompt, args.tokens, args.device)  # compiles, records the CUDA graphs
    plain = per_token_ms(model, prompt, args.tokens, args.device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    with profile(activities=activities) as prof:
        profiled = per_token_ms(model, prompt, args.tokens, args.device)
    print(f"{size.name}, batch 1, {args.tokens} tokens: {plain:.3f} ms per token ({profiled:.3f} profiled)")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
