"""The learning-rate transfer study's bookkeeping (experiments/mup/lr_transfer.py): on a synthetic
table whose best rates are known, the best rate per width and seed, on the seed-mean, and its movement
across widths in grid steps; and a missing corpus stops it with one line."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments" / "mup"))
from lr_transfer import best_rates, main, movement

GRID = [2.0**-10, 2.0**-8, 2.0**-6, 2.0**-4]
# the grid index of the lowest loss, per (parametrisation, width, seed); the top rate diverges (NaN)
OPTIMA = {("sp", 16): 2, ("sp", 32): 1, ("sp", 64): 0, ("mup", 16): 1, ("mup", 32): 1, ("mup", 64): 1}


def synthetic_runs() -> pd.DataFrame:
    rows = []
    for (p, width), optimum in OPTIMA.items():
        for seed in (0, 1):
            for i, lr in enumerate(GRID):
                loss = 2.0 + (i - optimum) ** 2 + 0.01 * seed if i < 3 else float("nan")
                rows.append(
                    {"parametrization": p, "width": width, "seed": seed, "lr": lr, "held_out_loss": loss}
                )
    runs = pd.DataFrame(rows)

    def put(p: str, width: int, seed: int, i: int, loss: float) -> None:
        at = (runs.parametrization == p) & (runs.width == width) & (runs.seed == seed) & (runs.lr == GRID[i])
        runs.loc[at, "held_out_loss"] = loss

    # mup, width 64, seed 1 prefers the next rate up, by less than seed 0 prefers its own: the mean stays
    for i, loss in enumerate([2.5, 2.25, 2.0]):
        put("mup", 64, 1, i, loss)
    # mup, width 16: seed 1's lowest loss is at the rate where seed 0 diverged, so the mean skips it
    put("mup", 16, 1, 3, 1.0)
    return runs


def test_the_best_rate_is_the_lowest_finite_loss_per_width_and_seed() -> None:
    best = best_rates(synthetic_runs()).set_index(["parametrization", "width", "seed"])
    assert best.loc[("sp", 16, "0"), "grid_index"] == 2 and best.loc[("sp", 16, "0"), "lr"] == GRID[2]
    assert best.loc[("sp", 64, "1"), "loss"] == pytest.approx(2.01)
    assert best.loc[("mup", 64, "1"), "grid_index"] == 2
    assert best.loc[("mup", 16, "1"), "grid_index"] == 3  # a finite run wins over the others
    # the seed-mean: 2.5 at index 1 for mup 64 beats 0.5 more at index 2; a diverged seed's rate never wins
    assert best.loc[("mup", 64, "mean"), "grid_index"] == 1
    assert best.loc[("mup", 64, "mean"), "loss"] == pytest.approx((2.0 + 2.25) / 2)
    assert best.loc[("mup", 16, "mean"), "grid_index"] == 1


def test_the_movement_is_counted_in_grid_steps_from_narrow_to_wide() -> None:
    moved = movement(best_rates(synthetic_runs()))
    assert moved["sp"]["mean"] == {"range": 2, "narrow_to_wide": -2}
    assert moved["mup"]["mean"] == {"range": 0, "narrow_to_wide": 0}
    assert moved["mup"]["0"] == {"range": 0, "narrow_to_wide": 0}
    assert moved["mup"]["1"] == {"range": 2, "narrow_to_wide": -1}  # indices 3, 1, 2 over the widths


def test_a_missing_corpus_stops_with_one_line_and_no_results(tmp_path, capsys) -> None:
    missing = tmp_path / "nowhere.txt"
    assert main(["--data", str(missing), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(missing) in err and "tinyshakespeare" in err
    assert not (tmp_path / "out").exists()


def test_a_width_where_every_rate_diverged_has_no_best_rate() -> None:
    runs = synthetic_runs()
    runs.loc[(runs.parametrization == "sp") & (runs.width == 16), "held_out_loss"] = float("nan")
    best = best_rates(runs)
    assert set(best[best.parametrization == "sp"].width) == {32, 64}
    assert movement(best)["sp"]["mean"] == {"range": 1, "narrow_to_wide": -1}
