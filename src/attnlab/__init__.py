"""attnlab: config-driven Transformer experiments built from one set of shared blocks."""

from __future__ import annotations

__version__ = "0.1.0"


def load_hf(path: str, **overrides):
    """Load a local Hugging Face checkpoint directory into the matching attnlab model."""
    from attnlab.models.hf import load_hf as _load_hf

    return _load_hf(path, **overrides)


__all__ = ["__version__", "load_hf"]
