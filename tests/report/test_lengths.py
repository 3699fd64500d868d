"""attnlab-report's length generalisation: the summary over seeds, its table, and the artists of the
heatmap and the line plot (every encoding visible and told apart where lines coincide)."""

from __future__ import annotations

import pandas as pd
import pytest

from attnlab.report.length_plots import draw_heatmap, draw_lines, encoding_order
from attnlab.report.lengths import accuracy_table, length_summary
from attnlab.report.plots import new_figure


def rows(pos: str, scaling: str, by_length: dict[int, list[float]]) -> list[dict]:
    """Runs of one encoding: seed i scores ``by_length[n][i]`` at length n."""
    return [
        {
            "run": f"{pos}-{seed}",
            "task": "copy",
            "encoding": pos if scaling == "none" else f"{pos}+{scaling}",
            "length": n,
            "depth": "-",
            "rope_scaling": scaling,
            "exact_match": scores[seed],
            "answer_loss": 1.0 - scores[seed],
        }
        for n, scores in by_length.items()
        for seed in range(len(scores))
    ]


@pytest.fixture
def summary() -> pd.DataFrame:
    frame = pd.DataFrame(
        rows("alibi", "none", {16: [1.0, 1.0, 1.0], 32: [0.5, 0.7, 0.9]})
        + rows("rope", "none", {16: [1.0, 1.0, 1.0], 32: [0.0, 0.0, 0.0]})
        + rows("rope", "yarn", {16: [1.0, 1.0, 1.0], 32: [0.0, 0.0, 0.0]})
        + rows("none", "none", {16: [1.0, 1.0, 1.0], 32: [0.0, 0.0, 0.0]})
    )
    return length_summary(frame)


def test_the_summary_is_the_mean_and_std_over_seeds(summary: pd.DataFrame) -> None:
    alibi32 = summary[(summary["encoding"] == "alibi") & (summary["length"] == 32)].iloc[0]
    assert alibi32["exact_match mean"] == pytest.approx(0.7)
    assert alibi32["exact_match std"] == pytest.approx(0.2)  # sample std of 0.5, 0.7, 0.9
    assert alibi32["seeds"] == 3
    table = accuracy_table(summary, "copy")
    assert list(table["encoding"]) == ["alibi", "none", "rope", "rope+yarn"]  # each scaling after its rope
    assert table.loc[0, "32"] == "0.700 ± 0.200"


def test_rope_scalings_follow_plain_rope() -> None:
    assert encoding_order(["rope+yarn", "alibi", "rope", "rope+linear"]) == [
        "alibi",
        "rope",
        "rope+linear",
        "rope+yarn",
    ]


def test_the_line_plot_tells_every_encoding_apart_with_bands_and_labels(summary: pd.DataFrame) -> None:
    fig, ax = new_figure()
    draw_lines(ax, summary, "copy", trained=16)
    lines = [line for line in ax.get_lines() if line.get_label() != "training length"]
    assert [line.get_label() for line in lines] == ["alibi", "none", "rope", "rope+yarn"]
    # none, rope and rope+yarn coincide (1 then 0): each has its own marker and dash, and sits apart
    assert len({(line.get_marker(), line.get_linestyle()) for line in lines}) == 4
    assert len({tuple(line.get_xdata()) for line in lines}) == 4
    assert len(ax.collections) == 4  # a ± std band per encoding
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(0.5)  # alibi: 1 ± 0 at 16, 0.7 ± 0.2 at 32
    assert sorted(set(band.round(6))) == pytest.approx([0.5, 0.9, 1.0])
    assert ax.get_xscale() == "log" and [t.get_text() for t in ax.get_xticklabels()] == ["16", "32"]
    assert "exact match" in ax.get_ylabel() and "length" in ax.get_xlabel()
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()][-1] == "training length"


def test_the_heatmap_writes_mean_and_std_in_every_cell(summary: pd.DataFrame) -> None:
    _fig, ax = new_figure()
    draw_heatmap(ax, summary, "copy")
    (image,) = ax.get_images()
    assert image.get_array().shape == (4, 2) and image.get_clim() == (0.0, 1.0)
    cells = [t.get_text() for t in ax.texts]
    assert cells[1] == "0.70\n±0.20" and len(cells) == 8
    assert [t.get_text() for t in ax.get_yticklabels()] == ["alibi", "none", "rope", "rope+yarn"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["16", "32"]
