"""Schemas of the commands that read a checkpoint: ``attnlab-sample`` and ``attnlab-explain``."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING


@dataclass
class SampleCommand:
    """The keys of conf/sample.yaml."""

    ckpt_path: str = MISSING
    prompt: str = "\n"
    prompts: list[str] = field(default_factory=list)
    image: str | None = None
    images: list[str] = field(default_factory=list)
    device: str = "cpu"
    num_samples: int = 1
    max_new_tokens: int = 200
    temperature: float = 0.8
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float = 1.0
    stop: list[str] = field(default_factory=list)
    stop_at_eos: bool = True
    seed: int = 0
    use_cache: bool = True
    num_beams: int = 1
    length_penalty: float = 1.0
    n_best: int = 1
    early_stopping: bool = True
    num_predictions: int = 5
    mask_token: str = "<mask>"


@dataclass
class ExplainCommand:
    """The keys of conf/explain.yaml."""

    ckpt_path: str = MISSING
    input: str = MISSING
    target: str | None = None
    layers: list[int] = field(default_factory=lambda: [0, -1])
    heads: list[int] | None = None
    head_importance: bool = True
    importance_batches: int = 8
    out_dir: str = "explain"
    device: str = "cpu"
    mask_token: str = "<mask>"
    max_new_tokens: int = 64
