"""Tokenizers: round trips, stable special ids, save/load restoring the same ids, bad files."""

from __future__ import annotations

import json

import pytest

from attnlab.data.tokenizers import (
    SPECIAL_TOKENS,
    BPETokenizer,
    VocabTokenizer,
    build_tokenizer,
    load_tokenizer,
    train_bpe,
)

TEXT = "The quick brown fox jumps over the lazy dog.\nNaïve café — déjà vu!\n" * 20
SPECIAL_ORDER = ["pad", "unk", "bos", "eos", "mask", "cls", "sep"]


def special_ids(tok) -> list[int]:
    return [tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id, tok.mask_id, tok.cls_id, tok.sep_id]


def test_char_tokenizer_round_trip_and_specials():
    tok = VocabTokenizer.from_texts([TEXT])
    assert special_ids(tok) == list(range(7))
    assert tok.vocab_size == 7 + len(set(TEXT))
    ids = tok.encode(TEXT)
    assert len(ids) == len(TEXT) and min(ids) >= 7
    assert tok.decode(ids) == TEXT
    assert tok.encode("Z") == [tok.unk_id]  # a character not seen in training
    # text never yields a special id
    assert tok.encode("<pad>") == [tok.unk_id, *tok.encode("pad"), tok.unk_id]
    assert tok.decode([tok.bos_id, *tok.encode("fox"), tok.eos_id]) == "fox"
    assert tok.decode([tok.bos_id, *tok.encode("fox")], skip_special=False) == "<bos>fox"


def test_space_tokenizer_splits_words():
    tok = VocabTokenizer.from_texts(["[MAX 1 2 ] [MIN 3 ]"], split="space")
    ids = tok.encode("[MAX 1 [MIN 3 2 ] ]")
    assert len(ids) == 7 and tok.decode(ids) == "[MAX 1 [MIN 3 2 ] ]"
    assert tok.encode("[FOO") == [tok.unk_id]


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_save_and_load_restore_the_same_ids(tmp_path, kind):
    tok = build_tokenizer(kind, [TEXT], bpe_vocab_size=300)
    path = tok.save(tmp_path / "run")
    assert path == tmp_path / "run" / "tokenizer.json"
    for source in (tmp_path / "run", path):
        back = load_tokenizer(source)
        assert type(back) is type(tok)
        assert back.vocab_size == tok.vocab_size
        assert special_ids(back) == special_ids(tok)
        assert back.encode(TEXT) == tok.encode(TEXT)
        assert back.decode(tok.encode(TEXT)) == TEXT


def test_bpe_is_byte_level_and_merges_frequent_pairs():
    tok = train_bpe([TEXT], vocab_size=300)
    assert isinstance(tok, BPETokenizer)
    assert special_ids(tok) == list(range(7))
    assert 263 < tok.vocab_size <= 300  # 256 bytes + 7 specials + merges
    ids = tok.encode(TEXT)
    assert len(ids) < len(TEXT.encode("utf-8")) / 2  # merges shorten the frequent text
    assert tok.decode(ids) == TEXT
    unseen = "日本語 text ✓"  # bytes never seen in training still round-trip
    assert tok.decode(tok.encode(unseen)) == unseen
    assert tok.encode_corpus(TEXT) == [i for line in TEXT.splitlines(keepends=True) for i in tok.encode(line)]


def test_ready_tokenizer_json_maps_known_special_spellings(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "hello": 5, "world": 6}
    hf = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    hf.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    hf.save(str(tmp_path / "bert-like.json"))
    tok = build_tokenizer(str(tmp_path / "bert-like.json"), [], bpe_vocab_size=0)
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert (tok.bos_id, tok.eos_id) == (7, 8)  # missing roles are appended
    assert tok.vocab_size == 9
    assert tok.encode("hello world") == [5, 6]
    tok.save(tmp_path / "run")
    assert special_ids(load_tokenizer(tmp_path / "run")) == special_ids(tok)


def test_trained_tokenizers_put_the_specials_first_in_one_order(tmp_path):
    assert list(SPECIAL_TOKENS) == SPECIAL_ORDER
    saved = json.loads(VocabTokenizer.from_texts(["ab"]).save(tmp_path).read_text())
    assert saved["tokens"] == [*SPECIAL_TOKENS.values(), "a", "b"]
    bpe = train_bpe(["ab ab"], vocab_size=270)
    assert [bpe.hf.id_to_token(i) for i in range(7)] == list(SPECIAL_TOKENS.values())


def test_missing_and_broken_tokenizer_files(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no tokenizer file at .*tokenizer\.json"):
        load_tokenizer(tmp_path)
    with pytest.raises(
        FileNotFoundError, match=r"data.tokenizer='nope.json' is neither 'char', 'bpe' nor an existing"
    ):
        build_tokenizer("nope.json", [], 0)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"bad.json is not a tokenizer file: it is not valid JSON"):
        load_tokenizer(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match=r"other.json is not a Hugging Face tokenizer.json"):
        load_tokenizer(tmp_path / "other.json")
