"""Explaining model decisions: attention maps, rollout, gradient × input, head importance, named
activation sites, the logit lens, activation patching, linear probes, ablations, pictures.

A library: functions take a model and a batch in the data layout, and ask the model (its
``logits``, ``input_embedding``, ``readout_positions``) what differs between families. No Lightning,
no Hydra; matplotlib loads only when something is drawn. ``attnlab-explain`` (``attnlab.cli.explain``)
runs them on a checkpoint and one input; the Lightning callback that logs attention maps during
training is ``attnlab.training.callbacks.AttentionMapLogger``.
"""

from attnlab.explain.ablation import Ablation, ablate, ablated
from attnlab.explain.attention import (
    attention_maps,
    attention_rollout,
    map_label,
    select_layers,
    self_attention_layers,
)
from attnlab.explain.attribution import gradient_x_input, token_attribution
from attnlab.explain.head_importance import HeadImportance, example_losses, head_gates, head_importance
from attnlab.explain.lens import LogitLens, logit_lens
from attnlab.explain.patching import Patching, logit_difference, patch_heads, patch_residual, patched_metric
from attnlab.explain.pipeline import Example, explain_to_folder
from attnlab.explain.probes import Probes, probe_layers
from attnlab.explain.sites import Site, activation_sites, hooked, recorded, resid_sites

__all__ = [
    "Ablation",
    "Example",
    "HeadImportance",
    "LogitLens",
    "Patching",
    "Probes",
    "Site",
    "ablate",
    "ablated",
    "activation_sites",
    "attention_maps",
    "attention_rollout",
    "example_losses",
    "explain_to_folder",
    "gradient_x_input",
    "head_gates",
    "head_importance",
    "hooked",
    "logit_difference",
    "logit_lens",
    "map_label",
    "patch_heads",
    "patch_residual",
    "patched_metric",
    "probe_layers",
    "recorded",
    "resid_sites",
    "select_layers",
    "self_attention_layers",
    "token_attribution",
]
