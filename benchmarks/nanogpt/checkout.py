"""A checkout of karpathy/nanoGPT named by ``NANOGPT_DIR``: its model, its data files, its output.

Its code is loaded from the checkout at run time, never copied here. Needs only torch and numpy, so
that the GPU benchmark runs it on a bare machine.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import pickle
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:
    from benchmarks.models import GPTSize

# nanoGPT's evaluation line: "step 250: train loss 1.9, val loss 2.0".
VAL_LINE = re.compile(r"^step (\d+): train loss [\d.]+, val loss ([\d.]+)", re.MULTILINE)
# Its iteration line: "iter 10: loss 2.1, time 97.2ms, mfu 1.2%".
ITERATION = re.compile(r"^iter (\d+): loss [\d.]+, time ([\d.]+)ms")
BABY_BATCH, BABY_BLOCK = 12, 64
BABY_EVAL_ITERS = 20  # batches of each split its estimate_loss scores
# The flags of its README's "baby" CPU run of config/train_shakespeare_char.py (4 layers, d 128).
BABY_FLAGS = [
    "--device=cpu",
    "--compile=False",
    f"--eval_iters={BABY_EVAL_ITERS}",
    "--log_interval=1",
    f"--block_size={BABY_BLOCK}",
    f"--batch_size={BABY_BATCH}",
    "--n_layer=4",
    "--n_head=4",
    "--n_embd=128",
    "--dropout=0.0",
]
# GPT-2 stores these as Conv1D weights, the transpose of nanoGPT's nn.Linear ones.
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def nanogpt_checkout() -> Path | None:
    """The checkout that ``NANOGPT_DIR`` names, if it has model.py and train.py."""
    found = os.environ.get("NANOGPT_DIR")
    ok = found and (Path(found) / "model.py").is_file() and (Path(found) / "train.py").is_file()
    return Path(found) if ok else None


def model_py(checkout: Path) -> ModuleType:
    """nanoGPT's model.py, loaded from the checkout."""
    spec = importlib.util.spec_from_file_location("nanogpt_model_py", checkout / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpt2_weights(hf_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A GPT-2 state dict as nanoGPT's ``from_pretrained`` copies it: the Conv1D weights transposed,
    the causal-mask buffers left out."""
    return {
        name: tensor.t().contiguous() if name.endswith(CONV1D) else tensor.clone()
        for name, tensor in hf_state.items()
        if not name.endswith((".attn.bias", ".attn.masked_bias"))
    }


def own_gpt(
    size: GPTSize, hf_model: nn.Module | None = None, checkout: Path | None = None
) -> nn.Module | None:
    """nanoGPT's own ``GPT`` (model.py of ``checkout``, by default ``nanogpt_checkout()``) at ``size``
    with biases and no dropout, holding ``hf_model``'s weights as its ``from_pretrained`` loads GPT-2's,
    randomly initialised without one; None without a checkout. Its GELU is the exact one (GPT-2's is
    the tanh approximation): its loss differs from the twins' in the fourth decimal."""
    checkout = checkout or nanogpt_checkout()
    if checkout is None:
        return None
    module = model_py(checkout)
    seq_len = hf_model.config.n_positions if hf_model is not None else size.seq_len
    config = module.GPTConfig(
        block_size=seq_len,
        vocab_size=size.vocab,
        n_layer=size.n_layers,
        n_head=size.n_heads,
        n_embd=size.d_model,
        dropout=0.0,
        bias=True,
    )
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its parameter count
        model = module.GPT(config)
    if hf_model is not None:
        model.load_state_dict(gpt2_weights(hf_model.state_dict()))
    return model.train()


def from_checkpoint(checkout: Path, ckpt_path: Path) -> tuple[nn.Module, int]:
    """nanoGPT's GPT with the weights of ``ckpt_path`` (as its sample.py loads them), in eval mode, and
    the iteration the checkpoint was saved at."""
    module = model_py(checkout)
    checkpoint = torch.load(ckpt_path, map_location="cpu", weights_only=False)
    with contextlib.redirect_stdout(sys.stderr):  # it prints its size: keep stdout for the caller's
        model = module.GPT(module.GPTConfig(**checkpoint["model_args"]))
    state = {k.removeprefix("_orig_mod."): v for k, v in checkpoint["model"].items()}
    model.load_state_dict(state)
    return model.eval(), checkpoint["iter_num"]


def write_data(text_file: Path, data_dir: Path) -> int:
    """nanoGPT's data/shakespeare_char files from ``text_file``, as its ``prepare.py`` writes them but
    without its download: the sorted characters as the vocabulary, the first 90% of the characters in
    train.bin and the rest in val.bin (uint16), and meta.pkl; returns the vocabulary size."""
    text = text_file.read_text(encoding="utf-8")
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    cut = int(len(text) * 0.9)
    data_dir.mkdir(parents=True, exist_ok=True)
    for name, part in (("train", text[:cut]), ("val", text[cut:])):
        np.array([stoi[ch] for ch in part], dtype=np.uint16).tofile(data_dir / f"{name}.bin")
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}
    (data_dir / "meta.pkl").write_bytes(pickle.dumps(meta))
    return len(chars)


def best_val(log: str) -> tuple[float, int]:
    """The lowest ``val loss`` of nanoGPT's evaluation lines and its step; ValueError if there is none."""
    found = [(float(loss), int(step)) for step, loss in VAL_LINE.findall(log)]
    if not found:
        raise ValueError(
            f"no 'step N: train loss ..., val loss ...' line in nanoGPT's output:\n{log[-2000:]}"
        )
    return min(found)
