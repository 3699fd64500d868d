"""Sequence-to-sequence data: the generated tasks and parallel text from files and HF datasets."""

from __future__ import annotations

import datetime
import json

import pytest
import torch

from attnlab.data import generated


@pytest.mark.parametrize(
    ("n", "words"),
    [
        (0, "zero"),
        (13, "thirteen"),
        (40, "forty"),
        (105, "one hundred five"),
        (1042, "one thousand forty-two"),
        (999_999, "nine hundred ninety-nine thousand nine hundred ninety-nine"),
        (7_000_019, "seven million nineteen"),
        (2_300_000_001, "two billion three hundred million one"),
    ],
)
def test_number_words(n, words):
    assert generated.number_to_words(n) == words


def test_every_date_format_is_unambiguous_and_targets_are_iso():
    day = datetime.date(2021, 3, 5)
    sources = [fmt(day) for fmt in generated.DATE_FORMATS]
    assert "Friday, March 5, 2021" in sources and "03/05/2021" in sources and "05.03.2021" in sources
    assert "the 5th of march, 2021" in sources
    # a day and a month swapped never produce the same source string
    swapped = datetime.date(2021, 5, 3)
    assert not set(sources) & {fmt(swapped) for fmt in generated.DATE_FORMATS}
    pairs = generated.dates(500, 0)
    assert pairs == generated.dates(500, 0)
    for source, target in pairs:
        parsed = datetime.date.fromisoformat(target)
        assert generated.FIRST_DATE <= parsed <= generated.LAST_DATE
        assert source in {fmt(parsed) for fmt in generated.DATE_FORMATS}


def test_reverse_and_unseen_splits():
    pairs = generated.reverse(200, 0, max_len=5)
    assert all(t == s[::-1] and 1 <= len(s) <= 5 for s, t in pairs)
    splits = generated.unseen_splits(generated.numbers, {"train": 300, "val": 50, "test": 50}, seed=1)
    train = {s for s, _ in splits["train"]}
    assert [len(splits[k]) for k in ("train", "val", "test")] == [300, 50, 50]
    assert not train & {s for s, _ in splits["val"]} and not train & {s for s, _ in splits["test"]}
    assert not {s for s, _ in splits["val"]} & {s for s, _ in splits["test"]}


def check_batch(dm, batch):
    tok = dm.tokenizer
    assert set(batch) == {"src_ids", "src_mask", "tgt_in", "tgt_mask", "labels"}
    assert batch["tgt_in"].shape == batch["labels"].shape == batch["tgt_mask"].shape
    assert (batch["tgt_in"][:, 0] == tok.bos_id).all()
    for tgt_in, mask, labels in zip(batch["tgt_in"], batch["tgt_mask"], batch["labels"]):
        n = int(mask.sum())
        assert labels[n - 1] == tok.eos_id  # target + eos
        assert torch.equal(labels[: n - 1], tgt_in[1:n])  # tgt_in is the labels shifted right
        assert (labels[n:] == -100).all() and (tgt_in[n:] == tok.pad_id).all()
    assert (batch["src_ids"][~batch["src_mask"]] == tok.pad_id).all()


@pytest.mark.parametrize("kind", ["dates", "numbers", "reverse"])
def test_generated_modules(make_dm, kind):
    dm = make_dm(kind, num_train=200, num_val=20, num_test=20, seq_len=80, batch_size=8)
    batch = next(iter(dm.val_dataloader()))
    check_batch(dm, batch)
    src = dm.tokenizer.decode(batch["src_ids"][0].tolist())
    tgt = dm.tokenizer.decode(batch["tgt_in"][0].tolist())
    if kind == "dates":
        assert datetime.date.fromisoformat(tgt)
    elif kind == "numbers":
        assert generated.number_to_words(int(src)) == tgt
    else:
        assert tgt == src[::-1]


def test_generated_task_longer_than_seq_len(make_dm):
    with pytest.raises(
        ValueError,
        match=r"^data.seq_len=8: too short for data.kind='dates': its longest example needs (\d+) tokens; "
        r"set at least \1$",
    ):
        make_dm("dates", num_train=50, num_val=5, num_test=5, seq_len=8)


def test_tsv_pairs_are_cut_to_seq_len(make_dm, tmp_path):
    rows = "".join(f"hello number {i}\tbonjour numéro {i} et encore plus de mots\n" for i in range(40))
    (tmp_path / "en-fr.tsv").write_text("en\tfr\n" + rows)
    dm = make_dm(
        "pairs",
        path=str(tmp_path / "en-fr.tsv"),
        source_column="en",
        target_column="fr",
        seq_len=20,
        batch_size=4,
        val_fraction=0.1,
        test_fraction=0.1,
    )
    assert [len(dm.datasets[s]) for s in ("train", "val", "test")] == [32, 4, 4]
    batch = next(iter(dm.train_dataloader()))
    check_batch(dm, batch)
    assert batch["tgt_in"].shape[1] == 20 and batch["src_ids"].shape[1] <= 20
    assert dm.tokenizer.decode(batch["tgt_in"][0].tolist()).startswith("bonjour numéro")


def test_hf_translation_dict_column_offline(make_dm, tmp_path):
    rows = [{"translation": {"de": f"hallo welt {i}", "en": f"hello world {i}"}} for i in range(30)]
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    fields = {
        "hf_name": "json",
        "hf_data_files": str(tmp_path / "t.jsonl"),
        "source_lang": "de",
        "target_lang": "en",
    }
    dm = make_dm("pairs", **fields, val_fraction=0.2, batch_size=4)
    batch = next(iter(dm.val_dataloader()))
    check_batch(dm, batch)
    src, tgt = (
        dm.tokenizer.decode(batch["src_ids"][0].tolist()),
        dm.tokenizer.decode(batch["tgt_in"][0].tolist()),
    )
    assert src.replace("hallo welt", "hello world") == tgt
    with pytest.raises(ValueError, match=r"data.target_lang='fr' is not a column of .*; available: de, en"):
        make_dm("pairs", **{**fields, "target_lang": "fr"})


def test_pairs_bad_inputs(make_dm, tmp_path):
    (tmp_path / "p.tsv").write_text("src\ttgt\na\tb\n")
    with pytest.raises(
        ValueError, match=r"data.source_column='source' is not a column of .*; available: src, tgt"
    ):
        make_dm("pairs", path=str(tmp_path / "p.tsv"))
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "valid.tsv").write_text("source\ttarget\na\tb\n")
    with pytest.raises(
        ValueError, match=r"is a folder without a train file; expected train\{.csv,.tsv,.jsonl,.json\}"
    ):
        make_dm("pairs", path=str(tmp_path / "folder"))
    (tmp_path / "ragged.tsv").write_text("source\ttarget\na\tb\tc\n")
    with pytest.raises(ValueError, match=r"ragged.tsv:2: 3 field\(s\) where the header has 2"):
        make_dm("pairs", path=str(tmp_path / "ragged.tsv"))


def test_a_tsv_line_without_a_tab_is_named_by_file_and_line(make_dm, tmp_path):
    """It was reported as "(val split): record 7" before, which names neither file nor line."""
    rows = [f"hello {i}\tbonjour {i}" for i in range(20)]
    rows[11] = "hello 11 bonjour 11"  # line 13, counting the header
    (tmp_path / "p.tsv").write_text("source\ttarget\n" + "\n".join(rows) + "\n")
    with pytest.raises(
        ValueError, match=r"p.tsv:13: 1 field\(s\) where the header has 2 \(fields are separated by a tab\)"
    ):
        make_dm("pairs", path=str(tmp_path / "p.tsv"))
