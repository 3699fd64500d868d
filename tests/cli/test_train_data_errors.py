"""Bad data stops ``attnlab-train`` with one line naming the key, or the file and line, with
exit status 2 before the run directory exists: the cheap checks (the path, a file's first bytes and
header, the tokenizer, the keys) run first, then validation builds the data (whole files read, the
tokenizer built) and checks it against the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from train_cli import TINY, command_here


def write_data(root: Path) -> None:
    """The small bad files the cases below point at."""
    (root / "empty.txt").write_text("")
    (root / "zeros.txt").write_bytes(b"\0" * 200_000)
    (root / "latin1.txt").write_bytes(b"ok\n" * 4 + "caf\xe9\n".encode("latin-1"))
    rows = "".join(f"text {i},{'pos' if i % 2 else 'neg'}\n" for i in range(40))
    (root / "reviews.csv").write_text("review,sentiment\n" + rows)
    (root / "unlabelled.csv").write_text("text,label\n" + rows.replace("text 6,neg", "text 6,"))
    pairs = "".join(f"src {i}\ttgt {i}\n" for i in range(40))
    (root / "pairs.tsv").write_text("source\ttarget\n" + pairs.replace("src 11\t", "src 11 "))
    write_images(root / "imgs")
    write_words_tokenizer(root / "words.json")


def write_words_tokenizer(path: Path) -> None:
    """Words split at whitespace, unknown ones as [UNK]: a token's bytes are not fixed by its id."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    hf = Tokenizer(models.WordLevel({"[UNK]": 0, "the": 1, "a": 2}, unk_token="[UNK]"))
    hf.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    hf.save(str(path))


def write_images(folder: Path) -> None:
    """Two classes of 8x8 grey PNGs, one of them cut off halfway through its pixel data."""
    from PIL import Image

    for c, name in enumerate(("dark", "light")):
        (folder / name).mkdir(parents=True)
        for i in range(8):
            Image.effect_noise((8, 8), 30 + 10 * c).save(folder / name / f"{i}.png")
    cut = folder / "light" / "5.png"
    cut.write_bytes(cut.read_bytes()[:-30])


BAD_DATA = [
    (["data.path=/dev/null"], "error: data.path='/dev/null': neither a regular file nor a folder"),
    (["data.path=missing.txt"], "error: data.path='missing.txt': no such file or folder"),
    (["data.path=empty.txt"], "error: empty.txt is empty"),
    (["data.path=zeros.txt"], "error: zeros.txt:1: not a text file (it holds NUL bytes)"),
    (["data.path=latin1.txt"], "error: latin1.txt:5: not UTF-8 text (invalid continuation byte at byte 15)"),
    (["data.tokenizer=bogus"], "error: data.tokenizer=bogus: choose char, bpe, or a tokenizer.json"),
    (["data.seed=-5"], "error: data.seed=-5: must be 0 or more, or null for the run's seed"),
    (["data.val_fraction=0.0"], "error: data.val_fraction=0.0: the validation split is carved from"),
    (
        ["model=bert", "data=textcls_csv", "data.path=reviews.csv", "data.text_column=review"],
        "error: data.label_column='label' is not a column of data.path='reviews.csv' (reviews.csv); "
        "available: review, sentiment",
    ),
    (
        ["model=bert", "data=textcls_csv", "data.path=unlabelled.csv"],
        "error: unlabelled.csv:8: no value in column 'label'",
    ),
    (
        ["model=seq2seq-tiny", "data=pairs_tsv", "data.path=pairs.tsv"],
        "error: pairs.tsv:13: 1 field(s) where the header has 2 (fields are separated by a tab)",
    ),
    (
        ["data.tokenizer=words.json", "task.monitor=val/bpb"],
        "error: task.monitor=val/bpb: the tokenizer (data.tokenizer='words.json') does not fix the bytes",
    ),
    (
        ["model=vit-tiny", "data=image_folder", "data.path=imgs", "data.val_fraction=0.25"],
        "error: imgs/light/5.png is not a readable image (",
    ),
]


