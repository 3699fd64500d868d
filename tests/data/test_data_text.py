"""Language-model text: the default corpus, sources, splits, windows, BERT's masking."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from attnlab.data.text import Masking, WindowBatches, default_corpus, unigram_entropy

SHAKESPEARE = Path(__file__).resolve().parents[3] / "shared" / "data" / "tinyshakespeare.txt"


def lines(n: int) -> str:
    return "".join(f"line {i}: the cat sat on mat number {i % 7}.\n" for i in range(n))


def test_default_corpus_is_the_pydoc_topics_in_sorted_order():
    from pydoc_data.topics import topics

    corpus = default_corpus()
    assert 300_000 < len(corpus) < 1_000_000
    first, second = sorted(topics)[:2]
    assert corpus.startswith(topics[first].strip("\n") + "\n\n" + topics[second].strip("\n"))


def test_default_text_module_causal_batches(make_dm):
    dm = make_dm("text", seq_len=64, batch_size=4)
    assert dm.vocab_size == len(set(default_corpus()))  # the corpus's characters, no specials
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == batch["labels"].shape == (4, 64)
    assert batch["input_ids"].dtype == batch["labels"].dtype == torch.long
    assert torch.equal(batch["input_ids"][:, 1:], batch["labels"][:, :-1])  # labels are the next tokens
    val = dm.datasets["val"]
    tokens = val.windows.tokens
    assert len(val) == (len(tokens) - 65) // 64 + 1
    assert torch.equal(val[1]["input_ids"], tokens[64:128].long())  # fixed, non-overlapping windows
    # the three splits are contiguous ranges of the corpus
    decoded = "".join(
        dm.tokenizer.decode(dm.datasets[s].windows.tokens.tolist()) for s in ("train", "val", "test")
    )
    assert decoded == default_corpus()
    assert 2.5 < dm.unigram_entropy("val") < 3.6  # nats per character


def batches(tokens, span=11, batch_size=4, world_size=1, rank=0, masking=None, seed=1):
    return WindowBatches(
        tokens, span, masking, seed=seed, batch_size=batch_size, rank=rank, world_size=world_size
    )


def test_random_windows_are_a_pure_function_of_seed_and_position():
    stream = torch.arange(1000, dtype=torch.int32)
    a, b = batches(stream), batches(stream)
    assert torch.equal(a[40]["input_ids"], b[40]["input_ids"])
    assert not torch.equal(a[40]["input_ids"], a[44]["input_ids"])
    assert not torch.equal(a[40]["input_ids"], batches(stream, seed=2)[40]["input_ids"])
    starts = torch.cat([a[p]["input_ids"][:, 0] for p in range(0, 400, 4)])
    assert starts.min() >= 0 and starts.max() <= 989 and len(set(starts.tolist())) > 80
    batch = a[8]
    windows = torch.cat([batch["input_ids"], batch["labels"][:, -1:]], 1)
    assert torch.equal(windows, windows[:, :1] + torch.arange(11))  # contiguous slices of the stream
    assert torch.equal(batch["labels"], batch["input_ids"] + 1) and batch["input_ids"].dtype == torch.long


@pytest.mark.parametrize("masked", [False, True])
def test_ranks_draw_the_rows_of_one_process_with_the_doubled_batch(masked):
    tokens = torch.randint(5, 40, (5000,), dtype=torch.int32)
    masking = Masking(0.3, 1, torch.tensor([0, 1]), torch.arange(5, 40)) if masked else None
    one = batches(tokens, span=16, batch_size=8, masking=masking)
    ranks = [batches(tokens, span=16, batch_size=4, world_size=2, rank=r, masking=masking) for r in (0, 1)]
    for position in (0, 8, 800):
        joined = [ranks[0][position], ranks[1][position]]
        for key, value in one[position].items():
            assert torch.equal(value, torch.cat([j[key] for j in joined])), (position, key)


def test_local_file_folder_and_split_files(make_dm, tmp_path):
    file = tmp_path / "one.txt"
    file.write_text(lines(200))
    dm = make_dm("text", path=str(file), seq_len=16, val_fraction=0.1, test_fraction=0.1)
    text = "".join(
        dm.tokenizer.decode(dm.datasets[s].windows.tokens.tolist()) for s in ("train", "val", "test")
    )
    assert text == lines(200) and dm.vocab_size == len(set(lines(200)))
    assert len(dm.datasets["val"].windows.tokens) == int(len(lines(200)) * 0.1)

    folder = tmp_path / "books"
    (folder / "sub").mkdir(parents=True)
    (folder / "b.txt").write_text(lines(100))
    (folder / "sub" / "a.txt").write_text("zzz " * 200)
    (folder / ".hidden").write_text("never read")
    dm = make_dm("text", path=str(folder), seq_len=16)
    train = dm.tokenizer.decode(dm.datasets["train"].windows.tokens.tolist())
    assert train.startswith("line 0:") and "never" not in train  # sorted: b.txt before sub/a.txt

    splits = tmp_path / "wiki"
    splits.mkdir()
    for name, n in (("train.txt", 300), ("valid.txt", 40), ("test.txt", 30)):
        (splits / name).write_text(lines(n))
    dm = make_dm("text", path=str(splits), seq_len=16)
    assert dm.tokenizer.decode(dm.datasets["val"].windows.tokens.tolist()) == lines(40)
    assert dm.tokenizer.decode(dm.datasets["test"].windows.tokens.tolist()) == lines(30)


def test_hf_text_loader_offline(make_dm, tmp_path):
    data = tmp_path / "corpus.txt"
    data.write_text(lines(300))
    fields = {"hf_name": "text", "hf_data_files": str(data), "tokenizer": "bpe", "bpe_vocab_size": 300}
    dm = make_dm("text", seq_len=16, setup=False, **fields)
    dm.prepare_data()  # fills the cache in data.cache_dir
    assert (tmp_path / "hf_cache").is_dir()
    dm.setup("fit")
    assert 263 < dm.vocab_size <= 300
    joined = "".join(
        dm.tokenizer.decode(dm.datasets[s].windows.tokens.tolist()) for s in ("train", "val", "test")
    )
    assert joined + "\n" == lines(300)  # rows joined by newlines, then carved like a local file
    # nothing written beside the data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "hf_cache"]


@pytest.mark.skipif(not SHAKESPEARE.exists(), reason="tinyshakespeare.txt is not in ../shared/data")
def test_tiny_shakespeare_char_vocabulary(make_dm):
    dm = make_dm("text", path=str(SHAKESPEARE), val_fraction=0.1, test_fraction=0.0, seq_len=32)
    assert dm.vocab_size == 65  # nanoGPT's 65 characters: a causal LM needs no special token
    assert (
        dm.tokenizer.decode(range(65)) == "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    )


def test_mlm_masking_is_80_10_10_and_never_touches_specials():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(7, 50, (200_000,))
    ids[::10] = 5  # a special (cls) every 10 tokens
    masking = Masking(0.15, 4, torch.arange(7), torch.arange(7, 50))
    batch = masking.apply(ids, masking.noise(ids.shape, g))
    inputs, labels = batch["input_ids"], batch["labels"]
    chosen = labels != -100
    assert not chosen[::10].any()
    assert torch.equal(labels[chosen], ids[chosen])
    ordinary = ids != 5
    assert abs(chosen[ordinary].float().mean().item() - 0.15) < 0.005
    masked = (inputs == 4) & chosen
    kept = (inputs == ids) & chosen
    assert abs(masked.sum().item() / chosen.sum().item() - 0.8) < 0.01
    assert abs(kept.sum().item() / chosen.sum().item() - (0.1 + 0.1 / 43)) < 0.01
    assert torch.equal(inputs[~chosen], ids[~chosen])
    assert inputs[chosen & ~masked].min() >= 7  # random replacements are ordinary tokens
    assert batch["attention_mask"].all()


def test_mlm_module_batches_are_reproducible(make_dm, tmp_path):
    file = tmp_path / "c.txt"
    file.write_text(lines(300))
    dm = make_dm("text", task="mlm", path=str(file), seq_len=32, batch_size=8)
    assert dm.tokenizer.special_ids == {"mask": 0}  # masked LM needs the mask token only
    train = dm.train_dataloader().batches
    a, b = train[16], train[16]
    assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["labels"], b["labels"])
    assert not torch.equal(train[16]["labels"], train[24]["labels"])
    val = dm.datasets["val"]
    assert torch.equal(val[3]["input_ids"], val[3]["input_ids"]) and not torch.equal(
        val[3]["labels"], val[4]["labels"]
    )
    batch = next(iter(dm.val_dataloader()))
    assert batch["attention_mask"].dtype == torch.bool and batch["attention_mask"].all()
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    assert (batch["labels"] != -100).float().mean().item() == pytest.approx(0.15, abs=0.06)


def test_unigram_entropy():
    assert unigram_entropy([1, 2, 3, 4]) == pytest.approx(math.log(4))
    assert unigram_entropy([7, 7, 7]) == 0.0


def test_missing_empty_and_binary_files(make_dm, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"data.path='.*missing.txt': no such file or folder"):
        make_dm("text", path=str(tmp_path / "missing.txt"))
    with pytest.raises(ValueError, match=r"data.path='/dev/null': neither a regular file nor a folder"):
        make_dm("text", path="/dev/null")
    (tmp_path / "empty.txt").write_text("  \n")
    with pytest.raises(ValueError, match=r"empty.txt is empty"):
        make_dm("text", path=str(tmp_path / "empty.txt"))
    (tmp_path / "latin1.txt").write_bytes(lines(30).encode() + "café\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.txt:31: not UTF-8 text \(invalid continuation byte"):
        make_dm("text", path=str(tmp_path / "latin1.txt"))
    (tmp_path / "zeros.bin").write_bytes(bytes(200_000))  # trained as text before
    with pytest.raises(ValueError, match=r"zeros.bin:1: not a text file \(it holds NUL bytes\)"):
        make_dm("text", path=str(tmp_path / "zeros.bin"))
    (tmp_path / "controls.txt").write_bytes(bytes(range(1, 32)) * 100)
    with pytest.raises(
        ValueError, match=r"controls.txt: not a text file \(2600 of its 3100 characters are control"
    ):
        make_dm("text", path=str(tmp_path / "controls.txt"))
    (tmp_path / "nothing").mkdir()
    with pytest.raises(ValueError, match=r"data.path='.*nothing' is a folder without any files"):
        make_dm("text", path=str(tmp_path / "nothing"))


def test_text_a_saved_tokenizer_cannot_encode_names_the_split_and_characters(make_dm, tmp_path):
    (tmp_path / "a.txt").write_text(lines(100))
    dm = make_dm("text", path=str(tmp_path / "a.txt"), seq_len=16)
    dm.save_tokenizer(tmp_path / "run")
    (tmp_path / "b.txt").write_text(lines(100) + "Zoë\n")
    with pytest.raises(
        ValueError,
        match=r"the test split of data.path='.*b.txt': the text has 2 character\(s\) the tokenizer cannot "
        r"encode: 'Z', 'ë' \(its",
    ):
        make_dm("text", path=str(tmp_path / "b.txt"), seq_len=16, tokenizer=str(tmp_path / "run"))


def test_text_shorter_than_a_window(make_dm, tmp_path):
    (tmp_path / "short.txt").write_text("tiny text " * 50)
    with pytest.raises(
        ValueError, match=r"the val split has 25 tokens, fewer than one window of 129 \(data.seq_len=128\)"
    ):
        make_dm("text", path=str(tmp_path / "short.txt"))


def test_bad_hf_sources(make_dm, tmp_path):
    with pytest.raises(
        ValueError, match=r"could not load data.hf_name='no-such-dataset-xyz' \(data.hf_config=None\)"
    ):
        make_dm("text", hf_name="no-such-dataset-xyz")
    (tmp_path / "c.txt").write_text(lines(50))
    with pytest.raises(
        ValueError, match=r"data.text_column='body' is not a column of data.hf_name='text'; available: text"
    ):
        make_dm("text", hf_name="text", hf_data_files=str(tmp_path / "c.txt"), text_column="body")


def test_tokenizer_that_does_not_fit_the_model(make_dm, tmp_path):
    dm = make_dm("text", seq_len=32)
    dm.save_tokenizer(tmp_path / "run")
    with pytest.raises(
        ValueError,
        match=r"^model.vocab_size=50000: the tokenizer \(data.tokenizer='char'\) has \d+ tokens; set 0 to",
    ):
        make_dm("text", seq_len=32, model={"vocab_size": 50000})
    restored = make_dm(
        "text", seq_len=32, tokenizer=str(tmp_path / "run"), model={"vocab_size": dm.vocab_size}
    )
    assert restored.tokenizer.vocab == dm.tokenizer.vocab


def multibyte_lines(n: int) -> str:
    return "".join(f"line {i}: café — déjà vu, 日本 {i % 7}.\n" for i in range(n))


@pytest.mark.parametrize("tokenizer", ["char", "bpe"])
def test_causal_eval_batches_carry_the_bytes_of_their_labels(make_dm, tmp_path, tokenizer):
    """``label_bytes``: what bits per byte divides by. Validation's windows score a contiguous stretch
    of the split, so their bytes add up to the UTF-8 bytes of that stretch's text; training batches
    carry none (nothing reads them there)."""
    file = tmp_path / "c.txt"
    file.write_text(multibyte_lines(200), encoding="utf-8")
    dm = make_dm("text", path=str(file), tokenizer=tokenizer, bpe_vocab_size=300, seq_len=16, batch_size=4)
    batches = list(dm.val_dataloader())
    scored = torch.cat([b["labels"].flatten() for b in batches])
    total = sum(int(b["label_bytes"].sum()) for b in batches)
    assert total == len(dm.tokenizer.decode(scored.tolist()).encode("utf-8"))
    assert total > len(scored)  # the multi-byte characters count as more than one byte each
    assert "label_bytes" not in dm.train_dataloader().batches[0]


@pytest.mark.parametrize("packing", ["documents", "padded"])
def test_ignored_labels_cover_no_bytes(make_dm, tmp_path, packing):
    """Padding and document boundaries (labels -100) count no bytes; every scored label counts its own."""
    file = tmp_path / "docs.txt"
    file.write_text("\n===\n".join(multibyte_lines(5 + i % 3) for i in range(40)), encoding="utf-8")
    dm = make_dm(
        "text",
        path=str(file),
        tokenizer="bpe",
        bpe_vocab_size=300,
        seq_len=16,
        batch_size=4,
        packing=packing,
        document_separator="\\n===\\n",
    )
    sizes = torch.tensor(dm.tokenizer.token_bytes())
    batch = next(iter(dm.val_dataloader()))
    labels, counted = batch["labels"], batch["label_bytes"]
    assert (labels == -100).any() and (counted[labels == -100] == 0).all()
    assert torch.equal(counted[labels != -100], sizes[labels[labels != -100]].to(counted.dtype))
