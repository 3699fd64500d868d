"""A fifth family, added as a user would: this module and ``conf/model/tinygpt.yaml``.

``model=tinygpt`` is a decoder-only model whose logits are scaled by ``readout_scale`` (a readout
multiplier, as muP's): a config class that joins the ``model`` group's union (its ``trains``, what
tasks and data it reads, inherited from gpt's), and a model class registered as its builder. The
commands treat it as they treat gpt, whose config it extends. Nothing else in attnlab changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from attnlab.models.common import MODEL_CLASSES
from attnlab.models.decoder import DecoderLM
from attnlab.schema.errors import positive
from attnlab.schema.model import MODELS, GPTConfig


@MODELS.register
@dataclass
class TinyGPTConfig(GPTConfig):
    """gpt's settings, tiny, and the readout multiplier."""

    family: str = "tinygpt"
    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 2
    readout_scale: float = 0.5

    def check(self) -> None:
        super().check()
        positive("model.readout_scale", self.readout_scale)


@MODEL_CLASSES.builds(TinyGPTConfig)
class TinyGPT(DecoderLM):
    """A decoder whose logits are multiplied by ``cfg.readout_scale``."""

    def forward(self, *args, **kwargs) -> Tensor:
        return super().forward(*args, **kwargs) * self.cfg.readout_scale
