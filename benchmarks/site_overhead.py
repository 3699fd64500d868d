"""What the named activation sites cost when nothing is attached: a training step and a cached decode of
a GPT that has been named, recorded and released, against the same GPT never touched by
``attnlab.explain`` (and, to show the benchmark can see a cost, one with a no-op hook on every site).

    python -m benchmarks.site_overhead [--rounds 30] [--threads 1,2]

The three models are copies with the same weights, timed round-robin in one process (the order
reversed every round, ``benchmarks.common.interleaved``), at each thread count; each ratio is the
model's time over the untouched one's, min/median/max over the rounds (1.00: no cost).
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.explain.sites import activation_sites, hooked, recorded
from attnlab.generate import generate
from attnlab.models import build_model
from attnlab.schema.model import GPTConfig
from attnlab.schema.pos import pos_config
from benchmarks.common import interleaved, machine, spread

VOCAB, LENGTH, BATCH = 65, 128, 8
NEW_TOKENS = 32


def models() -> dict[str, nn.Module]:
    """The untouched GPT, a copy named and recorded once (hooks removed again), and a copy with a no-op
    hook on every site for as long as the benchmark runs."""
    torch.manual_seed(0)
    cfg = GPTConfig(
        vocab_size=VOCAB,
        max_seq_len=LENGTH + NEW_TOKENS,
        d_model=128,
        n_layers=4,
        n_heads=4,
        dropout=0.0,
        pos=pos_config("rope"),
    )
    untouched = build_model(cfg)
    named = copy.deepcopy(untouched)
    with torch.no_grad(), recorded(named, list(activation_sites(named))):
        named(torch.randint(VOCAB, (1, 8)))
    attached = copy.deepcopy(untouched)
    hooks = hooked(attached, {name: lambda x: None for name in activation_sites(attached)})
    hooks.__enter__()  # held for the process's life: this copy is the one with something attached
    return {"untouched": untouched, "named, released": named, "no-op hook on every site": attached}


def training_step(model: nn.Module, tokens: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        logits = model(tokens[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
        model.zero_grad(set_to_none=True)

    return step


def cached_decode(model: nn.Module, prompt: torch.Tensor) -> Callable[[], object]:
    return lambda: generate(model.eval(), prompt, max_new_tokens=NEW_TOKENS, temperature=0)


def ratios(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, tuple[float, float, float]]:
    """Each model's time over the untouched model's, per round: (min, median, max)."""
    times = interleaved(fns, repeats=rounds, warmup=2)
    base = times["untouched"]
    return {
        name: spread([t / b for t, b in zip(ts, base)]) for name, ts in times.items() if name != "untouched"
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", default=f"1,{torch.get_num_threads()}")
    args = parser.parse_args()
    built = models()
    tokens = torch.randint(VOCAB, (BATCH, LENGTH + 1))
    prompt = torch.randint(VOCAB, (1, LENGTH))
    for threads in dict.fromkeys(int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        print(f"\n{machine()}")
        for what, make in (
            ("training step", lambda m: training_step(m.train(), tokens)),
            ("cached decode", lambda m: cached_decode(m, prompt)),
        ):
            found = ratios({name: make(m) for name, m in built.items()}, args.rounds)
            for name, (low, mid, high) in found.items():
                print(
                    f"{what:14s} {threads} thread(s)  {name:26s} {mid:.3f}x untouched (min {low:.3f}, max {high:.3f})"
                )


if __name__ == "__main__":
    main()
