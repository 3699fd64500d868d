"""The command paths of the studies in experiments/ at tiny sizes: each study's preset through the
real attnlab-train (and, for the length study, attnlab-eval at other lengths and with RoPE scaling,
then attnlab-report; attnlab-eval's ``main`` runs in this process, the others in subprocesses), on a small
corpus the test writes, so no Tiny Shakespeare is needed. The
presets' own settings (the studies' sizes and optimiser) are checked in the configs the runs saved;
only the budget and, where said, the model's width are made tiny."""

from __future__ import annotations

import json
import random
import runpy
import sys
from pathlib import Path

import pytest
import yaml
from train_cli import check, command_here, jobs_in, run_command

pytestmark = pytest.mark.slow
QUICK = [
    "trainer.max_steps=2",
    "trainer.val_every_n_steps=2",
    "checkpoint.every_n_steps=2",
    "trainer.limit_val_batches=1",
    "trainer.enable_progress_bar=false",
]
SMALL_MODEL = ["model.d_model=32", "model.n_heads=2", "model.n_layers=1"]
WORDS = [
    "the",
    "king",
    "shall",
    "speak",
    "of",
    "love",
    "and",
    "death",
    "to",
    "thee",
    "my",
    "lord",
    "good",
    "night",
    "what",
    "news",
    "sweet",
]


def write_corpus(path: Path, n_chars: int = 40_000) -> Path:
    """Seeded verse-like lines of a few words: every character occurs in every split."""
    rng = random.Random(0)
    lines = []
    while sum(map(len, lines)) < n_chars:
        lines.append(" ".join(rng.choices(WORDS, k=rng.randint(3, 9))).capitalize() + rng.choice(",.;!?:"))
    path.write_text("\n".join(lines) + "\n")
    return path


def saved_config(run: Path) -> dict:
    return yaml.safe_load((run / "config.yaml").read_text())


def test_pos_extrapolation_trains_evaluates_at_other_lengths_and_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """experiment=pos_extrapolation's multirun (two of its encodings, one seed), the runs evaluated at
    64 and 256 tokens and the RoPE run also with YaRN scaling, then the report with its length plot."""
    from attnlab.cli.eval import main as evaluate

    corpus = write_corpus(tmp_path / "corpus.txt")
    runs = tmp_path / "runs"
    sweep = ["experiment=pos_extrapolation", "seed=1", "pos=learned,rope", f"hydra.sweep.dir={runs}"]
    check(command_here([*sweep, f"data.path={corpus}", *QUICK, *SMALL_MODEL], tmp_path))
    jobs = jobs_in(runs)
    # Named by what the sweep varies: the preset's seeds (fixed to one here) and the encodings.
    assert [job.name for job in jobs] == ["0_seed-1+pos-learned", "1_seed-1+pos-rope"]
    configs = [saved_config(job) for job in jobs]
    assert [c["model"]["pos"]["name"] for c in configs] == ["learned", "rope"]
    for config in configs:
        assert (config["data"]["seq_len"], config["data"]["batch_size"]) == (64, 12)
        assert config["model"]["max_seq_len"] == 1024  # learned positions can be evaluated to 1024
        loggers = [name for name, logger in config["logger"].items() if name != "tags" and logger is not None]
        assert (config["model"]["dropout"], loggers, config["seed"]) == (0.0, [], 1)
        assert config["test_after_fit"] is False
    ckpts = ",".join(str(job / "checkpoints" / "last.ckpt") for job in jobs)
    length = ["split=val", "limit_batches=1", "logger=none", "trainer.enable_progress_bar=false"]
    monkeypatch.chdir(tmp_path)
    length_sweep = ["-m", f"ckpt_path={ckpts}", "data.seq_len=64,256", *length]
    assert run_command(evaluate, length_sweep, monkeypatch, capsys) == 0, capsys.readouterr().err
    yarn = ["model.pos.rope_scaling=yarn", "model.pos.rope_factor=16", "model.pos.rope_original_max_len=64"]
    yarn_sweep = ["-m", f"ckpt_path={jobs[1]}/checkpoints/last.ckpt", "data.seq_len=256", *yarn, *length]
    assert run_command(evaluate, yarn_sweep, monkeypatch, capsys) == 0, capsys.readouterr().err

    evals = {job.name: [json.loads(p.read_text()) for p in job.glob("eval/*/*/metrics.json")] for job in jobs}
    lengths = {
        name: sorted(e["overrides"].get("data.seq_len", 64) for e in found) for name, found in evals.items()
    }
    assert list(lengths.values()) == [[64, 256], [64, 256, 256]]
    scaled = [e for e in evals[jobs[1].name] if "model.pos.rope_scaling" in e["overrides"]]
    assert [e["overrides"]["model.pos.rope_factor"] for e in scaled] == [16]
    assert all(0 < e["metrics"]["val/loss"] < 10 for found in evals.values() for e in found)

    report = check(
        command_here([str(runs), "--out", str(tmp_path / "results")], tmp_path, command="cli.report")
    )
    assert "model.pos.rope_scaling" in report.stdout
    assert (tmp_path / "results" / "plots" / "val-loss_by_length.png").stat().st_size > 0


