"""The eager floor of batch-1 greedy decoding: a hand-written loop over an attnlab GPT-2 twin's weights.

No modules, no checks, no options: per token only the ATen calls the arithmetic needs (embedding,
per layer a norm, the fused qkv product, an in-place write into a preallocated cache, SDPA, the output
projection, a norm, the MLP, two residual adds; then the final norm, the logits and an argmax). For a
small model at batch 1 the cost of a token is the per-call overhead of those ops, so no eager
framework can decode faster than this loop; ``generation`` reports it next to attnlab and HF
``generate`` so the distance to a target such as "3x HF" can be read as eager-reachable or not.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@torch.inference_mode()
def greedy_floor(model: nn.Module, prompt: Tensor, new_tokens: int) -> list[list[int]]:
    """Greedy tokens of ``model`` (an attnlab twin of Hugging Face GPT-2) after ``prompt`` (1, T)."""
    layers, heads = model.stack.layers, model.cfg.n_heads
    width = model.cfg.d_model
    head_dim, total = width // heads, prompt.shape[1] + new_tokens
    keys = [torch.empty(1, heads, total, head_dim) for _ in layers]
    values = [torch.empty(1, heads, total, head_dim) for _ in layers]
    tokens, positions = model.embed.tokens.weight, model.embed.pos.weight
    out: list[int] = []

    def step(x: Tensor, start: int) -> Tensor:
        """Hidden states (1, T, D) of the tokens at ``start..``; their keys/values go into the cache."""
        t, end = x.shape[1], start + x.shape[1]
        for i, layer in enumerate(layers):
            attn, ffn = layer.self_attn, layer.ffn
            h = F.layer_norm(x, (width,), attn.norm.weight, attn.norm.bias, attn.norm.eps)
            qkv = F.linear(h, attn.fn.qkv_proj.weight, attn.fn.qkv_proj.bias)
            qkv = qkv.view(1, t, 3 * heads, head_dim).transpose(1, 2)
            keys[i].narrow(2, start, t).copy_(qkv.narrow(1, heads, heads))
            values[i].narrow(2, start, t).copy_(qkv.narrow(1, 2 * heads, heads))
            y = F.scaled_dot_product_attention(
                qkv.narrow(1, 0, heads),
                keys[i].narrow(2, 0, end),
                values[i].narrow(2, 0, end),
                is_causal=t > 1,
            )
            x = x + F.linear(
                y.transpose(1, 2).reshape(1, t, width), attn.fn.out_proj.weight, attn.fn.out_proj.bias
            )
            h = F.layer_norm(x, (width,), ffn.norm.weight, ffn.norm.bias, ffn.norm.eps)
            mlp = ffn.fn
            x = x + F.linear(
                mlp.act(F.linear(h, mlp.fc_in.weight, mlp.fc_in.bias)), mlp.fc_out.weight, mlp.fc_out.bias
            )
        final = model.stack.final_norm
        return F.layer_norm(x[:, -1:], (width,), final.weight, final.bias, final.eps)

    x = F.embedding(prompt, tokens) + positions[: prompt.shape[1]]
    for t in range(prompt.shape[1], total):
        token = F.linear(step(x, t - x.shape[1]), model.lm_head.weight).argmax(-1)
        out.append(token)
        x = F.embedding(token, tokens) + positions[t]
    return [torch.cat(out, dim=1)[0].tolist()]
