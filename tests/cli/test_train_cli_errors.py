"""Bad configurations stop ``attnlab-train`` before anything starts: exit status 2, one line
``error: key=value: what is allowed``, no traceback, and no run directory left behind.

The commands run in this process (``command_here``: the console script's ``main``, its exit status and
what it printed); one test starts an interpreter, for what only a new one shows: the modules that
validation imports."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from train_cli import RunsCode, command_here

import processes

NO_GPU = "this machine has no GPU; on the CPU use trainer=cpu (one process), or trainer=ddp_sim (DDP over 2"
needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has a GPU")
SMALL_DATES = ["data.num_train=64", "data.num_val=8", "data.num_test=8"]

CASES = [
    (["pos=spiral"], "pos=spiral: choose one of alibi, learned, none, relative, rope, sinusoidal"),
    (["model=gpt3"], "model=gpt3: choose one of"),
    (["logger=comet"], "logger=comet: choose one of csv, many, none, tensorboard, wandb"),
    (["trainer=tpu"], "trainer=tpu: choose one of"),
    (["model.d_model=abc"], "model.d_model=abc: Value 'abc' of type 'str' could not be converted to Integer"),
    (["model.n_haeds=2"], "model.n_haeds=2: not a known key; did you mean model.n_heads?"),
    (["+model.depth=2"], "model.depth=2: not a known key"),
    (["model.n_heads=3"], "model.d_model=128: must be divisible by model.n_heads=3"),
    (["model.n_kv_heads=3"], "model.n_kv_heads=3: must divide model.n_heads=4"),
    (["model.d_model=-64"], "model.d_model=-64: must be positive"),
    (["model.d_ff=-1"], "model.d_ff=-1: must be 0 or more"),
    (
        ["model.pos.name=spiral"],
        "model.pos.name=spiral: choose one of none, sinusoidal, learned, rope, alibi, relative",
    ),
    (["model.norm=batchnorm"], "model.norm=batchnorm: choose one of layernorm, rmsnorm"),
    (["model.attn_backend=xla"], "model.attn_backend=xla: choose one of sdpa, flex"),
    (
        ["model.attn_backend=flex"],
        "model.attn_backend=flex: FlexAttention has no backward on CPU in torch 2.13; train with sdpa, "
        "evaluate or sample with flex",
    ),
    (
        ["model.attn_backend=flex", "model.attn_dropout=0.1"],
        "model.attn_dropout=0.1: FlexAttention (model.attn_backend=flex) has no dropout on the attention",
    ),
    (["model.activation=tanh"], "model.activation=tanh: choose one of relu, gelu"),
    (["model.dropout=1.5"], "model.dropout=1.5: must be in [0, 1)"),
    (["optim.lr=nan"], "optim.lr=nan: must be a finite number (not nan, inf or -inf)"),
    (["optim.lr=inf"], "optim.lr=inf: must be a finite number"),
    (["trainer.gradient_clip_val=nan"], "trainer.gradient_clip_val=nan: must be a finite number"),
    (["model=vit", "data.std=[inf]"], "data.std=[inf]: must hold finite numbers (not nan, inf or -inf)"),
    (["model.pos.rope_base=-inf", "pos=rope"], "model.pos.rope_base=-inf: must be a finite number"),
    (["model=vit", "data=text"], "data.kind=text: cannot be consumed by model.family='vit'"),
    (["data.seq_len=1024"], "data.seq_len=1024: must be at most model.max_seq_len=256 with pos=learned"),
    (
        ["model=vit", "model.image_size=31"],
        "model.image_size=31: must be divisible into patches of model.patch_size=2",
    ),
    (["data.batch_size=0"], "data.batch_size=0: must be at least 1"),
    (["model.attn_window=0"], "model.attn_window=0: must be positive"),
    (["model.attn_window=wide"], "model.attn_window=wide: Value 'wide' of type 'str' could not be converted"),
    (
        ["model=vit", "model.attn_window=17"],
        "model.attn_window=17: a window this wide covers all 17 tokens of an image and changes nothing",
    ),
    (["model.qk_norm=maybe"], "model.qk_norm=maybe: Value 'maybe' is not a valid bool"),
    (
        ["model=vit", "data.packing=documents"],
        "data.packing=documents: not a key of data.kind=digits; it is a key of data.kind=text",
    ),
    (
        ["model=seq2seq-tiny", "data.packing=documents"],
        "data.packing=documents: not a key of data.kind=dates; it is a key of data.kind=text",
    ),
    (
        ["data.path=corpus.txt", "data.packing=documents"],
        "data.packing=documents: needs document boundaries in data.path='corpus.txt': set data.document_separator",
    ),
    (
        ["model=bert", "task=mlm", "data=text", "data.packing=padded"],
        "data.packing=padded: is a causal-LM baseline; task.name=mlm",
    ),
    (["data.document_mask=false"], "data.document_mask=false: applies to data.packing=documents only"),
    (["data.packing=zip"], "data.packing=zip: choose one of none, documents, padded"),
    (
        ["optim.schedule=step"],
        "optim.schedule=step: choose one of constant, cosine, linear, noam",
    ),
    (
        ["optim=muon", "optim.betas=[0.9,0.95]"],
        "optim.betas=[0.9,0.95]: not a key of optim.name=muon (did you mean optim.adamw.betas?)",
    ),
    (["optim=muon", "optim.ns_steps=0"], "optim.ns_steps=0: must be in 1..99"),
    (["optim=muon", "trainer=fsdp"], "optim.name=muon: cannot run under trainer.strategy=fsdp"),
    (["trainer=fsdp2_sim", "compile=true"], "compile=true: compiles the whole model, across the units"),
    (
        ["trainer=fsdp2_sim", "task.log_attention_every_n_epochs=1"],
        "task.log_attention_every_n_epochs=1: draws its maps from a forward on process 0 alone, which "
        "trainer.strategy=fsdp2 cannot run",
    ),
    (
        ["trainer=tp_sim", "task.log_attention_every_n_epochs=2"],
        "task.log_attention_every_n_epochs=2: draws its maps from a forward on process 0 alone",
    ),
    pytest.param(
        ["trainer.float8=true"],
        "trainer.float8=true: float8 matrix products need a GPU of compute capability 8.9+",
        marks=needs_no_gpu,
    ),
    (
        ["trainer.activation_checkpointing=some"],
        "trainer.activation_checkpointing=some: choose one of none, full, selective",
    ),
    (["trainer.precision=64"], "trainer.precision=64: choose one of 32, bf16-mixed, 16-mixed"),
    (["trainer.devices=0"], "trainer.devices=0: a positive count, -1 or auto (all), or a list of device ids"),
    (["logger.wandb.mode=cloud"], "logger.wandb.mode=cloud: choose one of offline, online, disabled"),
    (["+logger.comet={}"], "logger.comet={}: not a known key; allowed keys: wandb, csv, tensorboard"),
    (
        ["+callbacks.x={_target_:nonexistent.Cls}"],
        "callbacks.x._target_=nonexistent.Cls: the import path of a Callback subclass (package.module.Class); "
        "not importable (ModuleNotFoundError)",
    ),
    *(
        (
            [f"{key}={value}"],
            f"callbacks={value}: choose options of the callbacks group (default, early_stopping, harness, or a "
            "list of "
            "them); add a callback of your own by a name: '+callbacks.<name>={_target_: package.Class}'",
        )
        for key, value in [
            ("callbacks", "[{_target_:nonexistent.Cls}]"),  # a Hydra traceback before
            ("+callbacks", "[{_target_:pytorch_lightning.callbacks.Timer}]"),
            ("callbacks", "{_target_:nonexistent.Cls}"),
        ]
    ),
    (["callbacks=harness"], "callbacks.harness.tasks=[]: give a list of lm-evaluation-harness task names"),
    (
        ["callbacks=harness", "callbacks.harness.tasks=[t]", "callbacks.harness.every_n_steps=0"],
        "callbacks.harness.every_n_steps=0: must be a whole number >= 1",
    ),
    *(  # rank 0 alone cannot score a model sharded across processes
        (
            [f"trainer={name}", "callbacks=harness", "callbacks.harness.tasks=[t]"],
            "trainer.strategy=fsdp2: callbacks.harness scores the model on rank 0 alone, and this strategy "
            "shards it across processes: train with trainer.strategy=ddp or auto, or score the run's "
            "checkpoints with attnlab-eval harness.tasks=[...] (after attnlab-consolidate for a sharded one)",
        )
        for name in ("fsdp2_sim", "tp_sim")
    ),
    (
        ["trainer._target_=nonexistent.Trainer"],
        "trainer._target_=nonexistent.Trainer: the import path of a Trainer",
    ),
    (["ckpt_path=last"], "ckpt_path=last: no checkpoints/last.ckpt in"),
    (["ckpt_path=nowhere.ckpt"], "ckpt_path=nowhere.ckpt: no such checkpoint file"),
    (["ckpt_path=."], "ckpt_path=.: is a directory: give a checkpoint file (its checkpoints/last.ckpt)"),
    (["trainer.max_steps=5", "trainer.max_steps=ten"], "trainer.max_steps=ten: Value 'ten' of type 'str'"),
    (["foo.bar=1"], "foo.bar=1: not a known key; allowed keys: model, data"),
    (
        ["model=gpt", "model.image_size=16"],
        "model.image_size=16: not a key of model.family=gpt; it is a key of model.family=vit "
        "(choose it with model=vit)",
    ),
    (
        ["data.listops_max_depth=3"],
        "data.listops_max_depth=3: not a key of data.kind=text; it is a key of data.kind=listops",
    ),
    (["model=gpt", "model.family=vit"], "model.family=vit: cannot be set alone; choose it with model=vit"),
    (["model.pos.name=rope"], "model.pos.name=rope: cannot be set alone; choose it with pos=rope"),
    (["task.sample_every_n_epochs=2"], "task.sample_every_n_epochs=2: not a known key"),
    (
        ["model=vit", "hparams_search=optuna"],
        "hydra.sweeper.direction=minimize: must be maximize for task.monitor=val/acc",
    ),
    *(
        pytest.param([f"trainer={name}"], f"trainer.accelerator=gpu: {NO_GPU}", marks=needs_no_gpu)
        for name in ("gpu", "ddp", "fsdp", "fsdp2")
    ),
    (
        ["task.monitor=bogus/metric"],
        "task.monitor=bogus/metric: choose one of val/loss, val/ppl, val/bpb, val/exact_match (what task=causal_lm logs at validation)",
    ),
    (
        ["model=seq2seq-tiny", "task.eval_decode=false", "task.monitor=val/bleu"],
        "task.monitor=val/bleu: choose one of val/loss, val/acc, val/ppl (what task=seq2seq logs",
    ),
    (
        ["model.vocab_size=10"],
        "model.vocab_size=10: the tokenizer (data.tokenizer='char') has 103 tokens; set 0 to size the model "
        "from the data, or use the tokenizer the model was trained with",
    ),
    (
        ["data=copy", "model.vocab_size=10"],
        "model.vocab_size=10: the tokenizer has 43 tokens; set 0 to size the model from the data, or use "
        "the tokenizer the model was trained with",
    ),
    (
        ["model=vit-tiny", "model.num_classes=3"],
        "model.num_classes=3: the data has 10 classes (data.kind=digits); set at least 10, or 0 to size "
        "the head from the data",
    ),
    (
        ["model=seq2seq-tiny", *SMALL_DATES, "data.seq_len=3"],
        "data.seq_len=3: too short for data.kind='dates': its longest example needs",
    ),
]


def case_id(case: object) -> str:
    args = case.values[0] if hasattr(case, "values") else case[0]
    return " ".join(args)


@pytest.mark.parametrize(("args", "message"), CASES, ids=map(case_id, CASES))
def test_bad_config_is_one_line_and_leaves_no_directory(
    tmp_path: Path,
    args: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = command_here(args, tmp_path, monkeypatch, capsys)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {message}"), lines[0]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".wandb")) == []


def test_eval_without_a_checkpoint_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = command_here([], tmp_path, monkeypatch, capsys, command="eval")
    assert (result.returncode, result.stderr.strip()) == (2, "error: ckpt_path=???: a value is required")
    assert not (tmp_path / "outputs").exists()


@pytest.mark.process_contract("interpreter")
def test_validation_imports_neither_torch_nor_lightning(tmp_path: Path) -> None:
    """Composition and validation are torch-free, so a bad config fails in a fraction of a second: what a
    new interpreter imports (this process has imported torch long before)."""
    command = [sys.executable, "-X", "importtime", "-m", "attnlab.train", "model.n_heads=3"]
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}  # one line, as a user sees it
    result = processes.run(command, tmp_path, env, timeout=120)
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert "attnlab.schema" in imported and "hydra" in imported
    assert not imported & {"torch", "pytorch_lightning", "numpy", "wandb"}
    assert (
        result.stderr.strip().splitlines()[-1]
        == "error: model.d_model=128: must be divisible by model.n_heads=3"
    )


@pytest.mark.parametrize("command", ["train", "eval"])
def test_a_checkpoint_that_would_run_code_is_one_line_and_never_loaded(
    tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Resume and eval refuse it before anything is created, never advising weights_only=False."""
    torch.save({"state_dict": RunsCode(tmp_path / "ran")}, tmp_path / "evil.ckpt")
    result = command_here(["ckpt_path=evil.ckpt"], tmp_path, monkeypatch, capsys, command=command)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    path, message = line.removeprefix("error: ckpt_path=").split(": ", 1)
    assert Path(path).name == "evil.ckpt"  # train names the resolved path, eval the given one
    assert message == (
        "not a checkpoint of attnlab: it holds pickled objects beyond tensors and plain data, "
        "which could run code, so it is not loaded"
    )
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".wandb")) == ["evil.ckpt"]


def test_an_attnlab_checkpoint_as_init_from_points_to_ckpt_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """It said the Hugging Face directory did not exist."""
    (tmp_path / "last.ckpt").write_bytes(b"")
    result = command_here(["model.init_from=last.ckpt"], tmp_path, monkeypatch, capsys)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: model.init_from=last.ckpt: last.ckpt is a file: model.init_from takes a Hugging Face "
        "checkpoint directory (config.json and weights); to continue from a checkpoint of attnlab-train "
        "give ckpt_path=<file>"
    ]