def test_nanogpt_baby_preset_is_nanogpts_baby_configuration(tmp_path: Path) -> None:
    """experiment=nanogpt_baby at its full size for two steps: nanoGPT's baby settings, and as many
    parameters as nanoGPT's model of that size (no biases, a 64-row position table, tied output)."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    check(
        command_here(
            [
                "experiment=nanogpt_baby",
                f"data.path={corpus}",
                f"run_dir={tmp_path / 'run'}",
                "sample.max_new_tokens=0",  # no sample at the end: nothing here reads one
                *QUICK,
            ],
            tmp_path,
        )
    )
    config = saved_config(tmp_path / "run")
    model, data, optim = config["model"], config["data"], config["optim"]
    assert (model["n_layers"], model["n_heads"], model["d_model"], model["dropout"]) == (4, 4, 128, 0.0)
    assert (model["bias"], model["norm_bias"], model["max_seq_len"]) == (False, False, 64)
    assert (data["seq_len"], data["batch_size"], data["val_fraction"], data["test_fraction"]) == (
        64,
        12,
        0.1,
        0.0,
    )
    assert (optim["lr"], optim["warmup_steps"], optim["min_lr_ratio"], optim["betas"]) == (
        1e-3,
        100,
        0.1,
        [0.9, 0.99],
    )
    assert (optim["weight_decay"], optim["decay"], optim["schedule"]) == (
        0.1,
        "matrices_and_embeddings",
        "cosine",
    )
    assert config["trainer"]["gradient_clip_val"] == 1.0
    vocab = len(json.loads((tmp_path / "run" / "tokenizer.json").read_text())["model"]["vocab"])
    d, layers, block = 128, 4, 64
    nanogpt = (vocab + block) * d + layers * (12 * d * d + 2 * d) + d  # wte, wpe, blocks, ln_f
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["status"], summary["n_params"]) == ("completed", nanogpt)


def test_families_preset_runs_the_four_families_on_their_default_tasks(tmp_path: Path) -> None:
    """experiment=families: one multirun of four jobs, one per family, each on its family's task."""
    runs = tmp_path / "runs"
    check(
        command_here(
            [
                "experiment=families",
                f"hydra.sweep.dir={runs}",
                "logger=none",
                "sample.max_new_tokens=0",
                "trainer.limit_test_batches=1",
                *QUICK,
                *SMALL_MODEL,
            ],
            tmp_path,
        )
    )
    jobs = jobs_in(runs)
    assert [job.name for job in jobs] == ["0_model-gpt", "1_model-bert", "2_model-seq2seq", "3_model-vit"]
    configs = [saved_config(job) for job in jobs]
    tasks = [(c["model"]["family"], c["task"]["name"], c["data"]["kind"]) for c in configs]
    assert tasks == [
        ("gpt", "causal_lm", "text"),
        ("bert", "classification", "listops"),
        ("seq2seq", "seq2seq", "dates"),
        ("vit", "classification", "digits"),
    ]
    summaries = [json.loads((job / "summary.json").read_text()) for job in jobs]
    assert [(s["status"], s["final_step"]) for s in summaries] == [("completed", 2)] * 4


