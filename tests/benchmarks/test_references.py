"""The step-cost and nanoGPT train.py sections: what they run and how they read the figures.

No timing is asserted: the commands, the arithmetic of the per-step cost, nanoGPT's data files and the
parsing of both programs' output are.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest
from benchmarks.common import Settings
from benchmarks.nanogpt import whole_run
from benchmarks.nanogpt.checkout import BABY_EVAL_ITERS
from benchmarks.step_cost import lightning, references, relay, rounds

from benchmarks import step_cost


def test_attnlab_train_runs_with_its_defaults_and_validation_beyond_the_run(tmp_path) -> None:
    args = rounds.attnlab_train_argv(2401, tmp_path / "run")
    keys = {a.split("=")[0] for a in args if "=" in a}
    assert keys == {
        "model.n_layers",
        "model.d_model",
        "data.batch_size",
        "data.seq_len",
        "trainer.max_steps",
        "trainer.val_every_n_steps",
        "run_dir",
        "+callbacks.relay",
    }  # logger, checkpoints, callbacks: the defaults
    assert "trainer.val_every_n_steps=24010" in args and "trainer.max_steps=2401" in args
    assert "benchmarks.step_cost.relay.RelayCallback,name:'attnlab-train'" in args[-1]
    order = list(reversed(rounds.CONTENDERS))
    assert step_cost.command(400, 2400, order, tmp_path / "r.json") == [
        sys.executable,
        *("-m", "benchmarks.step_cost.rounds", "--first=400", "--last=2400"),
        "--order=plain loop,bare Trainer,attnlab-train",
        f"--out={tmp_path / 'r.json'}",
    ]


def test_per_step_cost_is_each_window_over_its_steps_and_the_order_rotates(monkeypatch) -> None:
    orders: list[list[str]] = []

    def fake(first: int, last: int, order: list[str], threads: int) -> dict:
        orders.append(order)
        steps = last - first
        wall = {"attnlab-train": 2e-3, "bare Trainer": 1e-3, "plain loop": 0.5e-3}
        return {name: {"steps": steps, "wall": steps * w, "cpu": steps * w / 2} for name, w in wall.items()}

    monkeypatch.setattr(step_cost, "round_times", fake)
    costs = step_cost.per_step_costs(10, 110, 3, 1)
    assert costs["wall time"]["attnlab-train"] == pytest.approx([2e-3] * 3)
    assert costs["CPU time"]["plain loop"] == pytest.approx([0.25e-3] * 3)
    assert [o[0] for o in orders] == list(rounds.CONTENDERS)  # each goes first once
    rows = step_cost.rows_of(costs["wall time"], "wall time", 10, 110, "1.0")
    assert [r.median for r in rows] == pytest.approx([2.0, 4.0])
    assert rows[0].target == 1.1 and rows[0].met is False


def test_contenders_take_turns_one_step_each_and_only_the_window_is_timed() -> None:
    turns = relay.Relay(["a", "b", "c"], first=2, last=5)
    log: list[tuple[str, int]] = []

    def contender(name: str, steps: int) -> None:
        try:
            for step in range(steps + 1):  # each reports the start of a step, then "runs" it
                turns.step(name, step)
                log.append((name, step))
        finally:
            turns.leave(name)

    threads = [threading.Thread(target=contender, args=(n, 6)) for n in ("c", "a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    paced = [entry for entry in log if entry[1] < 5]  # from step 5 on each runs unpaced
    first = paced[0][0]
    order = ["a", "b", "c"][["a", "b", "c"].index(first) :] + ["a", "b", "c"][: ["a", "b", "c"].index(first)]
    assert paced == [(name, step) for step in range(5) for name in order]
    assert {name: t["steps"] for name, t in turns.times.items()} == {"a": 3, "b": 3, "c": 3}
    assert all(t["wall"] > 0 for t in turns.times.values())


def test_a_contender_that_stops_early_leaves_the_others_going() -> None:
    turns = relay.Relay(["a", "b"], first=0, last=10)
    done = []

    def quits_at_step_2() -> None:
        for step in range(3):
            turns.step("a", step)
        turns.leave("a")  # its run failed

    def goes_on() -> None:
        for step in range(11):
            turns.step("b", step)
        done.append(True)

    threads = [threading.Thread(target=quits_at_step_2), threading.Thread(target=goes_on)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert done == [True] and turns.times["b"]["steps"] == 10 and turns.times["a"]["steps"] == 2
    with pytest.raises(ValueError, match="first=3, last=3"):
        relay.Relay(["a"], 3, 3)


@pytest.mark.slow
def test_a_round_times_the_three_contenders_in_one_process(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "round.json"
    assert rounds.main(["--first=2", "--last=6", f"--run-dir={tmp_path / 'run'}", f"--out={out}"]) == 0
    times = json.loads(out.read_text())
    assert sorted(times) == sorted(rounds.CONTENDERS)
    assert all(t["steps"] == 4 and t["wall"] > 0 and t["cpu"] > 0 for t in times.values())
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()  # attnlab-train ran as its command does


def test_bare_loop_trains_the_composed_tiny_gpt(monkeypatch) -> None:
    seen = {}
    monkeypatch.setattr(references, "fit_loop", lambda run, model, data: seen.update(run=run, model=model))
    assert references.main(["loop", "--steps", "3", *rounds.SIZE]) == 0
    run, model = seen["run"], seen["model"]
    assert (run.trainer.max_steps, run.data.batch_size, run.data.seq_len) == (3, 4, 16)
    assert (model.cfg.n_layers, model.cfg.d_model) == (1, 32) and model.cfg.vocab_size > 0


def test_without_nanogpt_dir_the_section_is_skipped_with_a_note(monkeypatch) -> None:
    monkeypatch.delenv("NANOGPT_DIR", raising=False)
    settings = Settings(size="tiny", memory=False)
    assert whole_run.run(settings) == []
    assert settings.notes == ["nanoGPT train.py: skipped (set NANOGPT_DIR to a checkout of karpathy/nanoGPT)"]


@pytest.mark.parametrize("steps", [2000, 300, 4])
def test_the_eval_budget_gives_attnlab_as_many_batches_as_nanogpt_scores(steps: int) -> None:
    every_flag, batches_flag = whole_run.nanogpt_eval_budget(steps)
    every, batches = int(every_flag.split("=")[1]), int(batches_flag.split("=")[1])
    ng_interval = int(
        next(a for a in whole_run.nanogpt_command(Path("ng"), steps) if "eval_interval" in a).split("=")[1]
    )
    assert every == ng_interval
    nanogpt_batches = (steps // ng_interval + 1) * 2 * BABY_EVAL_ITERS  # steps 0, every, ..., both splits
    attnlab_validations = -(-steps // every)  # every, 2 every, ..., and the final step
    assert nanogpt_batches <= attnlab_validations * batches < nanogpt_batches + attnlab_validations
    if steps == 2000:
        assert (every, batches) == (250, 45)  # 9 x 40 = 360 = 8 x 45


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
    rate, val = whole_run.nanogpt_rate(nanogpt)
    assert rate == pytest.approx(12 * 64 / 0.1) and val == "3.9000"  # iteration 0 (startup) left out
    attnlab = "\n".join(
        [
            "step 10/20 | loss 2.1 | lr 1.00e-04 | grad_norm 1.9 | tokens/s 7000 | elapsed 0:00:01",
            "step 20/20 | loss 2.0 | lr 1.00e-04 | grad_norm 1.9 | tokens/s 8000 | elapsed 0:00:02",
            "step 20/20 | val/bpb 2.726 | val/loss 1.888 | val/ppl 6.61 | elapsed 0:00:03",
        ]
    )
    assert whole_run.attnlab_rate(attnlab) == (7500.0, "1.888")


def test_the_scored_checkpoint_keeps_nanogpts_estimates_and_median_iteration_from_its_console() -> None:
    from benchmarks.nanogpt.val_loss import console_figures

    console = "\n".join(
        [
            "Overriding: seed = 1338",
            "step 0: train loss 4.2164, val loss 4.2084",
            "iter 0: loss 4.2000, time 900.00ms, mfu -100.00%",
            "iter 1: loss 4.1000, time 150.00ms, mfu 0.01%",
            "step 2: train loss 2.4254, val loss 2.4521",
            "iter 2: loss 4.0000, time 3000.00ms, mfu 0.01%",
            "iter 3: loss 3.9000, time 97.50ms, mfu 0.01%",
        ]
    )
    figures = console_figures(console)
    assert figures["estimate_loss"] == {0: 4.2084, 2: 2.4521}
    assert figures["median_iteration_ms"] == 150.0  # of 150, 3000 and 97.5: iteration 0 left out


def test_the_lightning_overhead_section_runs_a_bare_step_at_each_batch_and_times_both() -> None:
    from types import SimpleNamespace

    ran: list[int] = []

    def bare():
        for step in range(6):
            ran.append(step)
            yield

    turns = lightning.BareTurns(bare(), first=2)
    for step in range(6):  # Lightning's batch starts; the bare loop's step runs inside each
        turns.on_train_batch_start(SimpleNamespace(global_step=step))
    assert ran == [0, 1, 2, 3, 4, 5]
    # bare steps 2-5 timed; Lightning's steps 2-4 (its last one, 5, has no next batch to end it)
    assert turns.times[lightning.BARE]["steps"] == 4 and turns.times[lightning.LIGHTNING]["steps"] == 3
