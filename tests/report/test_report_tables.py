"""The report's tables: which keys are shown, one row per job, mean ± std over seeds, evaluations."""

from __future__ import annotations

from pathlib import Path

import pytest
from rundirs import config, val_losses, write_eval, write_run

from attnlab.report import read_sweep
from attnlab.report.table import eval_table, format_number, job_table, seed_table, shown_keys, swept_keys

FINALS = {"learned": (2.0, 2.1, 2.2), "alibi": (1.8, 1.9, 2.0)}


def pos_seed_sweep(root: Path, *, failed_seed: int | None = None) -> Path:
    """pos=learned,alibi x seed=1,2,3 as a multirun lays it out; alibi's ``failed_seed`` failed."""
    job = 0
    for pos, finals in FINALS.items():
        for seed, final in zip((1, 2, 3), finals):
            cfg = config(model__pos__name=pos, seed=seed, run_dir=f"/runs/{job}")
            if pos == "alibi" and seed == failed_seed:
                write_run(root / str(job), cfg, status="failed", error="ValueError: boom", val={})
            else:
                write_run(root / str(job), cfg, val=val_losses(final), test={"test/loss": final + 0.05})
            job += 1
    return root


def test_only_keys_that_differ_are_swept(tmp_path: Path) -> None:
    pos_seed_sweep(tmp_path)
    configs = read_sweep([tmp_path]).configs
    assert swept_keys(configs) == ["model.pos.name", "seed"]  # run_dir differs too: bookkeeping
    assert configs["optim.betas"].iloc[0] == "[0.9, 0.99]"  # lists compare as values


def test_keys_that_move_in_lockstep_show_once(tmp_path: Path) -> None:
    write_run(tmp_path / "0", config(model__family="gpt", data__kind="text", model__n_layers=2))
    write_run(tmp_path / "1", config(model__family="vit", data__kind="digits", model__n_layers=2))
    write_run(tmp_path / "2", config(model__family="vit", data__kind="digits", model__n_layers=4))
    shown, hidden = shown_keys(read_sweep([tmp_path]).configs)
    assert shown == ["model.family", "model.n_layers"]
    assert hidden == {"data.kind": "model.family"}


def test_a_swept_run_name_labels_its_configuration(tmp_path: Path) -> None:
    """Named configurations (experiment=attention_variants' conf/variant/ presets): the name is the
    label and the keys it determines are hidden behind it, though they come first in the config."""
    named = [("mha_alibi", "alibi", None), ("gqa_rope", "rope", 2), ("mha_rope", "rope", None)]
    for job, (name, pos, kv) in enumerate(named):
        write_run(tmp_path / str(job), config(model__pos__name=pos, model__n_kv_heads=kv, run_name=name))
    shown, hidden = shown_keys(read_sweep([tmp_path]).configs)
    assert shown == ["run_name"]
    assert hidden == {"model.n_kv_heads": "run_name", "model.pos.name": "run_name"}


def test_keys_a_shown_key_determines_show_once(tmp_path: Path) -> None:
    """rope_base is set for RoPE only: the position name says all it says, though not one to one."""
    for job, (pos, base) in enumerate([("learned", None), ("alibi", None), ("rope", 10000.0)]):
        write_run(tmp_path / str(job), config(model__pos__name=pos, model__pos__rope_base=base))
    shown, hidden = shown_keys(read_sweep([tmp_path]).configs)
    assert shown == ["model.pos.name"]
    assert hidden == {"model.pos.rope_base": "model.pos.name"}


def test_the_steps_a_compute_budget_buys_follow_the_budget(tmp_path: Path) -> None:
    """A scaling sweep: the budget and the width are swept, the steps derived from both (each steps
    value alone names its budget, yet the budget is the key that was swept)."""
    runs = [(1e11, 16, 1281), (1e11, 32, 436), (4e11, 16, 5125), (4e11, 32, 1745)]
    for job, (budget, width, steps) in enumerate(runs):
        cfg = config(trainer__compute_budget=budget, trainer__max_steps=steps, model__d_model=width)
        write_run(tmp_path / str(job), cfg)
    shown, hidden = shown_keys(read_sweep([tmp_path]).configs)
    assert set(shown) == {"model.d_model", "trainer.compute_budget"}
    assert hidden == {"trainer.max_steps": "trainer.compute_budget"}


def test_a_batch_per_budget_is_labelled_by_the_budget(tmp_path: Path) -> None:
    """Each budget with its own batch size: either key names the other; the budget is shown."""
    runs = [(1e11, 4, 16), (1e11, 4, 32), (4e11, 16, 16), (4e11, 16, 32)]
    for job, (budget, batch, width) in enumerate(runs):
        write_run(
            tmp_path / str(job),
            config(trainer__compute_budget=budget, data__batch_size=batch, model__d_model=width),
        )
    shown, hidden = shown_keys(read_sweep([tmp_path]).configs)
    assert set(shown) == {"model.d_model", "trainer.compute_budget"}
    assert hidden == {"data.batch_size": "trainer.compute_budget"}


