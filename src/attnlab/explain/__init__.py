"""Explaining model decisions: attention maps, rollout, gradient × input, head importance, pictures.

The library functions take a model and a batch in the data layout; ``attnlab-explain`` (``main``,
in ``attnlab.explain.cli``) runs them on a checkpoint and one input.
"""

from attnlab.explain.attention import attention_maps, attention_rollout, map_label, self_attention_layers
from attnlab.explain.attribution import gradient_x_input, token_attribution
from attnlab.explain.callback import AttentionMapLogger
from attnlab.explain.head_importance import HeadImportance, head_gates, head_importance
from attnlab.explain.pipeline import Example, explain_to_folder


def main() -> None:
    """The ``attnlab-explain`` command (Hydra is imported only here)."""
    from attnlab.explain.cli import main as cli_main

    cli_main()


__all__ = [
    "AttentionMapLogger",
    "Example",
    "HeadImportance",
    "attention_maps",
    "attention_rollout",
    "explain_to_folder",
    "gradient_x_input",
    "head_gates",
    "head_importance",
    "main",
    "map_label",
    "self_attention_layers",
    "token_attribution",
]
