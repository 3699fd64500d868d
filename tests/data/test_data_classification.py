"""Sequence classification: ListOps (generator, reference evaluator) and labelled text files / HF."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab.data import listops


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("[MAX 4 3 [MIN 2 3 ] 1 0 [MED 1 5 8 9 2 ] ]", 5),
        ("[MIN 7 [MAX 1 2 ] 9 ]", 2),
        ("[SM 9 8 7 ]", 4),
        ("[MED 1 2 3 4 ]", 2),  # the median of an even count, rounded down
        ("[SM [MAX 9 9 ] [MED 6 7 ] 5 ]", 0),
    ],
)
def test_reference_evaluator(expression, value):
    tree = listops.parse(expression)
    assert listops.evaluate(tree) == value
    assert " ".join(listops.to_tokens(tree)) == expression


def test_generator_is_seeded_bounded_and_labelled_by_the_evaluator():
    a = listops.generate(300, 1, max_len=40, max_depth=4, max_args=5, op_prob=0.4)
    assert a == listops.generate(300, 1, max_len=40, max_depth=4, max_args=5, op_prob=0.4)
    assert a != listops.generate(300, 2, max_len=40, max_depth=4, max_args=5, op_prob=0.4)
    assert max(len(t.split()) for t, _ in a) <= 40
    assert all(listops.evaluate(listops.parse(t)) == y for t, y in a)
    depths = {t.count("[") for t, _ in a}
    assert max(depths) > 3  # nested operations do occur
    labels = [y for _, y in a]
    assert set(labels) == set(range(10))
    assert listops.majority_rate(labels) < 0.3


def test_listops_module_batches(make_dm):
    dm = make_dm("listops", num_train=64, num_val=16, num_test=16, seq_len=48, batch_size=8)
    assert dm.num_classes == 10 and dm.vocab_size == 2 + 15  # pad and cls, then the 15 words
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    assert batch["input_ids"].shape[1] <= 48 and batch["labels"].shape == (8,)
    assert (batch["input_ids"][:, 0] == dm.tokenizer.cls_id).all()
    lengths = batch["attention_mask"].sum(1)
    for row, n, label in zip(batch["input_ids"], lengths, batch["labels"]):
        assert (row[n:] == dm.pad_id).all()
        assert listops.evaluate(listops.parse(dm.tokenizer.decode(row[:n].tolist()))) == label


def csv_rows(n: int) -> str:
    words = {"pos": "great lovely fine", "neg": "awful bad poor", "meh": "okay so so"}
    names = list(words)
    return "text,label\n" + "".join(f"{words[names[i % 3]]} {i},{names[i % 3]}\n" for i in range(n))


def test_csv_with_string_labels_saves_the_mapping(make_dm, tmp_path):
    (tmp_path / "reviews.csv").write_text(csv_rows(60))
    dm = make_dm(
        "text_classification", path=str(tmp_path / "reviews.csv"), val_fraction=0.2, test_fraction=0.2
    )
    assert dm.label_names == ["meh", "neg", "pos"] and dm.num_classes == 3
    assert [len(dm.datasets[s]) for s in ("train", "val", "test")] == [36, 12, 12]
    sample = dm.datasets["train"][0]
    text = dm.tokenizer.decode(sample["input_ids"].tolist())
    assert (
        dm.label_names[sample["labels"]] == {"great": "pos", "awful": "neg", "okay": "meh"}[text.split()[0]]
    )
    written = dm.save_tokenizer(tmp_path / "run")
    assert sorted(p.name for p in written) == ["labels.json", "tokenizer.json"]
    assert json.loads((tmp_path / "run" / "labels.json").read_text()) == ["meh", "neg", "pos"]
    assert {p.name for p in tmp_path.iterdir()} - {"hf_cache"} == {"reviews.csv", "run"}


def test_jsonl_split_files_with_integer_labels(make_dm, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    for split, n in (("train", 30), ("dev", 6), ("test", 6)):
        rows = [{"review": f"text number {i}", "stars": i % 4} for i in range(n)]
        (folder / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    dm = make_dm(
        "text_classification", path=str(folder), text_column="review", label_column="stars", seq_len=8
    )
    assert dm.label_names is None and dm.num_classes == 4
    assert [len(dm.datasets[s]) for s in ("train", "val", "test")] == [30, 6, 6]
    assert max(len(dm.datasets["train"][i]["input_ids"]) for i in range(30)) == 8  # cut to data.seq_len
    batch = next(iter(dm.val_dataloader()))
    assert batch["labels"].tolist() == [i % 4 for i in range(6)]  # evaluation keeps the file's order


def test_hf_csv_loader_offline(make_dm, tmp_path):
    (tmp_path / "reviews.csv").write_text(csv_rows(40))
    dm = make_dm(
        "text_classification", hf_name="csv", hf_data_files=str(tmp_path / "reviews.csv"), val_fraction=0.25
    )
    assert dm.label_names == ["meh", "neg", "pos"]
    assert [len(dm.datasets[s]) for s in ("train", "val", "test")] == [26, 10, 4]
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].dtype == torch.long and batch["attention_mask"].dtype == torch.bool


def test_classification_bad_inputs(make_dm, tmp_path):
    (tmp_path / "r.csv").write_text(csv_rows(30))
    with pytest.raises(
        ValueError, match=r"data.label_column='sentiment' is not a column of .*; available: text, label"
    ):
        make_dm("text_classification", path=str(tmp_path / "r.csv"), label_column="sentiment")
    with pytest.raises(
        ValueError, match=r"the data has 3 string labels \(meh, neg, pos\) but model.num_classes=2"
    ):
        make_dm("text_classification", path=str(tmp_path / "r.csv"), model={"num_classes": 2})
    (tmp_path / "r.xlsx").write_text("x")
    with pytest.raises(
        ValueError, match=r"r.xlsx: unsupported file type '.xlsx'; use one of .csv, .tsv, .jsonl, .json"
    ):
        make_dm("text_classification", path=str(tmp_path / "r.xlsx"))
    (tmp_path / "bad.jsonl").write_text('{"text": "a", "label": 1}\n{"text": oops}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not valid JSON"):
        make_dm("text_classification", path=str(tmp_path / "bad.jsonl"))
    (tmp_path / "header.csv").write_text("text,label\n")
    with pytest.raises(ValueError, match=r"header.csv has a header row but no data rows"):
        make_dm("text_classification", path=str(tmp_path / "header.csv"))
    (tmp_path / "gap.jsonl").write_text('{"text": "a", "label": 1}\n{"text": "b"}\n')
    with pytest.raises(ValueError, match=r"gap.jsonl:2: no value in column 'label'"):
        make_dm("text_classification", path=str(tmp_path / "gap.jsonl"))
    (tmp_path / "blank.csv").write_text(csv_rows(30).replace("awful bad poor 7,neg", "awful bad poor 7,"))
    with pytest.raises(ValueError, match=r"blank.csv:9: no value in column 'label'"):  # not a class ""
        make_dm("text_classification", path=str(tmp_path / "blank.csv"))
    (tmp_path / "wide.csv").write_text(csv_rows(30).replace("okay so so 5,meh", "okay, so so 5,meh"))
    with pytest.raises(ValueError, match=r"wide.csv:7: 3 field\(s\) where the header has 2"):
        make_dm("text_classification", path=str(tmp_path / "wide.csv"))


def test_labels_that_do_not_fit_the_head(make_dm, tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "train.csv").write_text("text,label\n" + "".join(f"t{i},{i % 5}\n" for i in range(20)))
    (folder / "val.csv").write_text("text,label\na,1\n")
    with pytest.raises(
        ValueError,
        match=r"^model.num_classes=3: the data has 5 classes \(data.label_column='label'\); set at least 5, "
        r"or 0 to size the head from the data$",
    ):
        make_dm("text_classification", path=str(folder), model={"num_classes": 3})
    dm = make_dm("text_classification", path=str(folder), model={"num_classes": 8})
    assert dm.num_classes == 8  # integer labels may leave the top classes unused
    (folder / "val.csv").write_text("text,label\na,pos\n")
    (folder / "train.csv").write_text("text,label\na,neg\nb,meh\n")
    with pytest.raises(
        ValueError, match=r"label 'pos' of the val split never occurs in training; training labels: meh, neg"
    ):
        make_dm("text_classification", path=str(folder))
