"""Linear probes (Alain & Bengio 2016): what a layer's activation encodes linearly, layer by layer.

For one kind of site (``resid_post`` by default) every layer's activations over a labelled set are
split into a training and a held-out part, and a logistic regression (scikit-learn) learns the label
from the training part; its held-out accuracy says how much of the property the layer makes linearly
readable. The control is the same probe trained on labels shuffled across the set: whatever it scores
above chance is what the probe memorises, not what the layer encodes. Properties:

- ``token``: the token at each position of the stack's input (gpt, bert, seq2seq's encoder and decoder);
- ``class``: an example's class label, read at the model's readout position (a ViT's or a bert
  classifier's CLS), or from the mean over positions where it has none.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from attnlab.explain.sites import recorded, resid_sites
from attnlab.models.common import eval_mode, model_device

PROPERTIES = ("token", "class")
STACK_INPUT = {"": "input_ids", "encoder.": "src_ids", "decoder.": "tgt_in"}  # site prefix: its tokens


@dataclass
class Probes:
    """Held-out ``accuracy`` and shuffled-label ``control`` per site (``sites``: one per layer), the
    ``chance`` accuracy (the training split's most common label, always), over ``examples`` vectors."""

    prop: str
    sites: list[str]
    accuracy: list[float]
    control: list[float]
    chance: float
    examples: int


def site_labels(model: nn.Module, batch: dict[str, Tensor], site: str, prop: str) -> Tensor:
    """The label of each (example, position) of ``site`` for ``token``, of each example for ``class``."""
    if prop == "token":
        key = STACK_INPUT[site[: site.index("layers.")]]
        if key not in batch:
            raise ValueError(f"probe=token: {type(model).__name__} reads no tokens ({key!r}): probe=class")
        return batch[key]
    labels = batch.get("labels")
    if labels is None or labels.dim() != 1:
        raise ValueError(f"probe=class: {type(model).__name__}'s batches carry no class labels: probe=token")
    return labels


def readout(model: nn.Module, batch: dict[str, Tensor], act: Tensor) -> Tensor:
    """Each example's vector of a (B, T, D) activation: at its readout position, else the mean over T."""
    positions = model.readout_positions(batch)
    if positions is None:
        return act.mean(dim=1)
    return act[torch.arange(act.shape[0], device=act.device), positions.to(act.device)]


def probe_data(
    model: nn.Module,
    batches: Iterable[dict[str, Tensor]],
    prop: str,
    kind: str = "resid_post",
    max_batches: int | None = None,
) -> tuple[list[str], list[Tensor], list[Tensor]]:
    """The sites of ``kind``, each one's vectors (N, D) and their labels (N,) over ``batches``."""
    if prop not in PROPERTIES:
        raise ValueError(f"probe={prop!r}: one of {', '.join(PROPERTIES)}")
    sites = resid_sites(model, kind)
    if not sites:
        raise ValueError(f"probe_site={kind!r}: no such site in {type(model).__name__}")
    device = model_device(model)
    feats: dict[str, list[Tensor]] = {s: [] for s in sites}
    labels: dict[str, list[Tensor]] = {s: [] for s in sites}
    with torch.no_grad(), eval_mode(model), recorded(model, sites) as acts:
        for i, batch in enumerate(batches):
            if max_batches is not None and i >= max_batches:
                break
            batch = {k: v.to(device) if isinstance(v, Tensor) else v for k, v in batch.items()}
            model.logits(batch)
            for s in sites:
                target = site_labels(model, batch, s, prop)
                act = acts[s] if prop == "token" else readout(model, batch, acts[s])
                feats[s].append(act.flatten(0, -2).float().cpu())
                labels[s].append(target.flatten().cpu())
    if not feats[sites[0]]:
        raise ValueError("probes need at least one labelled batch")
    return sites, [torch.cat(feats[s]) for s in sites], [torch.cat(labels[s]) for s in sites]


def held_out_accuracy(features: np.ndarray, labels: np.ndarray, train: np.ndarray) -> float:
    """A logistic regression fitted on the rows ``train`` (a boolean mask), scored on the others."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))
    if len(np.unique(labels[train])) < 2:
        return float((labels[~train] == labels[train][0]).mean())
    probe.fit(features[train], labels[train])
    return float(probe.score(features[~train], labels[~train]))


def probe_layers(
    model: nn.Module,
    batches: Iterable[dict[str, Tensor]],
    prop: str = "token",
    kind: str = "resid_post",
    *,
    max_batches: int | None = None,
    max_examples: int = 4000,
    held_out: float = 0.25,
    seed: int = 0,
) -> Probes:
    """A probe per layer of ``prop`` on the sites of ``kind``, and its shuffled-label control: at most
    ``max_examples`` vectors (a seeded random subset), ``held_out`` of them scored."""
    sites, feats, labels = probe_data(model, batches, prop, kind, max_batches)
    rng = np.random.default_rng(seed)
    accuracy, control, chance, used = [], [], [], 0
    for x, y in zip(feats, labels):
        keep = rng.permutation(len(y))[:max_examples]
        x, y = x[keep].numpy(), y[keep].numpy()
        train = rng.random(len(y)) >= held_out
        train[0], train[-1] = True, False  # neither part empty
        accuracy.append(held_out_accuracy(x, y, train))
        control.append(held_out_accuracy(x, rng.permutation(y), train))
        values, counts = np.unique(y[train], return_counts=True)
        chance.append(float((y[~train] == values[counts.argmax()]).mean()))
        used = len(y)
    return Probes(prop, sites, accuracy, control, max(chance), used)
