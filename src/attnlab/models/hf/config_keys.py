"""Helpers for the architectures' config readers: reading ``config.json`` keys, refusing options.

An architecture's config function turns a ``config.json`` dict into a ``ModelConfig``. Whatever it
raises is made one line naming the checkpoint and class by ``convert.hf_model_config``: a
``KeyError`` for a key the config lacks, a ``ValueError`` for a value attnlab cannot reproduce.
Each architecture states its own refusals with ``require`` (or its own check), in its own module.
"""

from __future__ import annotations

from typing import Any

HF_ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "silu": "silu",
    "swish": "silu",
}


# attnlab -> Hugging Face: the spelling export writes (gelu_tanh: torch's own tanh approximation)
TO_HF_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "silu": "silu"}


def hf_activation(name: str) -> str:
    """The Hugging Face name of an attnlab activation; an ungated ``gelu`` for a gated one, which a
    plain MLP cannot hold (export compares the configs and names the difference)."""
    return TO_HF_ACTIVATIONS.get(str(name), "gelu")


def activation(name: str) -> str:
    """attnlab's name for a Hugging Face activation function (``hidden_act``, ``activation_function``)."""
    if name not in HF_ACTIVATIONS:
        raise ValueError(f"activation {name!r} is not supported; attnlab maps {', '.join(HF_ACTIVATIONS)}")
    return HF_ACTIVATIONS[name]


def get(c: dict, *names: str) -> Any:
    """The first of ``names`` set in ``c`` (configs of different vintages spell some keys differently)."""
    for name in names:
        if c.get(name) is not None:
            return c[name]
    raise KeyError(names[0])


def require(c: dict, **supported: Any) -> None:
    """Refuse config options whose effect the attnlab blocks do not reproduce (absent keys pass)."""
    for key, value in supported.items():
        if c.get(key, value) != value:
            raise ValueError(f"{key}={c[key]!r} is not supported (attnlab needs {value!r})")


def num_labels(c: dict) -> int:
    """The number of classes of a classifier's config."""
    return len(c.get("id2label") or {}) or c.get("num_labels", 2)
