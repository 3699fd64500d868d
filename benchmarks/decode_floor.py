"""The eager floor of batch-1 greedy decoding: a hand-written loop over an attnlab GPT-2 twin's weights.

No modules, no checks, no options: per token only the ATen calls the arithmetic needs (embedding,
per layer a norm, the fused qkv product, an in-place write into a preallocated cache, SDPA, the output
projection, a norm, the MLP, two residual adds; then the final norm, the logits and an argmax). For a
small model at batch 1 the cost of a token is the per-call overhead of those ops, so no eager
framework can decode faster than this loop; ``generation`` reports it next to attnlab and HF
``generate`` so the distance to a target such as "3x HF" can be read as eager-reachable or not.

``compiled_floor`` asks the same of ``torch.compile``: the same arithmetic, written with the static
shapes a compiled single-token step needs (a cache of the final length, written in place and masked),
compiled into one graph. Where it is not clearly faster than the eager floor, compiling a decoding
step (attnlab's or any framework's) buys nothing on that machine.
"""

from __future__ import annotations

from collections.abc import Callable

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


def compiled_floor(model: nn.Module, prompt: Tensor, new_tokens: int) -> Callable[[], list[list[int]]]:
    """``greedy_floor``'s arithmetic with static shapes, compiled by inductor: a decoder to call repeatedly.

    Is the eager floor a floor only for eager code? This answers it for ``torch.compile``, as a
    single-token step with a KV cache must be written for it: caches of the final length written in
    place at a position tensor (``index_copy_``), every step attending to the whole cache under a
    mask of the filled part, the prompt fed one token at a time, so that every call has the same
    shapes and one graph serves the whole decoding (``fullgraph=True``, ``dynamic=False``). The first
    call compiles (seconds); the benchmark's warm-up call pays it.
    """
    layers, heads = model.stack.layers, model.cfg.n_heads
    width = model.cfg.d_model
    head_dim, total = width // heads, prompt.shape[1] + new_tokens
    tokens, positions = model.embed.tokens.weight, model.embed.pos.weight
    columns = torch.arange(total)

    def step(token: Tensor, at: Tensor, keys: list[Tensor], values: list[Tensor]) -> Tensor:
        """The greedy next token (1, 1) after ``token`` (1, 1) at position ``at`` (1,); caches updated."""
        x = F.embedding(token, tokens) + F.embedding(at.view(1, 1), positions)
        filled = (columns <= at).view(1, 1, 1, total)
        for layer, k_cache, v_cache in zip(layers, keys, values):
            attn, ffn = layer.self_attn, layer.ffn
            h = F.layer_norm(x, (width,), attn.norm.weight, attn.norm.bias, attn.norm.eps)
            qkv = F.linear(h, attn.fn.qkv_proj.weight, attn.fn.qkv_proj.bias)
            q, k, v = qkv.view(1, 1, 3 * heads, head_dim).transpose(1, 2).split(heads, dim=1)
            k_cache.index_copy_(2, at, k)
            v_cache.index_copy_(2, at, v)
            y = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=filled)
            x = x + F.linear(
                y.transpose(1, 2).reshape(1, 1, width), attn.fn.out_proj.weight, attn.fn.out_proj.bias
            )
            h = F.layer_norm(x, (width,), ffn.norm.weight, ffn.norm.bias, ffn.norm.eps)
            mlp = ffn.fn
            x = x + F.linear(
                mlp.act(F.linear(h, mlp.fc_in.weight, mlp.fc_in.bias)), mlp.fc_out.weight, mlp.fc_out.bias
            )
        final = model.stack.final_norm
        x = F.layer_norm(x, (width,), final.weight, final.bias, final.eps)
        return F.linear(x, model.lm_head.weight).argmax(-1)

    compiled = torch.compile(step, fullgraph=True, dynamic=False)

    def given(i: int) -> Tensor:
        """Prompt token ``i`` as (1, 1), laid out as a step's output (a recompile otherwise)."""
        return prompt[:, i : i + 1].clone(memory_format=torch.contiguous_format)

    @torch.inference_mode()
    def decode() -> list[list[int]]:
        keys = [torch.zeros(1, heads, total, head_dim) for _ in layers]
        values = [torch.zeros(1, heads, total, head_dim) for _ in layers]
        out, token = [], given(0)
        for t in range(total - 1):
            token = compiled(token, torch.tensor([t]), keys, values)
            if t + 1 < prompt.shape[1]:
                token = given(t + 1)  # still in the prompt: the next token is given
            else:
                out.append(token)
        return [torch.cat(out, dim=1)[0].tolist()]

    return decode
