"""Token shards: attnlab-prepare's output (the same from JSONL and parquet, any number of workers, and
after a killed prepare), the formats read (attnlab, nanoGPT's raw .bin, llm.c's), damaged shards
refused in one line naming the file, and ``data.kind=tokens``'s windows (the same for any split of the
samples over ranks and workers, resumed exactly, with documents and bits per byte)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab.data.documents import documents as read_documents
from attnlab.data.prepare import PrepareSettings, Progress, prepare
from attnlab.data.sampling import ResumableLoader
from attnlab.data.shards import (
    HEADER_INTS,
    LLMC_MAGIC,
    MANIFEST,
    ShardError,
    open_attnlab_shard,
    open_llmc_shard,
    read_manifest,
    token_folder,
    write_manifest,
)
from attnlab.data.tokenizers import load_tokenizer
from attnlab.data.tokens import TokenBatches, window_starts
from attnlab.schema.data import IGNORE_INDEX
from token_corpus import documents, write_jsonl, write_parquet, write_tokenizer

DOCS = documents(1200)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    write_jsonl(folder / "docs.jsonl", DOCS)
    write_parquet(folder / "docs.parquet", DOCS)
    write_tokenizer(folder / "tokenizer.json", DOCS)
    return folder


def settings(corpus: Path, out: Path, source: str = "docs.jsonl", **more) -> PrepareSettings:
    given = dict(inputs=[str(corpus / source)], tokenizer=str(corpus / "tokenizer.json"), shard_tokens=20_000)
    return PrepareSettings(
        out=str(out), **{**given, "val_every": 20, "workers": 1, "progress": False, **more}
    )


@pytest.fixture(scope="module")
def prepared(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("prepared")
    prepare(settings(corpus, out), say=lambda line: None)
    return out


def shard_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.bin"))}


def manifest_without_settings(folder: Path) -> dict:
    return {k: v for k, v in read_manifest(folder).items() if k != "settings"}


# -- prepare ----------------------------------------------------------------------------------------


def test_shards_hold_every_document_behind_the_end_of_text_token(prepared: Path, corpus: Path) -> None:
    manifest = read_manifest(prepared)
    tokenizer = load_tokenizer(prepared / "tokenizer.json")
    folder = token_folder(prepared, verify=True)
    train = np.concatenate(folder.open("train"))
    eot = manifest["eot_id"]
    assert manifest["dtype"] == "uint16" and train.dtype == np.uint16 and eot == tokenizer.eos_id
    texts = [t for i, t in enumerate(DOCS) if i % 20 != 19]  # every 20th document is validation
    first = np.flatnonzero(train == eot)
    assert len(first) == len(texts) == manifest["documents"]["train"]
    ends = [*first[1:], len(train)]
    assert [tokenizer.decode(train[s + 1 : e].tolist()) for s, e in zip(first, ends)] == texts
    assert manifest["tokens"]["train"] == len(train) and manifest["documents"]["val"] == len(DOCS) // 20
    text_bytes = sum(len(t.encode()) for t in DOCS)
    assert manifest["bytes_per_token"] == pytest.approx(text_bytes / sum(manifest["tokens"].values()))
    sizes = [entry["tokens"] for entry in manifest["shards"] if entry["split"] == "train"]
    assert len(sizes) > 3 and max(sizes) <= 20_000  # whole documents, none past shard_tokens


def test_parquet_and_two_workers_give_the_same_shards(prepared: Path, corpus: Path, tmp_path: Path) -> None:
    prepare(settings(corpus, tmp_path, "docs.parquet", workers=2, batch_documents=7), say=lambda line: None)
    assert shard_bytes(tmp_path) == shard_bytes(prepared)
    assert manifest_without_settings(tmp_path) == manifest_without_settings(prepared)


def test_a_rerun_removes_a_shard_the_manifest_does_not_list_and_rewrites_it_the_same(
    prepared: Path, corpus: Path, tmp_path: Path
) -> None:
    """As a prepare killed between a shard's rename and the manifest's update leaves the folder."""
    out = tmp_path / "out"
    out.mkdir()
    for name, data in shard_bytes(prepared).items():
        (out / name).write_bytes(data)
    (out / "tokenizer.json").write_bytes((prepared / "tokenizer.json").read_bytes())
    manifest = read_manifest(prepared)
    manifest["settings"] = settings(corpus, out).identity()
    manifest["shards"] = manifest["shards"][:3]  # as if killed after the third shard
    manifest["complete"] = False
    write_manifest(out, manifest)
    (out / "train_000009.bin.tmp").write_bytes(b"half a shard")
    said: list[str] = []
    prepare(settings(corpus, out), say=said.append)
    kept = {entry["file"] for entry in manifest["shards"]}
    unlisted = [*sorted({*shard_bytes(prepared)} - kept), "train_000009.bin.tmp"]
    assert sorted(line.split(":")[0] for line in said) == [f"removed {name}" for name in sorted(unlisted)]
    assert shard_bytes(out) == shard_bytes(prepared)


def test_a_damaged_shard_is_refused_with_its_name(prepared: Path, corpus: Path, tmp_path: Path) -> None:
    for name, data in shard_bytes(prepared).items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / MANIFEST).write_bytes((prepared / MANIFEST).read_bytes())
    shard = tmp_path / "train_000001.bin"
    damaged = bytearray(shard.read_bytes())
    damaged[5000] ^= 0xFF
    shard.write_bytes(bytes(damaged))
    token_folder(tmp_path)  # the size is right: only the sha256 tells, which verify reads
    with pytest.raises(
        ShardError, match=r"^\S+train_000001.bin: its bytes do not match manifest.json"
    ) as err:
        token_folder(tmp_path, verify=True)
    assert "\n" not in str(err.value)
    shard.write_bytes(bytes(damaged[:-2]))
    with pytest.raises(ShardError, match=r"train_000001\.bin: its bytes do not match"):
        token_folder(tmp_path)


def test_a_prepare_of_other_settings_in_the_same_folder_is_refused(prepared: Path, corpus: Path) -> None:
    with pytest.raises(ShardError, match="holds shards prepared with other settings"):
        prepare(settings(corpus, prepared, shard_tokens=30_000), say=lambda line: None)


def test_a_byte_level_bpe_is_trained_on_a_sample_and_saved_beside_the_shards(
    corpus: Path, tmp_path: Path
) -> None:
    manifest = prepare(
        settings(corpus, tmp_path, tokenizer=None, bpe_vocab_size=300, bpe_sample_bytes=50_000),
        say=lambda line: None,
    )
    tokenizer = load_tokenizer(tmp_path / "tokenizer.json")
    assert tokenizer.vocab_size == manifest["vocab_size"] == 300 and manifest["eot_id"] == tokenizer.eos_id


# -- formats ----------------------------------------------------------------------------------------


def header(magic: int, version: int, count: int) -> bytes:
    values = np.zeros(HEADER_INTS, dtype=np.int32)
    values[:3] = magic, version, count
    return values.tobytes()


def test_llmc_shards_are_read_and_a_wrong_magic_or_version_is_refused(tmp_path: Path) -> None:
    tokens = np.arange(3000, dtype=np.uint16)
    good = tmp_path / "fineweb_train_000001.bin"
    good.write_bytes(header(LLMC_MAGIC, 1, len(tokens)) + tokens.tobytes())
    assert np.array_equal(open_llmc_shard(good), tokens)
    wrong = tmp_path / "wrong.bin"
    wrong.write_bytes(header(20240521, 1, len(tokens)) + tokens.tobytes())
    with pytest.raises(ShardError, match=rf"^{wrong}: magic 20240521 is not llm.c's shard magic 20240520$"):
        open_llmc_shard(wrong)
    wrong.write_bytes(header(LLMC_MAGIC, 7, len(tokens)) + tokens.tobytes())
    with pytest.raises(ShardError, match=rf"^{wrong}: llm.c shard version 7; attnlab reads version 1"):
        open_llmc_shard(wrong)
    with pytest.raises(ShardError, match=rf"^{good}: magic 20240520 is not an attnlab shard's"):
        open_attnlab_shard(good)
    (tmp_path / "fineweb_val_000000.bin").write_bytes(good.read_bytes())
    folder = token_folder(tmp_path)
    assert folder.format == "llmc" and [p.name for p in folder.files["train"]] == [good.name]


def test_nanogpt_bin_files_are_raw_uint16(tmp_path: Path) -> None:
    tokens = np.array([5, 6, 7, 50256, 8, 9], dtype=np.uint16)
    tokens.tofile(tmp_path / "train.bin")
    tokens.tofile(tmp_path / "val.bin")
    folder = token_folder(tmp_path)
    assert folder.format == "nanogpt" and not folder.eot_starts_documents
    (shard,) = folder.open("train")
    assert shard.tolist() == tokens.tolist() and isinstance(shard, np.memmap)


# -- windows ----------------------------------------------------------------------------------------


def token_dm(make_dm, path: Path, **fields):
    return make_dm("tokens", path=str(path), seq_len=32, batch_size=8, **fields)


def inputs(loader: ResumableLoader, steps: int) -> list[torch.Tensor]:
    """The input windows of the loader's next ``steps`` batches (exactly those: its position moves by them)."""
    return [batch["input_ids"] for batch in itertools.islice(loader, steps)]


