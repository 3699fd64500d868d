"""Token shards on disk, the one place that knows their bytes: attnlab's own, nanoGPT's, llm.c's.

* attnlab's shard (``attnlab-prepare``): a header of 256 int32 laid out as llm.c's (magic, version, token
  count), then the bytes per token and the number of documents, then the tokens: uint16 where the
  vocabulary fits (at most 65,536 ids), else uint32. Each document starts with the end-of-text token.
  ``manifest.json`` beside the shards names the tokenizer (file and sha256), the counts, the bytes of
  text per token and every shard with its size and sha256.
* nanoGPT's ``train.bin`` / ``val.bin`` (``data/openwebtext/prepare.py``): raw uint16, no header, each
  document followed by the end-of-text token.
* llm.c's and modded-nanogpt's ``*_train_*.bin`` / ``*_val_*.bin``: magic 20240520, version 1, uint16;
  each document starts with the end-of-text token.

Opening a shard reads its header and maps it with ``np.memmap`` (nothing is copied); ``data=tokens``
keeps only where each shard's tokens lie and reads its windows with ``pread`` (``tokens.TokenStream``).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
ATTNLAB_MAGIC = int.from_bytes(b"attn", "little")  # a shard's first four bytes read "attn"
ATTNLAB_VERSION = 1
LLMC_MAGIC, LLMC_VERSION = 20240520, 1
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "attnlab-tokens"
TOKENIZER = "tokenizer.json"
SPLITS = ("train", "val")


class ShardError(ValueError):
    """A shard or manifest that cannot be read as it claims to be: one line naming the file."""


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 where every id fits (nanoGPT's and llm.c's choice: half the disk), else uint32."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def write_atomically(path: Path, parts: list) -> None:
    """``parts`` (bytes or arrays: any buffer) into ``path`` one after another, whole or not at all: a
    temporary file, flushed to disk, renamed over it."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        for part in parts:
            f.write(memoryview(part).cast("B"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def shard_header(tokens: int, dtype: np.dtype, documents: int) -> np.ndarray:
    header = np.zeros(HEADER_INTS, dtype=np.int32)
    header[:5] = (ATTNLAB_MAGIC, ATTNLAB_VERSION, tokens, dtype.itemsize, documents)
    return header


def write_shard(path: Path, tokens: np.ndarray | list[np.ndarray], documents: int) -> dict:
    """One attnlab shard of ``tokens`` (an array, or arrays one after another: nothing is joined in
    memory) written whole or not at all; its manifest entry (name, counts, size, sha256)."""
    parts = [tokens] if isinstance(tokens, np.ndarray) else tokens
    count = sum(len(part) for part in parts)
    if count >= 1 << 31:
        raise ShardError(f"{path.name}: {count} tokens do not fit a shard's int32 count")
    header = shard_header(count, parts[0].dtype, documents)
    write_atomically(path, [header, *parts])
    digest = hashlib.sha256()
    for part in [header, *parts]:
        digest.update(memoryview(part).cast("B"))
    return {
        "file": path.name,
        "tokens": count,
        "documents": documents,
        "size": HEADER_BYTES + count * parts[0].dtype.itemsize,
        "sha256": digest.hexdigest(),
    }


def read_header(path: Path) -> np.ndarray:
    with open(path, "rb") as f:
        raw = f.read(HEADER_BYTES)
    if len(raw) < HEADER_BYTES:
        raise ShardError(f"{path}: {len(raw)} bytes, shorter than a shard's {HEADER_BYTES}-byte header")
    return np.frombuffer(raw, dtype=np.int32)


def open_attnlab_shard(path: Path) -> np.memmap:
    """An attnlab shard's tokens, memory-mapped; a wrong magic, version or length is one line."""
    header = read_header(path)
    magic, version, count, width = (int(v) for v in header[:4])
    if magic != ATTNLAB_MAGIC:
        raise ShardError(f"{path}: magic {magic} is not an attnlab shard's ({ATTNLAB_MAGIC})")
    if version != ATTNLAB_VERSION or width not in (2, 4):
        raise ShardError(f"{path}: version {version} with {width} bytes per token is not attnlab's shard v1")
    dtype = np.dtype(np.uint16 if width == 2 else np.uint32)
    return mapped(path, dtype, HEADER_BYTES, count)


def open_llmc_shard(path: Path) -> np.memmap:
    """An llm.c / modded-nanogpt shard (magic 20240520, version 1, uint16), memory-mapped."""
    header = read_header(path)
    magic, version, count = (int(v) for v in header[:3])
    if magic != LLMC_MAGIC:
        raise ShardError(f"{path}: magic {magic} is not llm.c's shard magic {LLMC_MAGIC}")
    if version != LLMC_VERSION:
        raise ShardError(
            f"{path}: llm.c shard version {version}; attnlab reads version {LLMC_VERSION} (uint16)"
        )
    return mapped(path, np.dtype(np.uint16), HEADER_BYTES, count)


def open_raw_tokens(path: Path) -> np.memmap:
    """nanoGPT's ``train.bin`` / ``val.bin``: uint16 tokens, no header (the count is the file's size / 2)."""
    size = path.stat().st_size
    if size % 2:
        raise ShardError(f"{path}: {size} bytes, not a whole number of uint16 tokens (nanoGPT's .bin)")
    return mapped(path, np.dtype(np.uint16), 0, size // 2)


def mapped(path: Path, dtype: np.dtype, offset: int, count: int) -> np.memmap:
    """``count`` tokens of ``dtype`` after ``offset`` bytes, memory-mapped; a file of another length is one line."""
    expected = offset + count * dtype.itemsize
    size = path.stat().st_size
    if size != expected:
        raise ShardError(f"{path}: {size} bytes, but its header says {count} tokens ({expected} bytes)")
    if count == 0:
        return np.zeros(0, dtype=dtype)  # np.memmap refuses an empty map
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(count,))


# -- manifests --------------------------------------------------------------------------------------


def read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ShardError(f"{path}: not valid JSON ({err.msg})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise ShardError(f"{path}: not an attnlab-prepare manifest (format {MANIFEST_FORMAT!r})")
    return manifest


def write_manifest(folder: Path, manifest: dict) -> None:
    write_atomically(folder / MANIFEST, [(json.dumps(manifest, indent=1) + "\n").encode()])


def check_shard_bytes(folder: Path, entry: dict, full: bool) -> None:
    """A shard must have the size (and with ``full``, the sha256) its manifest entry says."""
    path = folder / entry["file"]
    if not path.is_file():
        raise ShardError(f"{path}: missing; the manifest lists it (prepare the folder again)")
    if path.stat().st_size != entry["size"] or (full and sha256_of(path) != entry["sha256"]):
        raise ShardError(
            f"{path}: its bytes do not match {MANIFEST} (size or sha256 differs): the shard is damaged; "
            "delete it and run attnlab-prepare again to rewrite it"
        )


# -- a folder of shards -----------------------------------------------------------------------------


@dataclass
class TokenFolder:
    """The shards of each split in a folder, how to open them, and what the folder says of its tokens."""

    format: str  # attnlab | nanogpt | llmc
    files: dict[str, list[Path]]  # split -> shard files, in order
    tokenizer: Path | None  # the tokenizer.json the tokens come from, where the folder names one
    bytes_per_token: float | None  # of the text the tokens encode (from the manifest)
    eot_id: int | None  # the end-of-text token between documents (from the manifest, else the tokenizer's)
    eot_starts_documents: bool  # end-of-text begins each document (attnlab, llm.c) or ends it (nanoGPT)

    def open(self, split: str) -> list[np.memmap]:
        opener = {"attnlab": open_attnlab_shard, "nanogpt": open_raw_tokens, "llmc": open_llmc_shard}
        return [opener[self.format](path) for path in self.files[split]]


def find_format(folder: Path) -> str:
    """attnlab (a manifest), nanogpt (train.bin) or llmc (``*train*.bin`` files); else one line."""
    if (folder / MANIFEST).is_file():
        return "attnlab"
    if (folder / "train.bin").is_file():
        return "nanogpt"
    if list(folder.glob("*train*.bin")):
        return "llmc"
    raise ShardError(
        f"{folder}: no {MANIFEST} (attnlab-prepare), train.bin (nanoGPT) or *_train_*.bin shards (llm.c)"
    )


def token_folder(folder: Path, fmt: str = "auto", verify: bool = False) -> TokenFolder:
    """The shards of ``folder`` in format ``fmt`` (``auto``: found), their sizes checked (with ``verify``, their
    sha256 too, which reads every byte)."""
    fmt = find_format(folder) if fmt == "auto" else fmt
    if fmt == "attnlab":
        return manifest_folder(folder, verify)
    if fmt == "nanogpt":
        files = {split: [folder / f"{split}.bin"] for split in SPLITS}
        return TokenFolder("nanogpt", files, None, None, None, eot_starts_documents=False)
    files = {split: sorted(folder.glob(f"*{split}*.bin")) for split in SPLITS}
    return TokenFolder("llmc", files, None, None, None, eot_starts_documents=True)


def manifest_folder(folder: Path, verify: bool) -> TokenFolder:
    manifest = read_manifest(folder)
    if not manifest.get("complete"):
        raise ShardError(f"{folder / MANIFEST}: the prepare that writes it has not finished; run it again")
    files: dict[str, list[Path]] = {split: [] for split in SPLITS}
    for entry in manifest["shards"]:
        check_shard_bytes(folder, entry, verify)
        files[entry["split"]].append(folder / entry["file"])
    tokenizer = folder / manifest["tokenizer"]["file"]
    bytes_per_token, eot_id = manifest.get("bytes_per_token"), manifest.get("eot_id")
    return TokenFolder("attnlab", files, tokenizer, bytes_per_token, eot_id, eot_starts_documents=True)


def check_prepared(cfg) -> None:
    """``data.path`` of ``data.kind=tokens`` must be a folder of shards; a missing one is one line that
    gives the command preparing it, where the preset names one (``data.prepare_command``)."""
    folder = Path(cfg.path).expanduser()
    if folder.is_dir():
        if cfg.format == "auto":
            find_format(folder)
        return
    hint = cfg.prepare_command or "attnlab-prepare <your files> --tokenizer <tokenizer.json> --out <folder>"
    raise FileNotFoundError(
        f"data.path={cfg.path!r}: no such folder of token shards; prepare it with: {hint}"
    )
