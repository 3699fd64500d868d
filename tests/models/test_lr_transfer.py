"""The learning-rate transfer study's bookkeeping (experiments/mup/lr_transfer.py): on a synthetic
table whose best rates are known, the best rate per width and seed, on the seed-mean, and its movement
across widths in grid steps and factors of 2; its options (seeds, widths, arms, per-arm x2 grids) and
the merge of lanes on a few steps of tiny models; and bad input stops it with one line."""

from __future__ import annotations

import json
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
    moved = movement(best_rates(synthetic_runs()), {"sp": 4.0, "mup": 4.0})
    assert moved["sp"]["mean"] == moves(2, -2, factor=4)
    assert moved["mup"]["mean"] == moves(0, 0, factor=4)
    assert moved["mup"]["0"] == moves(0, 0, factor=4)
    assert moved["mup"]["1"] == moves(2, -1, factor=4)  # indices 3, 1, 2 over the widths


def moves(spread: int, shift: int, factor: int) -> dict:
    per_step = {2: 1, 4: 2}[factor]
    return {
        "range": spread,
        "narrow_to_wide": shift,
        "range_in_factors_of_2": spread * per_step,
        "narrow_to_wide_in_factors_of_2": shift * per_step,
    }


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
    assert movement(best, {"sp": 4.0, "mup": 4.0})["sp"]["mean"] == moves(1, -1, factor=4)


def tiny_corpus(path: Path) -> Path:
    path.write_text("To be, or not to be, that is the question.\n" * 60, encoding="utf-8")
    return path


def test_the_options_run_each_arm_on_its_own_x2_grid_and_count_moves_in_factors_of_2(tmp_path) -> None:
    data, out = tiny_corpus(tmp_path / "text.txt"), tmp_path / "out"
    options = ["--steps", "2", "--seeds", "0", "1", "--widths", "8", "16", "--arms", "sp", "mup-tied"]
    assert (
        main(
            [
                "--data",
                str(data),
                *options,
                "--sp-rates",
                "9",
                "8",
                "--mup-rates",
                "7",
                "6",
                "5",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    runs = pd.read_csv(out / "lr_transfer.csv")
    assert (
        set(runs.parametrization) == {"sp", "mup-tied"}
        and set(runs.width) == {8, 16}
        and set(runs.seed) == {0, 1}
    )
    assert sorted(runs[runs.parametrization == "sp"].lr.unique()) == [2.0**-9, 2.0**-8]
    assert sorted(runs[runs.parametrization == "mup-tied"].lr.unique()) == [2.0**-7, 2.0**-6, 2.0**-5]
    summary = json.loads((out / "lr_transfer.json").read_text())
    assert summary["grid_factor"] == {"sp": 2.0, "mup-tied": 2.0} and summary["base_width"] == 16
    for seeds in summary["movement_in_grid_steps"].values():
        for moved in seeds.values():  # a x2 grid: one grid step is one factor of 2
            assert moved["range_in_factors_of_2"] == moved["range"]


def test_the_tied_arm_trains_a_tied_mup_model_that_differs_from_the_untied_one(tmp_path) -> None:
    data = tiny_corpus(tmp_path / "text.txt")
    common = ["--data", str(data), "--steps", "2", "--seeds", "0", "--widths", "32", "--mup-rates", "6"]
    assert main([*common, "--arms", "mup", "mup-tied", "--out", str(tmp_path / "out")]) == 0
    losses = pd.read_csv(tmp_path / "out" / "lr_transfer.csv").set_index("parametrization").held_out_loss
    assert losses["mup"] != pytest.approx(losses["mup-tied"], abs=1e-4)


def test_lanes_merged_give_the_runs_and_best_rates_of_one_joint_run(tmp_path) -> None:
    data = tiny_corpus(tmp_path / "text.txt")
    common = ["--data", str(data), "--steps", "2", "--widths", "8", "16", "--sp-rates", "8", "7", "6"]
    assert main([*common, "--seeds", "0", "1", "--out", str(tmp_path / "joint")]) == 0
    for seed in ("0", "1"):
        assert main([*common, "--seeds", seed, "--out", str(tmp_path / f"lane{seed}")]) == 0
    assert (
        main(["--merge", str(tmp_path / "lane0"), str(tmp_path / "lane1"), "--out", str(tmp_path / "merged")])
        == 0
    )
    key = ["parametrization", "width", "seed", "lr"]
    joint, merged = (
        pd.read_csv(tmp_path / d / "lr_transfer.csv").sort_values(key) for d in ("joint", "merged")
    )
    pd.testing.assert_frame_equal(joint.reset_index(drop=True), merged.reset_index(drop=True))
    best = [json.loads((tmp_path / d / "lr_transfer.json").read_text())["best"] for d in ("joint", "merged")]
    assert best[0] == best[1]


@pytest.mark.parametrize(
    "args, named",
    [
        (["--sp-rates", "11", "10", "8"], "--sp-rates 11 10 8"),
        (["--mup-rates", "6", "6"], "--mup-rates 6 6"),
        (["--merge", "nowhere"], "--merge nowhere"),
    ],
)
def test_an_uneven_grid_or_a_folder_without_runs_stops_with_one_line(tmp_path, capsys, args, named) -> None:
    data = tiny_corpus(tmp_path / "text.txt")
    assert main(["--data", str(data), *args, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err
    assert not (tmp_path / "out").exists()
