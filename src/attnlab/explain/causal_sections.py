"""The page sections of the causal methods: the logit lens, activation patching, linear probes and
ablations, each written as pictures and tables into the explanation's folder."""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from attnlab.explain.ablation import ablate
from attnlab.explain.example import Example, titled
from attnlab.explain.head_importance import example_losses
from attnlab.explain.lens import logit_lens
from attnlab.explain.patching import Metric, Patching, patch_heads, patch_residual
from attnlab.explain.probes import probe_layers
from attnlab.explain.report import Section, table_html


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