def test_values_show_as_the_configs_hold_them(tmp_path: Path) -> None:
    """A key null in one run and a number in another is no float column: 128, not 128.0."""
    write_run(tmp_path / "0", config(model__max_seq_len=None, optim__lr=1.0))
    write_run(tmp_path / "1", config(model__max_seq_len=128, optim__lr=1.0))
    write_run(tmp_path / "2", config(model__max_seq_len=128, optim__lr=0.5))
    table = job_table(read_sweep([tmp_path]))
    assert table["model.max_seq_len"].tolist() == ["null", "128", "128"]
    assert table["optim.lr"].tolist() == ["1.0", "1.0", "0.5"]


def test_job_table_has_one_row_per_job_and_the_failed_ones_error(tmp_path: Path) -> None:
    table = job_table(read_sweep([pos_seed_sweep(tmp_path, failed_seed=2)]))
    assert table["job"].tolist() == ["0", "1", "2", "3", "4", "5"]
    assert table.columns[:4].tolist() == ["job", "model.pos.name", "seed", "status"]
    assert table["status"].tolist() == ["completed"] * 4 + ["failed", "completed"]
    assert table["error"].tolist() == [""] * 4 + ["ValueError: boom", ""]
    assert table["val/loss best"].tolist() == ["2", "2.1", "2.2", "1.8", "", "2"]
    assert table["params"].iloc[0] == "12,345"


def test_seeds_of_a_configuration_become_mean_and_std(tmp_path: Path) -> None:
    table = seed_table(read_sweep([pos_seed_sweep(tmp_path, failed_seed=2)])).set_index("model.pos.name")
    assert table.loc["learned", "val/loss best"] == "2.1 ± 0.1"
    assert table.loc["learned", "test/loss"] == "2.15 ± 0.1"
    assert table.loc["learned", "n"] == 3
    assert table.loc["learned", "status"] == "3 completed"
    assert table.loc["alibi", "val/loss best"] == "1.9 ± 0.14"  # the failed seed is not in the mean
    assert table.loc["alibi", "n"] == 2
    assert table.loc["alibi", "status"] == "2 completed, 1 failed"
    assert table.loc["alibi", "params"] == "12,345"  # equal over seeds: no ± 0


def test_a_configuration_whose_seeds_all_failed_keeps_its_row(tmp_path: Path) -> None:
    pos_seed_sweep(tmp_path)
    for job in (6, 7):
        cfg = config(model__pos__name="rope", seed=job - 5)
        write_run(tmp_path / str(job), cfg, status="failed", error="ValueError: boom", val={})
    table = seed_table(read_sweep([tmp_path])).set_index("model.pos.name")
    assert table.loc["rope", "status"] == "2 failed"
    assert table.loc["rope", "n"] == 0
    assert table.loc["rope", "val/loss best"] == ""


def test_no_seed_table_without_repeated_seeds(tmp_path: Path) -> None:
    write_run(tmp_path / "0", config(model__pos__name="rope"))
    write_run(tmp_path / "1", config(model__pos__name="alibi"))
    assert seed_table(read_sweep([tmp_path])) is None


def test_evaluations_by_configuration_and_length(tmp_path: Path) -> None:
    pos_seed_sweep(tmp_path)
    for job in range(6):
        for length, extra in ((64, 0.0), (256, 0.1 * job)):
            write_eval(
                tmp_path / str(job),
                f"e/{length}",
                {"val/loss": 2.0 + extra},
                overrides={"data.seq_len": length},
            )
    table = eval_table(read_sweep([tmp_path]))
    assert table.columns.tolist() == ["model.pos.name", "eval data.seq_len", "split", "ckpt", "n", "val/loss"]
    rows = table.set_index(["model.pos.name", "eval data.seq_len"])["val/loss"]
    assert rows[("learned", "64")] == "2"
    assert rows[("learned", "256")] == "2.1 ± 0.1"  # jobs 0, 1, 2
    assert rows[("alibi", "256")] == "2.4 ± 0.1"  # jobs 3, 4, 5
    assert table["n"].tolist() == [3, 3, 3, 3]


def test_an_evaluation_at_the_trained_length_shows_that_length(tmp_path: Path) -> None:
    """attnlab-eval records only what it changed: the evaluation at 64 has no override, yet its row
    says 64 (the run's own length), not null."""
    pos_seed_sweep(tmp_path)
    for job in range(6):
        write_eval(tmp_path / str(job), "e/64", {"val/loss": 2.0})
        write_eval(tmp_path / str(job), "e/256", {"val/loss": 3.0}, overrides={"data.seq_len": 256})
    table = eval_table(read_sweep([tmp_path]))
    assert sorted(table["eval data.seq_len"].unique()) == ["256", "64"]


@pytest.mark.parametrize(
    ("value", "digits", "text"),
    [
        (12345.6, 4, "12,346"),
        (2.34567, 4, "2.346"),
        (0.000123, 4, "0.000123"),
        (921.0, 2, "921"),
        (9.61, 2, "9.6"),
    ],
)
def test_numbers_read_at_a_glance(value: float, digits: int, text: str) -> None:
    assert format_number(value, digits) == text
