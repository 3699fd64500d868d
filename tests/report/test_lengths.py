"""attnlab-report's length generalisation: the summary over seeds, its table, and the artists of the
heatmap and the line plot (every encoding visible and told apart where lines coincide)."""

from __future__ import annotations

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from attnlab.report.length_plots import chance_levels, draw_heatmap, draw_lines, encoding_order
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
    lines = [
        line
        for line in ax.get_lines()
        if line.get_label() != "training length" and not line.get_label().startswith("chance")
    ]
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
    canvas = FigureCanvasAgg(fig)  # drawn as the report saves it: the legend leaves the title readable
    canvas.draw()
    renderer = canvas.get_renderer()
    assert not legend.get_window_extent(renderer).overlaps(ax.title.get_window_extent(renderer))


def test_the_heatmap_writes_mean_and_std_in_every_cell(summary: pd.DataFrame) -> None:
    _fig, ax = new_figure()
    draw_heatmap(ax, summary, "copy")
    (image,) = ax.get_images()
    assert image.get_array().shape == (4, 2) and image.get_clim() == (0.0, 1.0)
    cells = [t.get_text() for t in ax.texts]
    assert cells[1] == "0.70\n±0.20" and len(cells) == 8
    assert [t.get_text() for t in ax.get_yticklabels()] == ["alibi", "none", "rope", "rope+yarn"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["16\ninput-blind ≈0", "32\ninput-blind ≈0"]
    assert "mean ± std over 3 seeds" in ax.get_title()


def recall_frame(seeds: int) -> pd.DataFrame:
    frame = pd.DataFrame(rows("rope", "none", {16: [0.3] * seeds, 64: [0.15] * seeds}))
    frame["task"] = "recall"
    return length_summary(frame)


def test_the_line_plot_draws_the_chance_levels_and_recalls_random_pair_baseline() -> None:
    _fig, ax = new_figure()
    draw_lines(ax, recall_frame(3), "recall", trained=16)
    chance = {
        line.get_label(): list(line.get_ydata()) for line in ax.get_lines() if "chance" in line.get_label()
    }
    assert chance == {
        "chance, input-blind: 0.100": [pytest.approx(0.1)] * 2,
        "chance, random pair: 0.325, 0.145": [pytest.approx(0.325), pytest.approx(0.1 + 0.9 / 20)],
    }
    assert "mean ± std over 3 seeds" in ax.get_title() and len(ax.collections) == 1


def test_one_seed_is_not_called_a_mean_over_seeds() -> None:
    """One seed: the titles say so, the line plot has no band and the heatmap no ± (a std of nothing)."""
    _fig, ax = new_figure()
    draw_lines(ax, recall_frame(1), "recall", trained=16)
    assert "one seed" in ax.get_title() and "mean" not in ax.get_title() and not ax.collections
    _fig, ax = new_figure()
    draw_heatmap(ax, recall_frame(1), "recall")
    assert "one seed" in ax.get_title() and [t.get_text() for t in ax.texts] == ["0.30", "0.15"]


def test_the_chance_levels_are_what_answers_that_ignore_the_question_score_on_generated_examples() -> None:
    """The rules restated in the report, scored on the generators' own examples: a random pair's digit
    and a fixed digit on recall, the most frequent sum on addition, one fixed key on passkey."""
    import random

    from attnlab.data import synthetic
    from attnlab.schema.data import data_config

    n = 1500  # 3 standard errors or more in each tolerance below
    for length in (16, 32):
        cfg = data_config("recall", seq_len=length)
        pair = blind = 0
        for i in range(n):
            rng = synthetic.example_rng(0, "val", i)
            prompt, answer = synthetic.recall(rng, cfg)
            values = prompt.split("?")[0][2::3]
            pair += random.Random(i).choice(values) == answer
            blind += answer == "7"
        levels = chance_levels("recall", length)
        assert pair / n == pytest.approx(levels["random pair"], abs=0.04)
        assert blind / n == pytest.approx(levels["input-blind"], abs=0.03)
    cfg = data_config("addition", seq_len=8)  # two 2-digit numbers: the most frequent sum is 099
    hits = sum(synthetic.addition(synthetic.example_rng(0, "val", i), cfg)[1] == "099" for i in range(n))
    assert hits / n == pytest.approx(chance_levels("addition", 8)["input-blind"], abs=0.009)
    cfg = data_config("passkey", seq_len=16, passkey_digits=1)
    hits = sum(synthetic.passkey(synthetic.example_rng(0, "val", i), cfg)[1] == "3" for i in range(n))
    assert hits / n == pytest.approx(chance_levels("passkey", 16, passkey_digits=1)["input-blind"], abs=0.03)
    assert chance_levels("copy", 16) == {"input-blind": 26.0**-8} and chance_levels("passkey", 16) == {}


def test_the_spread_names_the_range_of_seeds_where_encodings_ran_different_numbers() -> None:
    from attnlab.report.length_plots import spread_phrase

    assert spread_phrase(pd.Series([8, 4, 7])) == "mean ± std over 4-8 seeds"
    assert spread_phrase(pd.Series([3, 3])) == "mean ± std over 3 seeds"
    assert spread_phrase(pd.Series([1])) == "one seed"
