"""Explain one input into a folder: attention maps, rollout, attribution, head importance, the logit
lens, activation patching, linear probes and ablations over validation batches, index.html.

``explain_to_folder`` takes a model and one prepared ``Example`` (the batch in the data layout plus
what is needed to label the pictures) and writes PNGs and the page that shows them together.
matplotlib is imported by the functions that draw, so importing ``attnlab.explain`` does not load it.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from attnlab.explain.ablation import ablate
from attnlab.explain.attention import (
    attention_maps,
    attention_rollout,
    map_label,
    select_layers,
    self_attention_layers,
)
from attnlab.explain.attribution import token_attribution
from attnlab.explain.head_importance import HeadImportance, example_losses, head_importance
from attnlab.explain.labels import display_label, patch_labels
from attnlab.explain.lens import logit_lens
from attnlab.explain.patching import Metric, Patching, patch_heads, patch_residual
from attnlab.explain.probes import probe_layers
from attnlab.explain.report import Section, scored_tokens_html, table_html, write_report


@dataclass
class Example:
    """One input (batch of size 1, in the data layout) and how to label it.

    ``tokens`` label the input positions (the source for seq2seq; a ViT's are ``patch_labels``),
    ``target_tokens`` the decoder's input (seq2seq: bos, then the output) and ``output_tokens`` what
    each decoder position writes (the output, then eos): the decoder's queries are labelled by what
    they write, its keys by what they read. ``image`` is the ViT input before
    normalisation (C, H, W), ``focus`` the position whose prediction is explained (a masked position
    for MLM), ``prediction`` a short line naming the prediction and its probability (the title of
    every picture, e.g. "predicted class 7 (p=0.93)"), ``description`` a longer line for the page.
    """

    batch: dict[str, Tensor]
    tokens: list[str] | None = None
    target_tokens: list[str] | None = None
    output_tokens: list[str] | None = None
    image: Tensor | None = None
    focus: int | None = None
    prediction: str = ""
    description: str = ""


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


def titled(what: str, example: Example) -> str:
    """A figure title: what it shows, then the prediction it explains."""
    return f"{what}\n{example.prediction}" if example.prediction else what


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


def write_logit_lens(
    model: nn.Module, example: Example, folder: Path, token_text: Callable[[int], str] | None = None
) -> Section:
    """``logit_lens.png``: each layer's most likely token per position and its probability, and the
    loss per layer where the example has labels."""
    from attnlab.explain.plots import lens_figure, save_figure

    lens = logit_lens(model, example.batch)
    top = lens.logits[:, 0].softmax(-1).max(-1)  # (layers, T): the top token's probability and id
    text = token_text or str
    tokens = [[text(int(i)) for i in row] for row in top.indices]
    positions = (example.target_tokens if lens.sites[0].startswith("decoder.") else example.tokens) or [
        str(t) for t in range(top.values.shape[1])
    ]
    layers = [f"layer {i}" for i in range(len(lens.sites))]
    figure = lens_figure(top.values, tokens, layers, positions, title=titled("logit lens", example))
    save_figure(figure, folder / "logit_lens.png")
    about = "Each layer's residual stream through the final norm and the output head (nostalgebraist 2020)."
    if lens.losses is not None:
        about += " Loss per layer: " + ", ".join(f"{v:.3f}" for v in lens.losses.tolist()) + "."
    return Section("Logit lens", about, ["logit_lens.png"])


def _strongest_rows(result: Patching, k: int = 10) -> list[list[str]]:
    restored = result.restored()
    return [
        [site, str(col), f"{value:.4f}", f"{float(restored[result.sites.index(site), col]):.3f}"]
        for site, col, value in result.strongest(k)
    ]


def write_patching(
    model: nn.Module, example: Example, corrupted: dict[str, Tensor], metric: Metric, folder: Path
) -> Section:
    """``patching_resid.png`` (residual stream per layer and position) and ``patching_heads.png`` (each
    head's output), coloured by the share of the clean - corrupted difference each patch restores,
    and the table of the strongest sites."""
    from attnlab.explain.plots import patching_figure, save_figure

    resid = patch_residual(model, example.batch, corrupted, metric)
    heads = patch_heads(model, example.batch, corrupted, metric)
    n = resid.scores.shape[1]
    positions = example.tokens if example.tokens is not None and len(example.tokens) == n else None
    ends = f"clean {resid.clean:.3f}, corrupted {resid.corrupted:.3f}"
    save_figure(
        patching_figure(
            resid.restored(),
            resid.sites,
            positions or [str(t) for t in range(n)],
            title=titled(f"activation patching: residual stream ({ends})", example),
        ),
        folder / "patching_resid.png",
    )
    save_figure(
        patching_figure(
            heads.restored(),
            heads.sites,
            [str(h) for h in range(heads.scores.shape[1])],
            column_axis="head",
            title=titled(f"activation patching: heads' outputs ({ends})", example),
        ),
        folder / "patching_heads.png",
    )
    header = ["site", "position or head", "metric", "share restored"]
    rows = _strongest_rows(resid) + _strongest_rows(heads)
    rows.sort(key=lambda row: -abs(float(row[3])))
    about = (
        "The corrupted input run with one activation from the clean run (Meng et al. 2022; Wang et al. "
        f"2022): 1 restores the clean metric, 0 leaves the corrupted one ({ends})."
    )
    return Section(
        "Activation patching",
        about,
        ["patching_resid.png", "patching_heads.png"],
        table_html(header, rows[:10]),
    )


def write_probes(
    model: nn.Module, batches: list[dict[str, Tensor]], prop: str, kind: str, folder: Path
) -> Section:
    """``probes.png`` (held-out accuracy per layer, probe and shuffled-label control, chance line) and
    ``probes.csv``, and the page section showing them."""
    from attnlab.explain.plots import probe_figure, save_figure

    result = probe_layers(model, batches, prop, kind)
    what = f"{'the current token' if prop == 'token' else 'the class'} from {kind}, {result.examples} vectors"
    figure = probe_figure(
        result.sites, result.accuracy, result.control, result.chance, title=f"linear probes: {what}"
    )
    save_figure(figure, folder / "probes.png")
    header = ["site", "probe accuracy", "control accuracy"]
    rows = [[s, f"{a:.4f}", f"{c:.4f}"] for s, a, c in zip(result.sites, result.accuracy, result.control)]
    with open(folder / "probes.csv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])
    about = (
        f"A logistic regression per layer predicting {what}, scored on a held-out quarter; the control "
        f"learns shuffled labels (chance {result.chance:.3f}). Also in probes.csv."
    )
    return Section("Linear probes", about, ["probes.png"], table_html(header, rows))


def write_ablation(
    model: nn.Module, batches: list[dict[str, Tensor]], targets: Sequence[str], mode: str, folder: Path
) -> Section:
    """``ablation.csv``: the validation loss before and after ablating each target, and all together."""

    def loss(_: dict[str, Tensor]) -> Tensor:
        return torch.cat([example_losses(model, b) for b in batches]).mean()

    result = ablate(model, batches[0], loss, list(targets), mode, reference=batches)
    header = ["ablated", "loss", "change"]
    rows = [["nothing", f"{result.before:.4f}", "0"]]
    rows += [[t, f"{v:.4f}", f"{v - result.before:+.4f}"] for t, v in result.after.items()]
    if len(targets) > 1:
        rows.append(["all of them", f"{result.together:.4f}", f"{result.together - result.before:+.4f}"])
    with open(folder / "ablation.csv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])
    about = (
        f"The validation loss ({len(batches)} batches) with each site or head {mode}-ablated "
        f"({'set to zero' if mode == 'zero' else 'set to its mean over those batches'}). Also in ablation.csv."
    )
    return Section(f"Ablation ({mode})", about, [], table_html(header, rows))


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
