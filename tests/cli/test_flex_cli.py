"""``model.attn_backend=flex`` and ``model.attn_window`` on checkpoints trained with SDPA: attnlab-eval
and attnlab-sample rebuild the model with them (they hold no weights), for every family FlexAttention
applies to. In-process commands on the uncompiled kernel (a compilation per command would take
minutes on 2 cores), but for one sample that runs the compiled kernel end to end."""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from train_cli import run_command, shared_tiny_checkpoints

from attnlab.blocks import flex as flex_module

pytestmark = pytest.mark.slow  # end to end: trains three tiny runs, then runs the commands

RUNS = {
    "gpt": ["model=gpt-tiny", "data.seq_len=16", "data.batch_size=4", "pos=alibi"],
    "mlm": [
        "model=bert-tiny",
        "task=mlm",
        "data=text",
        "data.seq_len=16",
        "data.batch_size=4",
        "pos=relative",
    ],
    "seq2seq": [
        "model=seq2seq-tiny",
        "data.num_train=64",
        "data.num_val=16",
        "data.num_test=16",
        "data.batch_size=8",
        "pos=relative",
    ],
}
COMMON = [
    "trainer.max_steps=2",
    "logger=none",
    "trainer.enable_progress_bar=false",
    "test_after_fit=false",
    "sample.max_new_tokens=0",
    "trainer.val_every_n_steps=2",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
]
EVAL = ["logger=none", "trainer.enable_progress_bar=false", "split=val", "limit_batches=2"]
SAMPLES = {
    "gpt": ["prompts=[To be,not]", "max_new_tokens=6", "temperature=0"],
    "mlm": ["prompt='import <mask>s'"],
    "seq2seq": ["prompt=march 3 2021", "num_beams=2", "max_new_tokens=8"],
}


@pytest.fixture(scope="module")
def checkpoint(built_once: Callable[..., Path]) -> Callable[[str], Path]:
    """``checkpoint(name)``: the last.ckpt of ``RUNS[name]``, trained once per session for every worker
    (the commands write only into folders of their own)."""
    return shared_tiny_checkpoints(built_once, "flex_cli", RUNS, COMMON)


@pytest.fixture
def uncompiled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flex_module, "COMPILE_FROM", 10**9)


def output_of(main: Callable[[], None], args: list[str], monkeypatch: pytest.MonkeyPatch, capsys) -> str:
    """A console script's ``main`` with ``args``, which must succeed; its standard output."""
    assert run_command(main, args, monkeypatch, capsys) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def evaluate_into(out: Path, ckpt: Path, args: list[str], monkeypatch, capsys) -> dict:
    """attnlab-eval of ``ckpt`` with ``args`` into the folder ``out``: the metrics.json it wrote."""
    from attnlab.cli.eval import main

    output_of(main, [f"ckpt_path={ckpt}", *EVAL, *args, f"hydra.run.dir={out}"], monkeypatch, capsys)
    return json.loads((out / "metrics.json").read_text())


def evaluate(ckpt: Path, args: list[str], monkeypatch, capsys) -> dict:
    """attnlab-eval of ``ckpt`` with ``args``: the metrics.json it wrote into a folder of its own. The
    checkpoints are shared by the test workers, whose evaluations of one run can start in the same
    second: in the run's own eval folder (named by the second) they would share a folder."""
    out = Path(tempfile.mkdtemp(prefix="eval-", dir=ckpt.parent.parent))
    return evaluate_into(out, ckpt, args, monkeypatch, capsys)


@pytest.fixture
def evaluated_with_sdpa(checkpoint, built_once, monkeypatch, capsys) -> Callable[[str], dict]:
    """``evaluated_with_sdpa(name)``: the metrics.json of attnlab-eval of ``checkpoint(name)`` as it was
    trained (SDPA, no window), evaluated once per session for every worker: the reference of both the
    flex evaluation and the windowed one of the gpt run."""

    def get(name: str) -> dict:
        def build(out: Path) -> None:
            evaluate_into(out, checkpoint(name), [], monkeypatch, capsys)

        return json.loads((built_once(f"flex_cli-sdpa-eval-{name}", build) / "metrics.json").read_text())

    return get


@pytest.mark.parametrize("name", list(RUNS))
def test_eval_with_flex_measures_what_sdpa_measures(
    checkpoint, evaluated_with_sdpa, uncompiled, monkeypatch, capsys, name
) -> None:
    sdpa = evaluated_with_sdpa(name)
    flex = evaluate(checkpoint(name), ["model.attn_backend=flex"], monkeypatch, capsys)
    assert flex["overrides"] == {"model.attn_backend": "flex"}
    assert flex["metrics"] == pytest.approx(sdpa["metrics"], rel=1e-5, abs=1e-6)
    assert flex["metrics"]["val/loss"] > 0


def test_eval_with_a_window_changes_the_model_evaluated(
    checkpoint, evaluated_with_sdpa, uncompiled, monkeypatch, capsys
) -> None:
    full = evaluated_with_sdpa("gpt")
    windowed = evaluate(
        checkpoint("gpt"), ["model.attn_window=2", "model.attn_backend=flex"], monkeypatch, capsys
    )
    assert windowed["overrides"] == {"model.attn_window": 2, "model.attn_backend": "flex"}
    assert windowed["metrics"]["val/loss"] != pytest.approx(full["metrics"]["val/loss"])


@pytest.mark.parametrize("name", ["mlm", "seq2seq"])  # gpt: test_sample_runs_the_compiled_kernel
def test_sample_with_flex_prints_what_sdpa_prints(checkpoint, uncompiled, monkeypatch, capsys, name) -> None:
    from attnlab.cli.sample import main

    args = [f"ckpt_path={checkpoint(name)}", *SAMPLES[name]]
    sdpa = output_of(main, args, monkeypatch, capsys)
    assert output_of(main, [*args, "model.attn_backend=flex"], monkeypatch, capsys) == sdpa


def test_sample_runs_the_compiled_kernel(checkpoint, monkeypatch, capsys) -> None:
    """The gpt case of ``test_sample_with_flex_prints_what_sdpa_prints``, with the kernels the command
    chooses (``COMPILE_FROM`` as shipped). generate() runs under torch.compiler.set_stance("force_eager")
    unless compile=true, so torch.compile(flex_attention) runs its prompts eagerly as well: no dynamo
    graph is traced here (dynamo's graph counter, read), and the same case with ``uncompiled`` ran the
    same code."""
    from torch._dynamo.utils import counters

    from attnlab.cli.sample import main

    args = [f"ckpt_path={checkpoint('gpt')}", *SAMPLES["gpt"]]
    sdpa = output_of(main, args, monkeypatch, capsys)
    graphs = counters["stats"]["unique_graphs"]
    assert output_of(main, [*args, "model.attn_backend=flex"], monkeypatch, capsys) == sdpa
    assert counters["stats"]["unique_graphs"] == graphs


def test_sample_refuses_a_model_key_that_holds_weights(checkpoint, monkeypatch, capsys) -> None:
    from attnlab.cli.sample import main

    monkeypatch.setattr(sys, "argv", ["attnlab", f"ckpt_path={checkpoint('gpt')}", "model.n_heads=4"])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: model.n_heads=4: the trained weights depend on it; evaluation may change only "
        "model.pos.rope_*, model.attn_backend and model.attn_window"
    ]
