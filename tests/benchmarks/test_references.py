"""The step-cost and nanoGPT train.py sections: what they run and how they read the figures.

No timing is asserted: the commands, the arithmetic of the per-step cost, nanoGPT's data files and the
parsing of both programs' output are.
"""

from __future__ import annotations

import json
import sys

import pytest
from benchmarks.common import Settings

from benchmarks import bare_fit, nanogpt_run, step_cost, step_window


def test_attnlab_train_runs_with_its_defaults_and_validation_beyond_the_run(tmp_path) -> None:
    window = tmp_path / "window.json"
    args = step_cost.command("attnlab-train", 400, 2400, window, tmp_path)
    keys = {a.split("=")[0] for a in args if "=" in a}
    assert keys == {
        "model.n_layers",
        "model.d_model",
        "data.batch_size",
        "data.seq_len",
        "trainer.max_steps",
        "trainer.val_every_n_steps",
        "run_dir",
        "+callbacks.step_window",
    }  # logger, checkpoints, callbacks: the defaults
    assert "trainer.val_every_n_steps=24010" in args and "trainer.max_steps=2401" in args
    assert f"first:400,last:2400,out:'{window}'" in args[-1]
    bare = step_cost.command("bare Trainer", 400, 2400, window, tmp_path)
    assert bare == [
        sys.executable,
        *("-m", "benchmarks.bare_fit", "trainer", "--steps=2401"),
        *("--window", "400", "2400", str(window)),
        *step_cost.SIZE,
    ]


def test_per_step_cost_is_the_window_over_its_steps_and_turns_alternate(monkeypatch) -> None:
    calls: list[str] = []

    def fake(contender: str, first: int, last: int, threads: int) -> dict:
        calls.append(contender)
        wall = (last - first) * 1e-3 * (2 if contender == "attnlab-train" else 1)
        return {"steps": last - first, "wall": wall, "cpu": wall / 2}

    monkeypatch.setattr(step_cost, "window_seconds", fake)
    costs = step_cost.per_step_costs(10, 110, 2, 1)
    assert costs["wall time"]["attnlab-train"] == pytest.approx([2e-3, 2e-3])
    assert costs["CPU time"]["plain loop"] == pytest.approx([0.5e-3, 0.5e-3])
    assert calls == [*step_cost.CONTENDERS, *step_cost.CONTENDERS[::-1]]
    rows = step_cost.rows_of(costs["CPU time"], "CPU time", 10, 110, "1.0")
    assert [r.median for r in rows] == pytest.approx([2.0, 2.0])
    assert rows[0].target == 1.1 and rows[0].met is False


@pytest.mark.parametrize("kind", ["loop", "trainer"])
def test_the_references_time_the_steps_of_their_window(kind: str, tmp_path) -> None:
    window = tmp_path / "window.json"
    assert bare_fit.main([kind, "--steps", "6", "--window", "2", "5", str(window), *step_cost.SIZE]) == 0
    timed = json.loads(window.read_text())
    assert timed["steps"] == 3 and timed["cpu"] > 0 and timed["wall"] > 0


def test_a_window_the_run_never_reaches_writes_nothing(tmp_path) -> None:
    clock = step_window.WindowClock(2, 5, str(tmp_path / "window.json"))
    for step in range(5):
        clock.at_step(step)
    assert not (tmp_path / "window.json").exists()
    with pytest.raises(ValueError, match="first=5, last=5"):
        step_window.WindowClock(5, 5, "x")


def test_bare_loop_trains_the_composed_tiny_gpt(monkeypatch) -> None:
    seen = {}
    monkeypatch.setattr(
        bare_fit, "fit_loop", lambda run, model, data, window: seen.update(run=run, model=model)
    )
    assert bare_fit.main(["loop", "--steps", "3", *step_cost.SIZE]) == 0
    run, model = seen["run"], seen["model"]
    assert (run.trainer.max_steps, run.data.batch_size, run.data.seq_len) == (3, 4, 16)
    assert (model.cfg.n_layers, model.cfg.d_model) == (1, 32) and model.cfg.vocab_size > 0


def test_without_nanogpt_dir_the_section_is_skipped_with_a_note(monkeypatch) -> None:
    monkeypatch.delenv("NANOGPT_DIR", raising=False)
    settings = Settings(size="tiny", memory=False)
    assert nanogpt_run.run(settings) == []
    assert settings.notes == ["nanoGPT train.py: skipped (set NANOGPT_DIR to a checkout of karpathy/nanoGPT)"]


def test_throughput_and_val_loss_are_read_from_both_programs_output() -> None:
    nanogpt = "\n".join(
        [
            "step 0: train loss 4.2000, val loss 4.2100",
            "iter 0: loss 4.2000, time 900.00ms, mfu -100.00%",
            "iter 1: loss 4.1000, time 100.00ms, mfu 0.01%",
            "iter 2: loss 4.0000, time 96.00ms, mfu 0.01%",
            "iter 3: loss 3.9000, time 104.00ms, mfu 0.01%",
            "step 4: train loss 3.8000, val loss 3.9000",
        ]
    )
    rate, val = nanogpt_run.nanogpt_rate(nanogpt)
    assert rate == pytest.approx(12 * 64 / 0.1) and val == "3.9000"  # iteration 0 (startup) left out
    attnlab = "\n".join(
        [
            "step 10/20 | loss 2.1 | lr 1.00e-04 | grad_norm 1.9 | tokens/s 7000 | elapsed 0:00:01",
            "step 20/20 | loss 2.0 | lr 1.00e-04 | grad_norm 1.9 | tokens/s 8000 | elapsed 0:00:02",
            "step 20/20 | val/loss 1.888 | val/ppl 6.61 | elapsed 0:00:03",
        ]
    )
    assert nanogpt_run.attnlab_rate(attnlab) == (7500.0, "1.888")
