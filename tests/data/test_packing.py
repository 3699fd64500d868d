"""``data.packing``: documents from their sources, packed windows with document ids and boundary labels,
padded rows, resumable training streams, and the one-line refusals."""

from __future__ import annotations

import pytest
import torch

from attnlab.data.packing import (
    DocumentStream,
    PackedBatches,
    Pieces,
    default_documents,
    document_splits,
    with_documents,
)
from attnlab.schema.data import data_config
from attnlab.schema.errors import ConfigError

DOCS = [f"document {i}: {'abcdefgh'[i % 8] * (1 + i % 5)} ends\n" for i in range(40)]


@pytest.fixture
def doc_file(tmp_path):
    path = tmp_path / "docs.txt"
    path.write_text("\n===\n".join(DOCS), encoding="utf-8")
    return path


def stream(lengths: list[int]) -> DocumentStream:
    docs = torch.repeat_interleave(torch.arange(len(lengths), dtype=torch.int32), torch.tensor(lengths))
    return DocumentStream(torch.arange(100, 100 + sum(lengths), dtype=torch.int32), docs)


def test_causal_labels_never_cross_a_boundary_and_ids_restart_per_window() -> None:
    tokens = torch.arange(8).unsqueeze(0)
    docs = torch.tensor([[4, 4, 4, 5, 5, 6, 6, 6]])
    sample = with_documents(
        {"input_ids": tokens[:, :-1], "labels": tokens[:, 1:]}, docs, causal=True, mask=True
    )
    assert sample["labels"].tolist() == [[1, 2, -100, 4, -100, 6, 7]]  # tokens 2 and 4 end a document
    assert sample["document_ids"].tolist() == [[0, 0, 0, 1, 1, 2, 2]]
    unmasked = with_documents({"input_ids": tokens[:, :-1], "labels": tokens[:, 1:]}, docs, True, mask=False)
    assert "document_ids" not in unmasked and unmasked["labels"][0, 2] == -100


def test_packed_batches_gather_documents_at_the_token_offsets() -> None:
    s = stream([3, 9, 2, 30, 5, 11])
    batches = PackedBatches(s, 9, None, True, seed=3, batch_size=4, rank=0, world_size=1)
    batch = batches[12]
    first = batch["input_ids"][:, 0] - 100  # the token values are their stream offsets
    for row, start in enumerate(first.tolist()):
        expected = s.documents[start : start + 8].long()
        assert batch["document_ids"][row].tolist() == (expected - expected[0]).tolist()
        crosses = s.documents[start + 1 : start + 9] != s.documents[start : start + 8]
        assert torch.equal(batch["labels"][row] == -100, crosses)
    assert torch.equal(batches[12]["input_ids"], batch["input_ids"])  # a pure function of the position


def test_pieces_pad_one_document_per_row_and_predict_each_token_once() -> None:
    pieces = Pieces(stream([3, 9, 1, 4]), seq_len=4, pad_id=0)
    # 3 -> [0..3); 9 -> [3..8), [7..12); 1 -> nothing to predict; 4 -> [13..17)
    assert pieces.starts.tolist() == [0, 3, 7, 13] and pieces.lengths.tolist() == [3, 5, 5, 4]
    first = pieces[0]
    assert first["input_ids"].tolist() == [100, 101, 0, 0]
    assert first["labels"].tolist() == [101, 102, -100, -100]
    assert first["attention_mask"].tolist() == [True, True, False, False]
    predicted = torch.cat([pieces[i]["labels"][pieces[i]["labels"] != -100] for i in range(len(pieces))])
    assert predicted.tolist() == [101, 102, *range(104, 112), 114, 115, 116]
    assert pieces.real_fraction == pytest.approx(13 / 16)


def test_default_corpus_documents_are_its_topics_and_splits_are_whole_documents(make_dm) -> None:
    dm = make_dm("text", seq_len=64, batch_size=2, packing="documents", val_fraction=0.1, test_fraction=0.1)
    docs = default_documents()
    n_val = int(len(docs) * 0.1)
    val = dm.datasets["val"]
    decoded = dm.tokenizer.decode(val.stream.tokens.tolist())
    n_train = len(docs) - 2 * n_val
    assert decoded == "".join(docs[n_train : n_train + n_val])
    assert int(val.stream.documents.max()) + 1 == n_val
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == batch["document_ids"].shape == (2, 64)
    sample = val[0]
    assert sample["document_ids"][0] == 0 and set(sample) == {"input_ids", "labels", "document_ids"}


def test_a_file_is_split_by_the_document_separator(make_dm, doc_file) -> None:
    dm = make_dm(
        "text", path=str(doc_file), seq_len=8, batch_size=2, packing="documents", document_separator="\n===\n"
    )
    train = dm.datasets["train"].stream
    n_train = len(DOCS) - 2 * int(len(DOCS) * 0.05)
    assert int(train.documents.max()) + 1 == n_train
    assert dm.tokenizer.decode(train.tokens.tolist()) == "".join(DOCS[:n_train])
    # a command line spells a newline as \n: the escaped separator finds the same documents
    padded = make_dm("text", path=str(doc_file), seq_len=8, packing="padded", document_separator="\\n===\\n")
    assert isinstance(padded.datasets["val"], Pieces)
    assert document_splits(padded.cfg, seed=0)["train"] == DOCS[:n_train]
    assert padded.datasets["val"][0]["attention_mask"].dtype == torch.bool


def test_mlm_packs_documents_with_masking(make_dm, doc_file) -> None:
    dm = make_dm(
        "text",
        task="mlm",
        path=str(doc_file),
        seq_len=16,
        batch_size=3,
        packing="documents",
        test_fraction=0.2,
        document_separator="\n===\n",
    )
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"input_ids", "labels", "attention_mask", "document_ids"}
    assert batch["document_ids"].shape == (3, 16) and (batch["document_ids"][:, 0] == 0).all()


def test_training_streams_resume_at_the_saved_position(make_dm, doc_file) -> None:
    for packing in ("documents", "padded"):
        dm = make_dm(
            "text", path=str(doc_file), seq_len=8, batch_size=2, packing=packing, document_separator="\n===\n"
        )
        loader = dm.train_dataloader()
        batches = [b for _, b in zip(range(5), loader)]
        state = loader.state_dict()
        later = next(iter(loader))
        resumed = dm.train_dataloader()
        resumed.load_state_dict(state)
        again = next(iter(resumed))
        assert all(torch.equal(later[k], again[k]) for k in later), packing
        assert not torch.equal(batches[0]["input_ids"], later["input_ids"])


@pytest.mark.parametrize(
    ("fields", "key", "message"),
    [
        (dict(path="x.txt", packing="documents"), "data.packing", "set data.document_separator"),
        (dict(packing="padded", document_separator=""), "data.document_separator", "non-empty"),
        (dict(document_mask=False), "data.document_mask", "applies to data.packing=documents only"),
    ],
)
def test_packing_without_boundaries_is_refused_in_one_line(fields, key, message) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        data_config("text", **fields).check()
    assert str(err.value).startswith(key) and "\n" not in str(err.value)
