"""Explain one input into a folder: attention maps, rollout, attribution, head importance, the logit
lens, activation patching, linear probes and ablations over validation batches, index.html.

``explain_to_folder`` takes a model and one prepared ``Example`` (the batch in the data layout plus
what is needed to label the pictures) and writes PNGs and the page that shows them together.
matplotlib is imported by the functions that draw, so importing ``attnlab.explain`` does not load it.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from attnlab.explain.attention import (
    attention_maps,
    attention_rollout,
    map_label,
    select_layers,
    self_attention_layers,
)
from attnlab.explain.attribution import token_attribution
from attnlab.explain.causal_sections import write_ablation, write_logit_lens, write_patching, write_probes
from attnlab.explain.example import Example, titled
from attnlab.explain.head_importance import HeadImportance, head_importance
from attnlab.explain.labels import display_label, patch_labels
from attnlab.explain.patching import Metric
from attnlab.explain.report import Section, scored_tokens_html, table_html, write_report


def focus_position(model: nn.Module, example: Example) -> int | None:
    """The position whose output is explained: ``example.focus`` (a masked position), else the model's
    readout position (gpt: the last token; a classifier pooling ``cls``: the first), else None (other
    poolings, the seq2seq encoder: every position counts)."""
    if example.focus is not None:
        return example.focus
    readout = model.readout_positions(example.batch)
    return int(readout[0]) if readout is not None else None


def focus_row(model: nn.Module, example: Example, rollout: Tensor) -> Tensor:
    """The rollout row (T,) of the explained position (``focus_position``), else the mean of the rows."""
    position = focus_position(model, example)
    return rollout[position] if position is not None else rollout.mean(dim=0)


def rollout_name(model: nn.Module, example: Example, tokens: Sequence[str]) -> str:
    """What the rollout row shows, e.g. "rollout into CLS" or "rollout, mean over positions"."""
    position = focus_position(model, example)
    if position is None:
        return "rollout, mean over positions"
    return f"rollout into {display_label(tokens[position])}"


def _patch_grid(scores: Tensor, model: nn.Module) -> Tensor:
    """Scores of a ViT's patches as the (n, n) grid of the image.

    The patches are the last n * n entries: a rollout row has the CLS entry first, gradient × input
    (taken at the patch embedding, before CLS is prepended) has none.
    """
    side = model.cfg.image_size // model.cfg.patch_size
    if scores.shape[0] < side * side:
        raise ValueError(f"{scores.shape[0]} scores cannot cover the {side}x{side} patches of the image")
    return scores[-side * side :].reshape(side, side)


def _axis_labels(name: str, example: Example) -> tuple[list[str] | None, list[str] | None]:
    """The labels of the queries and the keys of an attention module's map. A decoder's query is
    labelled by the token it writes (``output_tokens``, when given), its self-attention keys by the
    tokens it reads (``target_tokens``: bos, then the output so far)."""
    if name.startswith("decoder."):
        queries = example.output_tokens or example.target_tokens
        return queries, example.tokens if ".cross_attn." in name else example.target_tokens
    return example.tokens, example.tokens


def _axis_names(name: str, example: Example) -> tuple[str, str]:
    """The titles of the query axis and the key axis of an attention module's map."""
    if not name.startswith("decoder."):
        return "query", "key"
    query = "query (writing output token)" if example.output_tokens else "query (decoder input token)"
    return query, "key (source token)" if ".cross_attn." in name else "key (decoder input token)"


def write_attention_maps(
    maps: dict[str, Tensor],
    example: Example,
    folder: Path,
    layers: Sequence[int],
    heads: Sequence[int] | None,
) -> list[str]:
    """One PNG per selected attention module (all heads, or ``heads``); returns their relative paths."""
    from attnlab.explain.plots import attention_figure, save_figure

    written = []
    for name in select_layers(list(maps), layers):
        weights = maps[name][0]
        chosen = list(heads) if heads is not None else list(range(weights.shape[0]))
        bad = [h for h in chosen if not -weights.shape[0] <= h < weights.shape[0]]
        if bad:
            raise ValueError(
                f"heads={list(heads)}: the model has {weights.shape[0]} heads (0..{weights.shape[0] - 1})"
            )
        q_labels, k_labels = _axis_labels(name, example)
        q_axis, k_axis = _axis_names(name, example)
        label = map_label(name)
        fig = attention_figure(
            weights[chosen],
            query_labels=q_labels,
            key_labels=k_labels,
            title=titled(f"{label}-attention", example),
            head_names=[f"head {h % weights.shape[0]}" for h in chosen],
            query_axis=q_axis,
            key_axis=k_axis,
        )
        relative = f"attention/{label.replace(' ', '_')}.png"
        save_figure(fig, folder / relative)
        written.append(relative)
    return written


