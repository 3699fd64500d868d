"""benchmarks.gpu (issue 19's GPU benchmark) on a CPU: its one line without CUDA, its table at tiny
shapes (parts (b) eager and (c)), and the pieces of part (a) that stand in for nanoGPT's own data
preparation and read its log. No figure is asserted: a tiny CPU run's speeds mean nothing."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from benchmarks.gpu_recipe import best_nanogpt_val, write_nanogpt_data

from benchmarks import gpu


def rows_of(markdown: str) -> list[dict[str, str]]:
    """The table's rows as {column: cell}."""
    lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split(" | ")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split(" | ")))) for line in lines[1:]]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_without_cuda_it_says_so_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu.main(["--parts", "train"]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "no CUDA device" in out and "--device cpu --tiny" in out


def test_tiny_cpu_run_prints_one_table_with_finite_ratios(tmp_path: Path) -> None:
    out = tmp_path / "gpu.md"
    args = ["--device", "cpu", "--tiny", "--parts", "train,decode", "--modes", "eager", "--out", str(out)]
    assert gpu.main(args) == 0
    rows = rows_of(out.read_text(encoding="utf-8"))
    assert [(r["part"], r["measure"]) for r in rows] == [
        ("b", "eager step tokens/s"),
        ("b", "eager MFU"),
        ("b", "eager peak memory"),
        ("c", "decoding tokens/s, batch 1, eager"),
        ("c", "decoding tokens/s, batch 1, compiled"),
        ("c", "decoding tokens/s, batch 8, eager"),
        ("c", "decoding tokens/s, batch 8, compiled"),
    ]
    speeds = [r for r in rows if r["measure"].endswith("tokens/s") or "tokens/s," in r["measure"]]
    for row in speeds:
        assert float(row["attnlab"].replace(",", "")) > 0
        references = ["nanoGPT", "HF"] if row["part"] == "b" else ["HF"]
        for name in references:
            ratio = float(row[f"attnlab ÷ {name}"].rstrip("×"))
            assert math.isfinite(ratio) and ratio > 0, row
    assert rows[2]["attnlab"] == "—" and rows[2]["detail"] == "CUDA only"  # memory: measured on CUDA
    assert "eager" in rows[4]["detail"]  # the compiled decoding's gain over eager
    assert "greedy tokens agree for 8 of 8" in out.read_text(encoding="utf-8")  # the same tokens as HF


def test_nanogpt_data_is_its_prepare_py_layout(tmp_path: Path) -> None:
    """Sorted characters as ids, the first 90% of the text in train.bin, the rest in val.bin (uint16)."""
    text = tmp_path / "input.txt"
    text.write_text("hello world\n" * 5)  # 60 characters: 54 train, 6 val
    assert write_nanogpt_data(text, tmp_path / "data") == 9
    meta = pickle.loads((tmp_path / "data" / "meta.pkl").read_bytes())
    assert meta["itos"] == dict(enumerate("\n dehlorw")) and meta["vocab_size"] == 9
    train = np.fromfile(tmp_path / "data" / "train.bin", dtype=np.uint16)
    val = np.fromfile(tmp_path / "data" / "val.bin", dtype=np.uint16)
    decoded = "".join(meta["itos"][int(i)] for i in np.concatenate([train, val]))
    assert (len(train), len(val), decoded) == (54, 6, text.read_text())


def test_best_nanogpt_val_is_the_lowest_evaluation_line() -> None:
    log = (
        "number of parameters: 10.65M\n"
        "step 0: train loss 4.2874, val loss 4.2823\n"
        "iter 0: loss 4.2654, time 12.1ms, mfu -100.00%\n"
        "step 250: train loss 1.9701, val loss 2.0710\n"
        "step 500: train loss 1.5330, val loss 1.7244\n"
        "step 750: train loss 1.3600, val loss 1.7301\n"
    )
    assert best_nanogpt_val(log) == (1.7244, 500)
    with pytest.raises(ValueError, match="no 'step N"):
        best_nanogpt_val("Traceback (most recent call last):\n")
