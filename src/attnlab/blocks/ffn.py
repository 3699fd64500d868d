"""Position-wise feed-forward networks: plain (ReLU, GELU, SiLU) and gated (SwiGLU, GeGLU)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.blocks.roles import ParamRole, declare_roles
from attnlab.schema.model import Activation, ModelConfig

ACTIVATIONS = {
    Activation.relu: F.relu,
    Activation.gelu: F.gelu,
    Activation.gelu_tanh: lambda x: F.gelu(x, approximate="tanh"),
    Activation.silu: F.silu,
}
GATED = {  # the gate's activation; the gated names are the rest of Activation (geglu_tanh: T5 v1.1)
    Activation.swiglu: F.silu,
    Activation.geglu: F.gelu,
    Activation.geglu_tanh: ACTIVATIONS[Activation.gelu_tanh],
}


class FeedForward(nn.Module):
    """``fc_out(act(fc_in(x)))``, or ``fc_out(act(fc_gate(x)) * fc_in(x))`` for gated activations."""

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        activation: str = ModelConfig.activation,
        bias: bool = ModelConfig.bias,
        dropout: float = ModelConfig.ffn_dropout,
    ):
        super().__init__()
        activation = Activation(activation)
        self.gated = activation in GATED
        self.act = GATED[activation] if self.gated else ACTIVATIONS[activation]
        self.fc_in = nn.Linear(d_model, d_ff, bias=bias)
        self.fc_gate = nn.Linear(d_model, d_ff, bias=bias) if self.gated else None
        self.fc_out = nn.Linear(d_ff, d_model, bias=bias)
        for linear in (self.fc_in, self.fc_gate, self.fc_out):
            if linear is not None:
                declare_roles(linear, weight=ParamRole.hidden_matrix)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        h = self.act(self.fc_gate(x)) * self.fc_in(x) if self.gated else self.act(self.fc_in(x))
        if self.training and self.dropout.p > 0:  # skipped where it is the identity: one call less per step
            h = self.dropout(h)
        return self.fc_out(h)


def ffn_width(d_model: int, d_ff: int | None, ffn_mult: float) -> int:
    """``d_ff`` when given (0: no feed-forward sublayer), else ``ffn_mult * d_model`` rounded to an integer."""
    return int(d_ff) if d_ff is not None else round(ffn_mult * d_model)
