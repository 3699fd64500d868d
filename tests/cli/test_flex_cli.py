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


def evaluate(ckpt: Path, args: list[str], monkeypatch, capsys) -> dict:
    """attnlab-eval of ``ckpt`` with ``args``: the metrics.json it wrote into a folder of its own. The
    checkpoints are shared by the test workers, whose evaluations of one run can start in the same
    second: in the run's own eval folder (named by the second) they would share a folder."""
    from attnlab.cli.eval import main

    out = Path(tempfile.mkdtemp(prefix="eval-", dir=ckpt.parent.parent))
    output_of(main, [f"ckpt_path={ckpt}", *EVAL, *args, f"hydra.run.dir={out}"], monkeypatch, capsys)
    return json.loads((out / "metrics.json").read_text())


@pytest.mark.parametrize("name", list(RUNS))
def test_eval_with_flex_measures_what_sdpa_measures(
    checkpoint, uncompiled, monkeypatch, capsys, name
) -> None:
    sdpa = evaluate(checkpoint(name), [], monkeypatch, capsys)
    flex = evaluate(checkpoint(name), ["model.attn_backend=flex"], monkeypatch, capsys)
    assert flex["overrides"] == {"model.attn_backend": "flex"}
    assert flex["metrics"] == pytest.approx(sdpa["metrics"], rel=1e-5, abs=1e-6)
    assert flex["metrics"]["val/loss"] > 0


def test_eval_with_a_window_changes_the_model_evaluated(checkpoint, uncompiled, monkeypatch, capsys) -> None:
    full = evaluate(checkpoint("gpt"), [], monkeypatch, capsys)
    windowed = evaluate(
        checkpoint("gpt"), ["model.attn_window=2", "model.attn_backend=flex"], monkeypatch, capsys
    )
    assert windowed["overrides"] == {"model.attn_window": 2, "model.attn_backend": "flex"}
    assert windowed["metrics"]["val/loss"] != pytest.approx(full["metrics"]["val/loss"])


@pytest.mark.parametrize("name", list(RUNS))
def test_sample_with_flex_prints_what_sdpa_prints(checkpoint, uncompiled, monkeypatch, capsys, name) -> None:
    from attnlab.cli.sample import main

    args = [f"ckpt_path={checkpoint(name)}", *SAMPLES[name]]
    sdpa = output_of(main, args, monkeypatch, capsys)
    assert output_of(main, [*args, "model.attn_backend=flex"], monkeypatch, capsys) == sdpa


def test_sample_runs_the_compiled_kernel(checkpoint, monkeypatch, capsys) -> None:
    """The prompts run torch.compile(flex_attention), the decoding steps the uncompiled kernel."""
    from attnlab.cli.sample import main

    args = [f"ckpt_path={checkpoint('gpt')}", *SAMPLES["gpt"]]
    sdpa = output_of(main, args, monkeypatch, capsys)
    assert output_of(main, [*args, "model.attn_backend=flex"], monkeypatch, capsys) == sdpa


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
