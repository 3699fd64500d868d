"""attnlab-compress end to end on tiny checkpoints of every family: the int8 checkpoint is smaller,
plain data, keeps the loss, and attnlab-eval, attnlab-sample and attnlab-explain read it like any
other; bad input is one line and writes nothing, and a failed write leaves no file behind.

The commands run in-process through Hydra, as the console scripts do (see test_sample_explain.py).
"""

from __future__ import annotations

import errno
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from train_cli import RunsCode, compressed_checkpoints, run_command, tiny_checkpoints

pytestmark = pytest.mark.slow  # end to end: trains four tiny runs (about 1 s each), then compresses

RUNS = {
    "gpt": ["model=gpt-tiny", "data.seq_len=16", "data.batch_size=4"],
    "bert": [
        "model=bert-tiny",
        "data.num_train=64",
        "data.num_val=16",
        "data.num_test=16",
        "data.seq_len=48",
        "data.batch_size=8",
        "data.listops_max_depth=2",
    ],
    "seq2seq": [
        "model=seq2seq-tiny",
        "data.num_train=64",
        "data.num_val=16",
        "data.num_test=16",
        "data.batch_size=8",
    ],
    "vit": ["model=vit-tiny", "model.image_size=8", "model.patch_size=2", "data.batch_size=8"],
}
COMMON = [
    "trainer.max_steps=4",
    "logger=none",
    "trainer.enable_progress_bar=false",
    "test_after_fit=false",
    "sample.max_new_tokens=0",
    "trainer.val_every_n_steps=4",
    "trainer.limit_val_batches=2",
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``checkpoint(family)``: the last.ckpt of a tiny run of that family, trained on first use."""
    return tiny_checkpoints(tmp_path_factory, RUNS, COMMON)


@pytest.fixture(scope="module")
def int8(checkpoint) -> Callable[[str], Path]:
    """``int8(family)``: that family's checkpoint compressed by attnlab-compress (beside it)."""
    return compressed_checkpoints(checkpoint, "int8")


def validation_loss(ckpt: Path, batches: int = 2) -> float:
    """The task's loss over the first validation batches of the checkpoint's run."""
    from attnlab.checkpoint import load_checkpoint, run_datamodule

    loaded = load_checkpoint(ckpt)
    losses = []
    with torch.no_grad():
        for _, batch in zip(range(batches), run_datamodule(loaded).val_dataloader()):
            losses.append(float(loaded.task.training_loss(batch)))
    return sum(losses) / len(losses)


def files_under(folder: Path) -> set[Path]:
    return set(folder.rglob("*"))


@pytest.mark.parametrize("family", ["gpt", "bert", "seq2seq", "vit"])
def test_the_int8_checkpoint_is_smaller_plain_data_and_keeps_the_loss(checkpoint, int8, family) -> None:
    from torchao.quantization import Int8Tensor

    path = int8(family)
    assert path.stat().st_size < checkpoint(family).stat().st_size / 3  # no optimizer state, int8 weights
    assert torch.serialization.get_unsafe_globals_in_checkpoint(str(path)) == []  # nothing pickled
    saved = torch.load(path, weights_only=True)
    assert not {"optimizer_states", "lr_schedulers", "loops", "callbacks"} & set(saved)
    assert saved["attnlab_quantization"]["method"] == "int8"
    weights = [v for k, v in saved["state_dict"].items() if isinstance(v, Int8Tensor)]
    assert weights and all(w.qdata.dtype == torch.int8 for w in weights)
    assert validation_loss(path) == pytest.approx(validation_loss(checkpoint(family)), abs=0.02)


def test_the_size_is_reported_against_the_uncompressed_weights(
    checkpoint, tmp_path, monkeypatch, capsys
) -> None:
    """Not against last.ckpt, whose Adam moments triple it: the ratio says what int8 saves."""
    import re

    from attnlab.cli.compress import main
    from attnlab.run.compressing import saved_size, uncompressed_checkpoint

    out = tmp_path / "int8.ckpt"
    assert (
        run_command(main, [f"ckpt_path={checkpoint('gpt')}", "method=int8", f"out={out}"], monkeypatch) == 0
    )
    printed = capsys.readouterr().out
    ratio = float(re.search(r"([0-9.]+)x smaller than the uncompressed weights", printed).group(1))
    weights = saved_size(uncompressed_checkpoint(checkpoint("gpt")))
    assert ratio == pytest.approx(weights / out.stat().st_size, abs=0.006)
    assert 1.0 < ratio < checkpoint("gpt").stat().st_size / out.stat().st_size


@pytest.fixture
def config_store() -> Iterator[None]:
    """attnlab-eval stores its checkpoint's data and model in Hydra's config store: taken out again
    afterwards, so that later tests in this process compose eval's schema defaults."""
    from hydra.core.config_store import ConfigStore

    from attnlab.run.eval_data import CHECKPOINT_DATA

    yield
    for group in ("data", "model"):
        ConfigStore.instance().repo.get(group, {}).pop(f"{CHECKPOINT_DATA}.yaml", None)


@pytest.mark.usefixtures("config_store")
def test_attnlab_eval_reads_the_int8_checkpoint_like_any_other(checkpoint, int8, monkeypatch) -> None:
    """Both evaluations land in the run's eval/ folder, with losses within 0.02 nats."""
    from attnlab.cli.eval import main

    run_dir = checkpoint("gpt").parent.parent
    losses = {}
    for name, ckpt in (("fp32", checkpoint("gpt")), ("int8", int8("gpt"))):
        args = [f"ckpt_path={ckpt}", "logger=none", "trainer.enable_progress_bar=false", "split=val"]
        assert run_command(main, [*args, "limit_batches=2"], monkeypatch) == 0
        (record,) = [
            json.loads(p.read_text())
            for p in (run_dir / "eval").glob("*/metrics.json")
            if json.loads(p.read_text())["ckpt_path"] == str(ckpt.resolve())
        ]
        losses[name] = record["metrics"]["val/loss"]
    assert losses["int8"] == pytest.approx(losses["fp32"], abs=0.02)


def test_attnlab_sample_and_explain_read_the_int8_checkpoint(int8, tmp_path, monkeypatch, capsys) -> None:
    from attnlab.cli.explain import main as explain
    from attnlab.cli.sample import main as sample

    args = [f"ckpt_path={int8('gpt')}", "prompt=To be", "max_new_tokens=5", "use_cache=true"]
    assert run_command(sample, args, monkeypatch, capsys) == 0
    assert "To be" in capsys.readouterr().out
    args = [f"ckpt_path={int8('gpt')}", "input=To be", f"out_dir={tmp_path / 'out'}", "layers=[-1]"]
    assert run_command(explain, [*args, "importance_batches=2"], monkeypatch) == 0
    page = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    assert "<h2>Head importance (Michel et al. 2019)</h2>" in page


def test_attnlab_sample_classifies_images_with_an_int8_vit(int8, tmp_path, monkeypatch, capsys) -> None:
    import numpy as np
    from PIL import Image

    from attnlab.cli.sample import main

    image = tmp_path / "digit.png"
    Image.fromarray((np.random.default_rng(0).random((8, 8)) * 255).astype(np.uint8)).save(image)
    args = [f"ckpt_path={int8('vit')}", f"image={image}"]  # (trained on first use: its output is dropped)
    assert run_command(main, args, monkeypatch, capsys) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == str(image) and len(lines) == 6  # the image, then its five likeliest classes


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ckpt_path={tmp}/no.ckpt"], "error: ckpt_path={tmp}/no.ckpt: no such checkpoint file"),
        (["ckpt_path={tmp}/notes.ckpt"], "error: '{tmp}/notes.ckpt' is not a readable PyTorch checkpoint"),
        (["ckpt_path={tmp}/weights.ckpt"], "error: '{tmp}/weights.ckpt' is not an attnlab checkpoint"),
        (
            ["ckpt_path={tmp}/evil.ckpt"],  # unpickled, it would create {tmp}/ran
            "error: '{tmp}/evil.ckpt' is not a checkpoint of attnlab: it holds pickled objects beyond tensors "
            "and plain data, which could run code, so it is not loaded",
        ),
        (["method=prune"], "error: method=prune: choose one of int8"),
        (
            ["out={tmp}/missing/x.ckpt"],
            "error: out={tmp}/missing/x.ckpt: its folder {tmp}/missing does not exist",
        ),
        (["out={tmp}"], "error: out={tmp}: is a folder: name the file to write"),
        (["out={ckpt}"], "error: out={ckpt}: is the checkpoint to compress: name another file"),
        (["ckpt_path={int8}"], "error: ckpt_path={int8}: is already compressed (int8)"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    checkpoint, int8, tmp_path, monkeypatch, capsys, args, message
) -> None:
    from attnlab.cli.compress import main

    (tmp_path / "notes.ckpt").write_text("not a checkpoint")
    torch.save({"weight": torch.zeros(2)}, tmp_path / "weights.ckpt")
    torch.save({"state_dict": RunsCode(tmp_path / "ran")}, tmp_path / "evil.ckpt")
    names = {"tmp": tmp_path, "ckpt": checkpoint("gpt"), "int8": int8("gpt")}
    args = [a.format(**names) for a in args]
    if not any(a.startswith("ckpt_path=") for a in args):
        args.append(f"ckpt_path={checkpoint('gpt')}")
    before = files_under(tmp_path) | files_under(checkpoint("gpt").parent.parent)
    capsys.readouterr()
    assert run_command(main, args, monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message.format(**names))
    assert files_under(tmp_path) | files_under(checkpoint("gpt").parent.parent) == before


def test_a_write_that_fails_leaves_no_file(checkpoint, tmp_path, monkeypatch, capsys) -> None:
    """A full disk halfway through the file: one line naming it, and neither it nor its .tmp remains."""
    import attnlab.training.files as files
    from attnlab.cli.compress import main

    def half_then_full(obj: object, path: Path) -> None:
        Path(path).write_bytes(b"PK\x03\x04 half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    ckpt = checkpoint("gpt")
    monkeypatch.setattr(files, "torch_save", half_then_full)  # compress's torch.save of its file
    out = tmp_path / "gpt-int8.ckpt"
    capsys.readouterr()
    assert run_command(main, [f"ckpt_path={ckpt}", f"out={out}"], monkeypatch) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: no space left on device to write {out}")
    assert list(tmp_path.iterdir()) == []


def test_attnlab_train_refuses_to_resume_from_an_int8_checkpoint(int8, tmp_path, monkeypatch, capsys) -> None:
    """It holds no optimizer state: one line before the run directory exists."""
    from attnlab.cli.train import main

    run_dir = tmp_path / "resumed"
    args = [*RUNS["gpt"], *COMMON, f"run_dir={run_dir}", f"ckpt_path={int8('gpt')}"]
    capsys.readouterr()
    assert run_command(main, args, monkeypatch) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: ckpt_path={int8('gpt')}: is a checkpoint of attnlab-compress method=int8, for inference "
        "only (no optimizer state): resume from the checkpoint of attnlab-train"
    ]
    assert not run_dir.exists()


def test_out_naming_a_file_is_refused_unless_overwrite(checkpoint, tmp_path, monkeypatch, capsys) -> None:
    """out= replaced any file, the run's best checkpoint included; overwrite=true replaces it."""
    from attnlab.cli.compress import main

    taken = tmp_path / "taken.ckpt"
    taken.write_bytes(b"someone's file")
    args = [f"ckpt_path={checkpoint('gpt')}", f"out={taken}"]
    assert run_command(main, args, monkeypatch, capsys) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: out={taken}: exists: name a new file, or add overwrite=true to replace it"
    ]
    assert taken.read_bytes() == b"someone's file"
    assert run_command(main, [*args, "overwrite=true"], monkeypatch, capsys) == 0
    assert taken.read_bytes()[:2] == b"PK"  # torch.save's zip archive now
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken.ckpt"]


