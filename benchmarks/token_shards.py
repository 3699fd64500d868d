"""Token shards at scale (``data=tokens``, ``attnlab-prepare``): what opening and reading them costs, and
how fast a corpus is prepared.

    nice python -m benchmarks.token_shards --dir /work/tmp/token-bench --out benchmarks/standalone/token_shards.md

* the loader over a 50M-token and a 1B-token corpus (random uint16 tokens written straight into
  attnlab shards of 100M tokens, 0.1 GB and 2 GB on disk, deleted afterwards), each in a fresh process
  on one core: peak resident memory (VmHWM) of the whole process, the seconds from building the data
  module to its first batch ready (open), and the training loader's tokens/s (seq_len 1024, batch 32);
* attnlab-prepare's MB/s of text (JSONL in, shards out, ``--workers`` = the cores) beside the same
  tokenizer's own ``encode_batch`` over the same documents in memory on the same cores.

Prints a markdown section; ``--out`` writes it to a file too: ``benchmarks/standalone/*.md`` are
copied into results.md as they are (``benchmarks.report.standalone_runs``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

SHAKESPEARE = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare.txt"
)  # or $TINYSHAKESPEARE
SHARD_TOKENS = 100_000_000
SEQ_LEN, BATCH, BATCHES = 1024, 32, 300


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


# -- corpora ----------------------------------------------------------------------------------------


def write_corpus(folder: Path, tokens: int, tokenizer: Path) -> None:
    """``tokens`` random training tokens (and 1M validation) as attnlab shards with a manifest."""
    from attnlab.data.shards import MANIFEST_FORMAT, sha256_of, write_manifest, write_shard

    folder.mkdir(parents=True)
    shutil.copyfile(tokenizer, folder / "tokenizer.json")
    rng = np.random.default_rng(0)
    shards, left, number = [], tokens, 0
    while left:
        count = min(left, SHARD_TOKENS)
        entry = write_shard(
            folder / f"train_{number:06d}.bin", rng.integers(1, 512, count, dtype=np.uint16), 1
        )
        shards.append({**entry, "split": "train"})
        left, number = left - count, number + 1
    val = write_shard(folder / "val_000000.bin", rng.integers(1, 512, 1_000_000, dtype=np.uint16), 1)
    shards.append({**val, "split": "val"})
    manifest = {
        "format": MANIFEST_FORMAT,
        "complete": True,
        "tokenizer": {"file": "tokenizer.json", "sha256": sha256_of(folder / "tokenizer.json")},
        "vocab_size": 512,
        "eot_id": 0,
        "dtype": "uint16",
        "shards": shards,
        "tokens": {"train": tokens, "val": 1_000_000},
        "bytes_per_token": 3.0,
    }
    write_manifest(folder, manifest)


def measure_loader(folder: Path) -> dict:
    """In this process (fresh, one thread): RSS after imports, open time, loader tokens/s, peak RSS."""
    import torch

    from attnlab.data import build_datamodule
    from attnlab.data.sampling import ResumableLoader
    from attnlab.schema.data import data_config
    from attnlab.schema.model import model_config
    from attnlab.schema.task import task_config

    torch.set_num_threads(1)
    imported = status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here on
    start = time.perf_counter()
    cfg = data_config("tokens", path=str(folder), seq_len=SEQ_LEN, batch_size=BATCH)
    dm = build_datamodule(
        cfg, needs=task_config("causal_lm").data_needs, seed=0, model_cfg=model_config("gpt")
    )
    dm.setup("fit")
    loader = iter(ResumableLoader(dm.train_batches(seed=0, batch_size=BATCH, rank=0, world_size=1)))
    next(loader)
    opened = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(BATCHES):
        next(loader)
    seconds = time.perf_counter() - start
    return {
        "open_s": opened,
        "tokens_per_s": BATCHES * BATCH * SEQ_LEN / seconds,
        "rss_after_imports_mib": imported / 1024,
        "peak_rss_mib": max(status_kib("VmHWM"), imported) / 1024,
        "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def loader_in_fresh_process(folder: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "benchmarks.token_shards", "--measure", str(folder)]
    out = subprocess.run(
        command, capture_output=True, text=True, check=True, env=env, cwd=Path(__file__).parents[1]
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- prepare against encode_batch -------------------------------------------------------------------


def shakespeare_documents(copies: int) -> list[str]:
    """Tiny Shakespeare's speeches (paragraphs) as documents, ``copies`` times over."""
    text = Path(os.environ.get("TINYSHAKESPEARE", SHAKESPEARE)).read_text(encoding="utf-8")
    return [p for p in text.split("\n\n") if p.strip()] * copies