def test_windows_of_a_step_are_the_same_for_one_process_and_two_ranks_of_two_workers(
    make_dm, prepared
) -> None:
    dm = token_dm(make_dm, prepared)
    one = inputs(ResumableLoader(dm.train_batches(seed=1, batch_size=8, rank=0, world_size=1)), 3)
    ranks = []
    for rank in (0, 1):
        batches = dm.train_batches(seed=1, batch_size=4, rank=rank, world_size=2)
        ranks.append(inputs(ResumableLoader(batches, num_workers=2), 3))
    for step in range(3):
        assert torch.equal(torch.cat([ranks[0][step], ranks[1][step]]), one[step])
        rows = [{tuple(row.tolist()) for row in ranks[r][step]} for r in (0, 1)]
        assert not rows[0] & rows[1] and len(rows[0] | rows[1]) == 8


def test_window_starts_depend_on_the_sample_alone_and_reach_every_shard(prepared) -> None:
    samples = np.arange(10_000, dtype=np.uint64)
    starts = window_starts(7, samples, 1_000_003)
    assert np.array_equal(starts[5000:], window_starts(7, samples[5000:], 1_000_003))
    assert not np.array_equal(starts, window_starts(8, samples, 1_000_003))
    assert starts.min() >= 0 and starts.max() < 1_000_003 and len(np.unique(starts)) > 9_900


