"""Print the parity table of docs/parity.md: attnlab vs Hugging Face transformers, max abs differences.

Runs the cases of cases.py (held to 1e-5 by tests/models/test_hf_parity.py) (tiny random models, float32, eval mode, padded
batches) and prints one markdown row per output compared. Usage, from the repository root:

    .venv/bin/python experiments/parity/measure.py
"""

from __future__ import annotations

import os

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import cases as parity

from attnlab.schema.model import ModelConfig


def describe(cfg: ModelConfig) -> str:
    """The attnlab settings that make the architecture, in the words of the config."""
    parts = [f"family={cfg.family}", f"pos={cfg.pos.name}"]
    if cfg.pos.name == "sinusoidal":
        parts[-1] += f" ({cfg.pos.layout})"
    if getattr(cfg.pos, "rope_scaling", "none") != "none":
        parts[-1] += f" ({cfg.pos.rope_scaling} x{cfg.pos.rope_factor:g})"
    parts += [f"norm={cfg.norm}", "pre-norm" if cfg.norm_first else "post-norm", f"ffn={cfg.activation}"]
    lm_head = cfg.family in ("gpt", "seq2seq") or (cfg.family == "bert" and cfg.mlm_head)

    def setting(name: str, absent: object = False) -> object:  # each family's class has its own fields
        return getattr(cfg, name, absent)

    flags = {
        "embed_norm": setting("embed_norm"),
        "embed_scale": setting("embed_scale") is True,
        "bias=false": not cfg.bias,
        "tied": setting("tie_embeddings") and lm_head,
        "tied_output_scale": setting("tied_output_scale") and setting("tie_embeddings"),
        "lm_head_bias": setting("lm_head_bias"),
        f"type_vocab_size={setting('type_vocab_size', 0)}": setting("type_vocab_size", 0) > 0,
        f"attn_scale={cfg.attn_scale}": cfg.attn_scale is not None,
        f"n_kv_heads={cfg.n_kv_heads}/{cfg.n_heads}": cfg.n_kv_heads not in (None, cfg.n_heads),
        f"attn_window={cfg.attn_window}": cfg.attn_window is not None,
        "qk_norm": cfg.qk_norm,
    }
    return ", ".join(parts + [name for name, on in flags.items() if on])


@torch.no_grad()
def main() -> None:
    print(f"torch {torch.__version__}, transformers {parity.transformers.__version__}, float32, eval mode\n")
    print("| reference | our config | output | max abs difference | max abs value |")
    print("|---|---|---|---|---|")
    worst = 0.0
    for name in parity.CASES:
        result = parity.run(name)
        for output, (diff, scale) in result.diffs.items():
            print(f"| {name} | {describe(result.cfg)} | {output} | {diff:.1e} | {scale:.1f} |")
            worst = max(worst, diff)
    print(f"\nworst: {worst:.1e} (tolerance {parity.TOL:.0e})")


if __name__ == "__main__":
    main()