def prepare_against_encode_batch(work: Path, cores: int, copies: int) -> dict:
    from tokenizers import Tokenizer

    from attnlab.data.prepare import PrepareSettings, prepare
    from attnlab.data.tokenizers import train_bpe

    docs = shakespeare_documents(copies)
    megabytes = sum(len(d.encode()) for d in docs) / 1e6
    tokenizer = work / "tokenizer.json"
    train_bpe(docs[: len(docs) // copies], 8192, roles=("eos",)).hf.save(str(tokenizer))
    with open(work / "docs.jsonl", "w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps({"text": doc}) + "\n")
    hf = Tokenizer.from_file(str(tokenizer))
    start = time.perf_counter()
    hf.encode_batch(docs, add_special_tokens=False)
    library = time.perf_counter() - start
    settings = PrepareSettings(
        out=str(work / "prepared"), inputs=[str(work / "docs.jsonl")], tokenizer=str(tokenizer),
        workers=cores, progress=False,
    )  # fmt: skip
    start = time.perf_counter()
    prepare(settings, say=lambda line: None)
    ours = time.perf_counter() - start
    return {"megabytes": megabytes, "documents": len(docs), "prepare_mb_s": megabytes / ours,
            "encode_batch_mb_s": megabytes / library}  # fmt: skip


# -- the report -------------------------------------------------------------------------------------


def report(loaders: dict[int, dict], prep: dict, cores: int, command: str) -> str:
    small, large = (loaders[k] for k in sorted(loaders))
    lines = [
        "## Token shards: opening, reading and preparing them (`benchmarks/token_shards.py`)",
        "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: `{command}`; {platform.processor() or platform.machine()}, "
        f"{cores} cores, python {platform.python_version()}. Loader: seq_len {SEQ_LEN}, batch {BATCH}, "
        f"{BATCHES} batches after the first, one thread, a fresh process per corpus.",
        "",
        "| measure | 50M tokens (0.1 GB) | 1B tokens (2 GB) | ratio | target |",
        "| --- | --- | --- | --- | --- |",
        f"| peak RSS of the process (MiB) | {small['peak_rss_mib']:.0f} | {large['peak_rss_mib']:.0f} | "
        f"{large['peak_rss_mib'] / small['peak_rss_mib']:.3f}× | within 5% |",
        f"| RSS after imports (MiB) | {small['rss_after_imports_mib']:.0f} | {large['rss_after_imports_mib']:.0f} | | |",
        f"| open: data module built to first batch (s) | {small['open_s']:.3f} | {large['open_s']:.3f} | | < 1 s |",
        f"| loader tokens/s, one core | {small['tokens_per_s']:,.0f} | {large['tokens_per_s']:,.0f} | | ≥ 1,000,000 |",
        "",
        f"attnlab-prepare of {prep['megabytes']:.1f} MB of text ({prep['documents']:,} documents: Tiny Shakespeare's "
        f"speeches, repeated; JSONL in, a byte-level BPE of 8,192 tokens) with --workers {cores}: "
        f"**{prep['prepare_mb_s']:.2f} MB/s**, beside `tokenizers`' own `encode_batch` of the same documents "
        f"in memory on the same {cores} cores: {prep['encode_batch_mb_s']:.2f} MB/s "
        f"(**{prep['prepare_mb_s'] / prep['encode_batch_mb_s']:.2f}×**; target ≥ 0.8×).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, default=Path("/tmp/token-shards-bench"), help="scratch space (2.2 GB)")
    p.add_argument("--sizes", default="50000000,1000000000", help="training tokens of the two corpora")
    p.add_argument("--copies", type=int, default=10, help="copies of Tiny Shakespeare prepared")
    p.add_argument("--out", type=Path, help="also write the section here")
    p.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the fresh process of one corpus
    args = p.parse_args()
    if args.measure:
        print(json.dumps(measure_loader(args.measure)))
        return
    cores = len(os.sched_getaffinity(0))
    args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(args.dir)
    loaders = {}
    try:
        from attnlab.data.tokenizers import train_bpe

        tokenizer = work / "tokenizer.json"
        train_bpe(shakespeare_documents(1)[:2000], 512, roles=("eos",)).hf.save(str(tokenizer))
        for size in (int(float(s)) for s in args.sizes.split(",")):
            folder = work / f"corpus-{size}"
            write_corpus(folder, size, tokenizer)
            loaders[size] = loader_in_fresh_process(folder)
            shutil.rmtree(folder)
            print(size, loaders[size], file=sys.stderr)
        prep = prepare_against_encode_batch(work, cores, args.copies)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = report(loaders, prep, cores, "nice python -m benchmarks.token_shards " + " ".join(sys.argv[1:]))
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