def test_the_loader_resumes_at_its_saved_position_with_the_same_windows(make_dm, prepared) -> None:
    dm = token_dm(make_dm, prepared)

    def loader() -> ResumableLoader:
        return ResumableLoader(dm.train_batches(seed=1, batch_size=8, rank=0, world_size=1))

    drawn, killed, resumed = inputs(loader(), 5), loader(), loader()
    inputs(killed, 2)
    resumed.load_state_dict(json.loads(json.dumps(killed.state_dict())))  # as a checkpoint keeps it
    assert all(torch.equal(a, b) for a, b in zip(drawn[2:], inputs(resumed, 3), strict=True))


def test_bos_aligned_windows_start_at_documents_and_documents_mask_their_boundaries(
    make_dm, prepared
) -> None:
    eot = read_manifest(prepared)["eot_id"]
    dm = token_dm(make_dm, prepared, bos_aligned=True, packing="documents")
    batch = dm.train_batches(seed=0, batch_size=64, rank=0, world_size=1)[0]
    inputs, labels, ids = batch["input_ids"], batch["labels"], batch["document_ids"]
    assert (inputs[:, 0] == eot).all()
    assert torch.equal(ids, torch.cumsum(inputs == eot, dim=1) - 1)
    crossing = labels.eq(IGNORE_INDEX)
    assert crossing.any() and (crossing == torch.cat([ids[:, 1:] != ids[:, :-1], crossing[:, -1:]], 1)).all()


def test_validation_reads_fixed_windows_and_counts_the_bytes_of_their_labels(make_dm, prepared) -> None:
    dm = token_dm(make_dm, prepared, val_windows=10)
    val = dm.datasets["val"]
    assert len(val) == 10 and torch.equal(
        val[3]["input_ids"], token_dm(make_dm, prepared).datasets["val"][3]["input_ids"]
    )
    batch = dm.eval_collate_fn()([val[i] for i in range(10)])
    specials = dm.tokenizer.all_special_ids
    text = "".join(
        dm.tokenizer.decode([i for i in row.tolist() if i not in specials]) for row in batch["labels"]
    )
    assert int(batch["label_bytes"].sum()) == len(text.encode("utf-8"))


def test_a_missing_folder_names_the_command_that_prepares_it(make_dm, tmp_path) -> None:
    command = "attnlab-prepare --hf x --out nowhere (needs 1 GB)"
    with pytest.raises(
        FileNotFoundError, match=r"no such folder of token shards; prepare it with: attnlab-pre"
    ):
        token_dm(make_dm, tmp_path / "nowhere", prepare_command=command)


def test_nanogpt_bin_files_need_the_tokenizer_their_tokens_come_from(make_dm, prepared, tmp_path) -> None:
    tokens = np.concatenate(token_folder(prepared).open("train"))
    tokens.tofile(tmp_path / "train.bin")
    tokens[:5000].tofile(tmp_path / "val.bin")
    with pytest.raises(
        Exception, match=r"data.tokenizer=null: the nanogpt files of data.path=.* name no tokenizer"
    ):
        token_dm(make_dm, tmp_path)
    dm = token_dm(make_dm, tmp_path, tokenizer=str(prepared / "tokenizer.json"))
    assert dm.vocab_size == read_manifest(prepared)["vocab_size"]
    assert isinstance(dm.train_batches(seed=0, batch_size=2, rank=0, world_size=1), TokenBatches)


def test_a_hugging_face_dataset_streamed_from_local_files_gives_the_same_shards(
    prepared: Path, corpus: Path, tmp_path: Path
) -> None:
    files = str(corpus / "docs.jsonl")
    hf = settings(corpus, tmp_path, inputs=[], hf_name="json", hf_data_files=files, streaming=True)
    prepare(hf, say=lambda line: None)
    assert shard_bytes(tmp_path) == shard_bytes(prepared)


def test_the_progress_line_gives_tokens_per_second_and_the_time_left() -> None:
    progress = Progress(total_bytes=400_000_000, enabled=False)
    progress.advance(25_000_000, 100_000_000)
    line = progress.line(progress.start + 50.0)
    assert line == "prepare: 25.0M tokens, 0.50M tokens/s, 2.0 MB/s of text, 25%, 0:02:30 left"


def test_blank_lines_and_empty_rows_are_no_documents(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"text": "one"}\n\n{"text": ""}\n{"text": "two"}\n')
    (tmp_path / "b.txt").write_text("three\n")
    source = PrepareSettings(out="", inputs=[str(tmp_path)])
    assert [text for text, _ in read_documents(source)] == ["one", "two", "three\n"]
