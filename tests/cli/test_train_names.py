"""Runs with names and what compares them: a multirun's jobs are named in
wandb, and their folders (which TensorBoard lists), by the overrides their sweep varies; TensorBoard's
HParams tab gets the flattened config with
the best monitored value; the parameter count, the gradient norm and the final sample are logged;
a sweep's console (a pipe here) gets a line per job and a table, its jobs' logs plain progress lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer
from tensorboard.plugins.hparams import plugin_data_pb2
from train_cli import TEXT, TINY, check, command_here, job_dirs, wandb_records, wandb_run

pytestmark = pytest.mark.slow
GPT = [*TINY, *TEXT, "model=gpt-tiny", "logger=many"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], str]:
    cwd = tmp_path_factory.mktemp("names")
    result = check(command_here(["-m", "model.n_layers=1,2", *GPT], cwd))
    return job_dirs(cwd), result.stdout


def tensorboard(job: Path) -> EventAccumulator:
    events = EventAccumulator(str(job / "tensorboard"), size_guidance={"tensors": 0, "scalars": 0})
    events.Reload()
    return events


def test_jobs_are_named_by_what_their_sweep_varies(sweep) -> None:
    jobs, _ = sweep
    assert [wandb_run(job)["display_name"] for job in jobs] == ["model.n_layers=1", "model.n_layers=2"]
    for job, layers in zip(jobs, (1, 2)):
        content = tensorboard(job).PluginTagToContent("hparams")["_hparams_/session_start_info"]
        hparams = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
        assert hparams["run_name"].string_value == f"model.n_layers={layers}"
        assert hparams["model.n_layers"].number_value == layers


def test_job_folders_are_named_by_their_number_and_what_their_sweep_varies(sweep) -> None:
    jobs, _ = sweep
    assert [job.name for job in jobs] == ["0_model.n_layers-1", "1_model.n_layers-2"]
    runs = EventMultiplexer().AddRunsFromDirectory(str(jobs[0].parent)).Runs()  # TensorBoard's run list
    assert sorted(runs) == ["0_model.n_layers-1/tensorboard", "1_model.n_layers-2/tensorboard"]


def test_tensorboard_hparams_hold_the_config_the_parameter_count_and_the_best_value(sweep) -> None:
    jobs, _ = sweep
    for job in jobs:
        summary = json.loads((job / "summary.json").read_text())
        events = tensorboard(job)
        content = events.PluginTagToContent("hparams")
        hparams = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
        assert hparams.session_start_info.hparams["n_params"].number_value == summary["n_params"]
        experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
        assert [m.name.tag for m in experiment.metric_infos] == ["best/val/loss"]
        (best,) = events.Scalars("best/val/loss")
        assert best.value == pytest.approx(summary["best"]["value"])
        assert len(events.Scalars("train/grad_norm")) == 6  # every logging step (log_every_n_steps=1)
        (sample,) = events.Tensors("sample/text_summary")
        assert sample.tensor_proto.string_val[0].decode().startswith("The ")


def test_wandb_gets_the_parameter_count_the_best_value_and_the_sample(sweep) -> None:
    jobs, _ = sweep
    for job in jobs:
        summary = json.loads((job / "summary.json").read_text())
        records = wandb_records(job)
        assert wandb_run(job)["config"]["update"]["n_params"] == summary["n_params"]
        final: dict = {}
        for record in records:
            if record["type"] == "summary":
                final.update(record["summary"]["update"])
        assert final["best/val/loss"] == pytest.approx(summary["best"]["value"])
        assert (
            final["sample"].startswith("The ") and final["sample"].strip() in (job / "train.log").read_text()
        )
        grad_norms = [json.loads(line).get("train/grad_norm") for line in (job / "metrics.jsonl").open()]
        assert len([g for g in grad_norms if g is not None and g > 0]) == 6


def test_a_sweep_prints_a_line_per_job_and_a_table_and_its_jobs_log_plain_progress_lines(sweep) -> None:
    """The console (a pipe here) gets Hydra's "Launching" line, one line per job when it ends and the
    table of the jobs (a 6-job sweep printed 1,241 lines); each job's train.log has its
    progress lines, plain ones (not a bar)."""
    jobs, stdout = sweep
    lines = stdout.splitlines()
    assert len(lines) == 1 + 2 + 3, stdout
    assert "Launching 2 jobs" in lines[0]
    for number, job in enumerate(jobs):
        (line,) = [line for line in lines if line.startswith(f"job {number} (")]
        assert line.startswith(f"job {number} (model.n_layers={number + 1}): best val/loss ")
        assert line.endswith(str(job)) and " | test/loss " in line
    header, *rows = lines[3:]
    assert header.split()[:4] == ["job", "run", "status", "best"]
    assert [row.split()[:3] for row in rows] == [
        ["0", "model.n_layers=1", "completed"],
        ["1", "model.n_layers=2", "completed"],
    ]
    log = (jobs[0] / "train.log").read_text()
    progress = [
        line.split(" - ", 1)[1] for line in log.splitlines() if " - step " in line and " | loss " in line
    ]
    assert [line.split(" | ")[0] for line in progress] == [f"step {k}/6" for k in range(1, 7)]
    assert all(" | elapsed " in line for line in progress)  # no progress bar ("step 3/6 ━━━━━ 0:00:01 < ...")