@pytest.mark.parametrize(("args", "message"), BAD_DATA, ids=[" ".join(a) for a, _ in BAD_DATA])
def test_bad_data_fails_before_the_run_directory(tmp_path: Path, args: list[str], message: str) -> None:
    write_data(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = command_here([*TINY, *args], tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), result.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".wandb")) == before


def test_own_grey_images_the_readme_example(tmp_path: Path) -> None:
    """docs/data.md's worked example: a folder of 28x28 grey images with the ViT preset (8x8 inputs) is refused
    naming the sizes to set; with them, the model gets one channel and the images' own mean/std."""
    from PIL import Image

    for c, name in enumerate(("circle", "square")):
        (tmp_path / "imgs" / name).mkdir(parents=True)
        for i in range(12):
            Image.new("L", (28, 28), 40 + 150 * c + i).save(tmp_path / "imgs" / name / f"{i}.png")
    args = [*TINY, "model=vit", "data=image_folder", "data.path=imgs", "logger=none"]
    result = command_here(args, tmp_path)
    assert result.returncode == 2 and result.stderr.strip() == (
        "error: model.image_size=8: the images are 28x28 (e.g. imgs/circle/0.png), so resizing them to 8x8 "
        "shrinks them 4x and loses their detail; set model.image_size=28 model.patch_size=7 (or any size "
        "within 2x of the images)"
    )
    sized = [*args, "model.image_size=28", "model.patch_size=7", "data.val_fraction=0.25", "run_dir=run"]
    result = command_here(sized, tmp_path)
    assert result.returncode == 0, result.stderr
    import torch

    state = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    patches = next(v for k, v in state["state_dict"].items() if k.endswith("patches.proj.weight"))
    assert patches.shape[1] == 1  # one input channel, inferred from the grey images


def test_own_colour_images_train_with_three_channels(tmp_path: Path) -> None:
    """A folder of RGB images trains with model.channels inferred from the data: three input channels
    (data.mean/std come from the training images, tests/data/test_data_images.py)."""
    import torch
    from PIL import Image

    for c, name in enumerate(("warm", "cool")):
        (tmp_path / "imgs" / name).mkdir(parents=True)
        for i in range(12):
            colour = (220 - 20 * c, 40 + 5 * i, 60 + 40 * c)
            Image.new("RGB", (16, 16), colour).save(tmp_path / "imgs" / name / f"{i}.png")
    args = [*TINY, "model=vit", "data=image_folder", "data.path=imgs", "logger=none", "model.image_size=16"]
    result = command_here([*args, "model.patch_size=4", "data.val_fraction=0.25", "run_dir=run"], tmp_path)
    assert result.returncode == 0, result.stderr
    state = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    patches = next(v for k, v in state["state_dict"].items() if k.endswith("patches.proj.weight"))
    assert patches.shape[1] == 3
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[" * 200_000 + "]" * 200_000, "its JSON is nested too deeply"),
        ('{"model": {"type": "BPE"', "it is not valid JSON"),
        ('{"model": {"type": "NoSuchModel"}}', "is not a Hugging Face tokenizer.json"),
        (None, "MiB, above the 256 MiB of any tokenizer.json"),
    ],
)
def test_a_bad_tokenizer_file_is_one_line_naming_data_tokenizer(
    tmp_path: Path, content: str | None, message: str
) -> None:
    """Checked before the run directory, in-process as validation does (a RecursionError, a traceback
    from the tokenizers library, or a file read whole into memory before)."""
    from attnlab.data import check_source
    from attnlab.schema.data import TextData
    from attnlab.schema.errors import ConfigError

    file = tmp_path / "tokenizer.json"
    if content is None:  # a sparse file: its size, none of its bytes on the disk
        with open(file, "wb") as f:
            f.truncate(300 * 2**20)
    else:
        file.write_text(content)
    with pytest.raises(ConfigError) as err:
        check_source(TextData(tokenizer=str(file)))
    line = str(err.value)
    assert line.startswith(f"data.tokenizer={file}: {file} is not a tokenizer") or line.startswith(
        f"data.tokenizer={file}: {file} is not a Hugging Face"
    )
    assert message in line and "\n" not in line