def run_script(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A study script run here as ``python <argv>`` runs it (``__main__``, its own argv)."""
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(argv[0], run_name="__main__")


VARIANTS_ON_RECALL = ["experiment=attention_variants", "data=recall", "data.seq_len=16", "data.num_val=16"]
TRAINED_VARIANTS = ["mha_rope", "gqa_alibi", "latent", "deltanet_hybrid"]  # those the report's checks name


def sweep_jobs(overrides: list[str], swept: list[str]) -> list[list[str]]:
    """The overrides of each job of ``attnlab-train -m <overrides> <swept>``, in the order its sweeper
    runs them, with nothing run: the sweeper's grid over its ``params`` and the command line's sweeps."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.utils import get_class

    from attnlab.cli.hydra.sweep_jobs import sweep_overrides
    from attnlab.run.configs import register_schemas
    from attnlab.run.presets import config_dir

    register_schemas()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        config = compose("train", overrides=overrides, return_hydra_config=True)
    grid = [*sweep_overrides(config), *OverridesParser.create().parse_overrides(swept)]
    sweeper = get_class(config.hydra.sweeper._target_)
    return [job for batch in sweeper.split_arguments(grid, None) for job in batch]


def parameters_of(overrides: list[str], datamodule: object = None) -> tuple[str, int, object]:
    """(run_name, the model's parameters as summary.json counts them, the data module) of the run of
    ``attnlab-train <overrides>``, composed and its model built, nothing trained; the data module is
    built unless given (every variant reads the same data)."""
    from attnlab.run.configs import run_config
    from attnlab.run.prepared import build_datamodule_for, build_model_for
    from attnlab.training.summary import count_parameters

    run = run_config(overrides)
    datamodule = datamodule or build_datamodule_for(run)
    return run.run_name, count_parameters(build_model_for(run, datamodule)), datamodule


def test_attention_variants_sweep_runs_every_variant_seed_by_seed_at_matched_parameters() -> None:
    """experiment=attention_variants at two seeds, composed and its models built, none trained: 32 jobs,
    every variant of seed 1, then the same of seed 2 (the interleaved order), each variant's run named
    by it, mha_rope first, and every variant's parameters within 1% of mha_rope's."""
    jobs = sweep_jobs(VARIANTS_ON_RECALL, ["seed=1,2"])
    assert len(jobs) == 32 and [job[0] for job in jobs] == ["seed=1"] * 16 + ["seed=2"] * 16
    assert [job[1:] for job in jobs[:16]] == [job[1:] for job in jobs[16:]]  # the seed is the only change
    params, datamodule = {}, None
    for job in jobs[:16]:
        name, params[name], datamodule = parameters_of(job, datamodule)
        assert f"+variant={name}" in job
    assert next(iter(params)) == "mha_rope" and len(params) == 16
    assert all(abs(n / params["mha_rope"] - 1) < 0.01 for n in params.values()), params  # matched


def test_attention_variants_trains_evaluates_and_decides_against_mha_rope(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """experiment=attention_variants on associative recall, four of its variants (the sweeper's list
    replaced on the command line) at two seeds for two steps, in the interleaved order, evaluated at 1x
    and 2x, then the report against mha_rope, whose configurations are the variants' names, and the
    study's lengths_significance.py and sizes.py."""
    from attnlab.cli.eval import main as evaluate

    runs = tmp_path / "runs" / "recall"
    sweep = [*VARIANTS_ON_RECALL, "seed=1,2", f"+variant={','.join(TRAINED_VARIANTS)}"]
    check(command_here([*sweep, f"hydra.sweep.dir={runs}", *QUICK], tmp_path))
    jobs = jobs_in(runs)
    names = [saved_config(job)["run_name"] for job in jobs]
    assert names == TRAINED_VARIANTS * 2  # every variant of seed 1, then of seed 2
    params = {
        saved_config(j)["run_name"]: json.loads((j / "summary.json").read_text())["n_params"] for j in jobs
    }
    assert all(abs(n / params["mha_rope"] - 1) < 0.01 for n in params.values())  # matched parameters
    ckpts = ",".join(str(job / "checkpoints" / "last.ckpt") for job in jobs)
    monkeypatch.chdir(tmp_path)
    length = [
        "-m",
        f"ckpt_path={ckpts}",
        "eval.lengths=[16,32]",
        "eval.examples=4",
        "eval.rope_scalings=[]",
        "split=val",
        "logger=none",
    ]
    assert run_command(evaluate, length, monkeypatch, capsys) == 0, capsys.readouterr().err
    out = tmp_path / "results" / "recall"
    check(
        command_here([str(runs), "--baseline", "mha_rope", "--out", str(out)], tmp_path, command="cli.report")
    )
    significance = (out / "significance.csv").read_text()
    assert (
        significance.splitlines()[1].startswith("run_name=mha_rope,2,") and "deltanet_hybrid" in significance
    )
    study = Path(__file__).resolve().parents[2] / "experiments" / "attention_variants"
    script = [
        str(study / "lengths_significance.py"),
        str(out / "runs.csv"),
        "--out",
        str(out),
    ]
    run_script(script, monkeypatch)
    lengths = (out / "length_significance.csv").read_text()
    assert "exact_match,32,gqa_alibi,2," in lengths and "answer_loss,16,latent,2," in lengths
    sizes = [
        str(study / "sizes.py"),
        str(tmp_path / "runs"),
        "--out",
        str(tmp_path / "results"),
    ]
    run_script(sizes, monkeypatch)
    assert "recall,deltanet_hybrid," in (tmp_path / "results" / "sizes.csv").read_text()
