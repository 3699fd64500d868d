"""``attnlab-explain``: explain one input of a checkpoint into a folder of PNGs and an index.html.

attnlab-explain ckpt_path=outputs/.../checkpoints/last.ckpt input="To be, or not"
attnlab-explain ckpt_path=<bert mlm run> input="the <mask> sat" layers=[0,1,2] heads=[0]
attnlab-explain ckpt_path=<seq2seq run> input="march 3, 2021" out_dir=explained/
attnlab-explain ckpt_path=<vit run> input=digits:0 head_importance=false
attnlab-explain ckpt_path=<vit run> input=my_digit.png
attnlab-explain ckpt_path=<gpt run> input="To be" logit_lens=true corrupted="To go" answer=e wrong=o
attnlab-explain ckpt_path=<gpt run> input="To be" probe=token ablate=[layers.1.attn_heads.0] ablation=mean
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from omegaconf import DictConfig

from attnlab.cli.hydra.app import run_hydra
from attnlab.run.bad_input import check_writable, user_errors_as_one_line
from attnlab.run.explaining import explain_checkpoint, prepare_explanation
from attnlab.schema.load import to_object


def main() -> None:
    """Console script ``attnlab-explain`` (also ``python -m attnlab.cli.explain``)."""
    run_hydra(explain_job, "explain")


def explain_job(config: DictConfig) -> None:
    """The Hydra task: write the explanation and print where its page is."""
    from hydra.core.hydra_config import HydraConfig

    from attnlab.cli.hydra.app import checked_by_validation

    folder = Path(HydraConfig.get().runtime.output_dir)  # out_dir, or its job folder under -m
    with user_errors_as_one_line(), removed_if_unwritten(folder):
        prepared = checked_by_validation(folder)
        if prepared is None:  # a multirun's job: checked here, in its own folder
            prepared = prepare_explanation(to_object(config))
        print(explain_checkpoint(prepared, folder))


def check_out_dir(config: DictConfig, run_dir: Path | None, overrides: list[str]) -> object:
    """Before Hydra makes the folder the explanation goes into (``out_dir``; a multirun's sweep folder):
    the folder is writable (Hydra's own error is a traceback), and for one run, everything the command
    checks of its input (``prepare_explanation``: the checkpoint, the selection, the input and the
    corrupted one), so that bad input leaves no folder. The job takes what this returns."""
    check_writable("out_dir", run_dir if run_dir is not None else config.hydra.sweep.dir)
    if run_dir is None:
        return config
    return prepare_explanation(to_object(config))


@contextmanager
def removed_if_unwritten(folder: Path) -> Iterator[None]:
    """On an error or a signal before the page is written, take away what this command wrote into
    ``folder`` (pictures of a half-written explanation included), what Hydra put there, and the folder
    if that leaves it empty; files that were there before stay."""
    page = folder / "index.html"
    before = {path: path.stat().st_mtime_ns for path in folder.iterdir()} if folder.is_dir() else {}
    try:
        yield
    except BaseException:
        if not page.exists() or before.get(page) == page.stat().st_mtime_ns:
            for path in folder.iterdir() if folder.is_dir() else []:
                if path in before:
                    continue
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
            shutil.rmtree(folder / ".hydra", ignore_errors=True)
            (folder / "explain.log").unlink(missing_ok=True)
            with suppress(OSError):
                folder.rmdir()
        raise


if __name__ == "__main__":
    main()
