"""Small generated corpora for the token-shard tests: documents of random words as JSONL and parquet,
and a byte-level BPE trained on them (no download)."""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = (  # noqa: SIM905 (a sentence of words reads better than a list of 50 strings)
    "the of and to in a is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no will can more café naïve"
).split()


def documents(count: int, seed: int = 0) -> list[str]:
    """``count`` documents of 10 to 300 random words (a few non-ASCII ones: bytes per token is not 1)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 300))) + "." for _ in range(count)]


def write_jsonl(path: Path, docs: list[str]) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for i, doc in enumerate(docs):
            f.write(json.dumps({"id": i, "text": doc}) + "\n")
    return path


def write_parquet(path: Path, docs: list[str]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": list(range(len(docs))), "text": docs}), path, row_group_size=500)
    return path


def write_tokenizer(path: Path, docs: list[str], vocab_size: int = 320) -> Path:
    from attnlab.data.tokenizers import train_bpe

    train_bpe(docs[:200], vocab_size, roles=("eos",)).hf.save(str(path))
    return path