def test_a_file_written_at_out_meanwhile_is_kept_and_one_line(
    checkpoint, tmp_path, monkeypatch, capsys
) -> None:
    """Two compressions to one out at once: the one that publishes second finds the file there."""
    from attnlab.cli import compress

    out = tmp_path / "int8.ckpt"
    checked = compress.output_path

    def then_another_writes(cmd):  # the other compression finishes right after this one's check
        path = checked(cmd)
        out.write_bytes(b"the other compression's")
        return path

    monkeypatch.setattr(compress, "output_path", then_another_writes)
    assert (
        run_command(compress.main, [f"ckpt_path={checkpoint('gpt')}", f"out={out}"], monkeypatch, capsys) == 2
    )
    assert capsys.readouterr().err.splitlines() == [
        f"error: out={out}: exists: name a new file, or add overwrite=true to replace it"
    ]
    assert out.read_bytes() == b"the other compression's" and sorted(tmp_path.iterdir()) == [out]


def test_a_folder_that_cannot_be_written_is_one_line(checkpoint, tmp_path, monkeypatch, capsys) -> None:
    """A read-only folder (as root, which writes anywhere, the refusal is simulated)."""
    import os
    import tempfile

    from attnlab.cli.compress import main

    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    ckpt = checkpoint("gpt")
    if os.access(locked, os.W_OK):

        def refused(*args: object, dir: str, **kwargs: object) -> None:
            raise PermissionError(errno.EACCES, "Permission denied", f"{dir}/int8.ckpt.x.tmp")

        monkeypatch.setattr(tempfile, "mkstemp", refused)
    assert run_command(main, [f"ckpt_path={ckpt}", f"out={locked / 'int8.ckpt'}"], monkeypatch, capsys) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: out={locked / 'int8.ckpt'}: cannot be written (Permission denied)"
    ]
    assert list(locked.iterdir()) == []