def write_head_importance(result: HeadImportance, folder: Path) -> Section:
    """``head_importance.png`` and ``head_importance.csv``, and the page section showing them."""
    from attnlab.explain.plots import head_importance_figure, save_figure

    over = f"{result.examples} validation examples" if result.examples else "the validation examples"
    what = f"mean over {over} of |dL/d gate|, L2-normalised per module"
    figure = head_importance_figure(
        result.scores,
        result.labels,
        title=f"head importance (Michel et al. 2019)\n{what}",
        value_label="importance",
    )
    save_figure(figure, folder / "head_importance.png")
    header = ["module", *[f"head {h}" for h in range(result.scores.shape[1])]]
    rows = [[label, *[f"{v:.4f}" for v in row]] for label, row in zip(result.labels, result.scores.tolist())]
    with open(folder / "head_importance.csv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])
    return Section(
        "Head importance (Michel et al. 2019)",
        f"For each head, the {what} (an example's loss L, the head's gate fixed at 1). "
        "Also in head_importance.csv.",
        ["head_importance.png"],
        table_html(header, rows),
    )


ROLLOUT_TEXT = "Attention rollout (Abnar & Zuidema 2020): head-averaged attention plus identity, multiplied through the layers."
ATTRIBUTION = "gradient × input"
ROLLOUT_UNITS = "share of the input"  # a rollout row sums to 1 over the input positions
ATTRIBUTION_UNITS = "− lowers · raises the prediction +"  # its colour bar: blue below, red above 0


def image_section(
    model: nn.Module, example: Example, row: Tensor, attribution: Tensor, folder: Path
) -> Section:
    """``image.png``: the ViT input, and beside it rollout and attribution over its patches."""
    from attnlab.explain.plots import image_patches_figure, save_figure

    image = example.image if example.image is not None else example.batch["pixel_values"][0]
    name = rollout_name(model, example, example.tokens or patch_labels(model))
    extra = row.shape[0] - _patch_grid(row, model).numel()
    if extra:  # the CLS entry of the row is not a patch: say how much of the flow it keeps
        name += f"\n(CLS keeps {float(row[:extra].sum()):.2f})"
    grids = {name: _patch_grid(row, model), ATTRIBUTION: _patch_grid(attribution, model)}
    units = {name: ROLLOUT_UNITS, ATTRIBUTION: ATTRIBUTION_UNITS}
    figure = image_patches_figure(
        image, grids, signed={ATTRIBUTION}, bar_labels=units, title=example.prediction
    )
    save_figure(figure, folder / "image.png")
    text = (
        f"{ROLLOUT_TEXT} Gradient × input per patch: red raises the explained class's logit, blue "
        "lowers it; white is zero."
    )
    return Section("Rollout and attribution over the image", text, ["image.png"])


def token_sections(
    model: nn.Module, example: Example, rollout: Tensor, row: Tensor, attribution: Tensor, folder: Path
) -> list[Section]:
    """``tokens.png`` (rollout and attribution over the input tokens) and ``rollout.png`` (the matrix)."""
    from attnlab.explain.plots import attention_figure, save_figure, token_scores_figure

    tokens = example.tokens or [str(i) for i in range(rollout.shape[0])]
    name = rollout_name(model, example, tokens)
    scores = {name: row, ATTRIBUTION: attribution}
    units = {name: ROLLOUT_UNITS, ATTRIBUTION: ATTRIBUTION_UNITS}
    strips = token_scores_figure(
        tokens, scores, signed={ATTRIBUTION}, bar_labels=units, title=example.prediction
    )
    save_figure(strips, folder / "tokens.png")
    matrix = attention_figure(
        rollout,
        query_labels=tokens,
        key_labels=tokens,
        title=titled("attention rollout", example),
        query_axis="position (top of the stack)",
        key_axis="input token",
        value_label=ROLLOUT_UNITS,
    )
    save_figure(matrix, folder / "rollout.png")
    return [
        Section(
            "Gradient × input",
            "Red raises the explained output, blue lowers it, white is zero (hover for values).",
            ["tokens.png"],
            scored_tokens_html(tokens, attribution),
        ),
        Section("Attention rollout", ROLLOUT_TEXT, ["rollout.png"], scored_tokens_html(tokens, row)),
    ]


def explain_to_folder(
    model: nn.Module,
    example: Example,
    folder: str | Path,
    *,
    layers: Sequence[int] = (0, -1),
    heads: Sequence[int] | None = None,
    importance_batches: Iterable[dict[str, Tensor]] | None = None,
    loss_fn: Callable[[dict[str, Tensor]], Tensor] | None = None,
    max_batches: int | None = 8,
    title: str = "attnlab explain",
    lens: bool = False,
    token_text: Callable[[int], str] | None = None,
    corrupted: dict[str, Tensor] | None = None,
    metric: Metric | None = None,
    data_batches: Sequence[dict[str, Tensor]] | None = None,
    probe: str | None = None,
    probe_site: str = "resid_post",
    ablate_targets: Sequence[str] = (),
    ablation: str = "zero",
) -> Path:
    """Write the explanation of ``example`` into ``folder``; returns the path of its ``index.html``.

    ``lens``: add the logit lens (``token_text`` names a token id in its picture); ``corrupted`` (a
    batch like ``example.batch``) and ``metric`` (e.g. ``logit_difference(answer, wrong)``): add
    activation patching from the example into the corrupted input. Over ``data_batches`` (labelled
    validation batches): ``probe`` (``token`` or ``class``) adds linear probes of ``probe_site`` per
    layer; ``ablate_targets`` (sites or heads) adds the loss with each ``ablation`` (zero or mean)-ablated.

    Also ``attention_weights.npz``: every layer's and head's weights, by module name.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if model.input_kind == "images" and example.tokens is None:
        example = replace(example, tokens=patch_labels(model))
    stated = "; ".join(line for line in (example.prediction, example.description) if line)
    sections = [Section("Prediction", stated)] if stated else []

    maps = attention_maps(model, example.batch)
    np.savez_compressed(folder / "attention_weights.npz", **{n: w[0].cpu().numpy() for n, w in maps.items()})
    rollout = attention_rollout(self_attention_layers(maps, model.input_stack))[0]
    row = focus_row(model, example, rollout)
    position = torch.tensor([example.focus]) if example.focus is not None else None
    attribution = token_attribution(model, example.batch, position=position)[0].cpu()
    if model.input_kind == "images":
        sections.append(image_section(model, example, row, attribution, folder))
    else:
        sections += token_sections(model, example, rollout, row, attribution, folder)

    pictures = write_attention_maps(maps, example, folder, layers, heads)
    text = "Weights of the chosen layers and heads (rows: queries); all of them in attention_weights.npz."
    sections.append(Section("Attention maps", text, pictures))
    if importance_batches is not None:
        result = head_importance(model, importance_batches, loss_fn=loss_fn, max_batches=max_batches)
        sections.append(write_head_importance(result, folder))
    if lens:
        sections.append(write_logit_lens(model, example, folder, token_text))
    if corrupted is not None:
        if metric is None:
            raise ValueError("patching needs a metric, e.g. attnlab.explain.logit_difference(answer, wrong)")
        sections.append(write_patching(model, example, corrupted, metric, folder))
    if (probe is not None or ablate_targets) and not data_batches:
        raise ValueError("probes and ablations need data_batches: labelled validation batches")
    if probe is not None:
        sections.append(write_probes(model, list(data_batches), probe, probe_site, folder))
    if ablate_targets:
        sections.append(write_ablation(model, list(data_batches), ablate_targets, ablation, folder))
    return write_report(folder, title, sections)
