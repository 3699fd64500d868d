"""benchmarks.gpu (the GPU benchmark) on a CPU: its one line without CUDA, its table at tiny
shapes (parts (b) eager and (c)), and the pieces of part (a) that stand in for nanoGPT's own data
preparation and read its log. No figure is asserted: a tiny CPU run's speeds mean nothing."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from benchmarks.nanogpt.checkout import best_val, write_data

from benchmarks import gpu


def rows_of(markdown: str) -> list[dict[str, str]]:
    """The table's rows as {column: cell}."""
    lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split(" | ")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split(" | ")))) for line in lines[1:]]


def compiled_without_code_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    """``torch.compile`` as the benchmark calls it (whole models, ``compile_layers``, ``generate``'s
    decoding step), but through dynamo and AOTAutograd only (``backend="aot_eager"``, its ``mode`` left
    out): the graphs are captured, functionalised and differentiated as on the GPU, where inductor then
    writes Triton kernels; on a CPU it would write C++ instead, one g++ run per kernel on a cold cache
    (43 of this test's 60 CPU-s), which says nothing of the GPU's kernels. Inductor's CPU code for
    attnlab's compiled layers, loss and decoding is checked where it is the point (test_speedups,
    test_compiled_loss, test_compiled_generate)."""
    compile_with_inductor = torch.compile

    def compile_without_inductor(model: object = None, *, mode: str | None = None, **options: object):
        options["backend"] = "aot_eager"
        return compile_with_inductor(model, **options)

    monkeypatch.setattr(torch, "compile", compile_without_inductor)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_without_cuda_it_says_so_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu.main(["--parts", "train"]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "no CUDA device" in out and "--device cpu --tiny" in out


def test_nanogpt_data_is_its_prepare_py_layout(tmp_path: Path) -> None:
    """Sorted characters as ids, the first 90% of the text in train.bin, the rest in val.bin (uint16)."""
    text = tmp_path / "input.txt"
    text.write_text("hello world\n" * 5)  # 60 characters: 54 train, 6 val
    assert write_data(text, tmp_path / "data") == 9
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
    assert best_val(log) == (1.7244, 500)
    with pytest.raises(ValueError, match="no 'step N"):
        best_val("Traceback (most recent call last):\n")


@pytest.mark.slow
@pytest.mark.process_contract("interpreter")
def test_tiny_cpu_run_of_every_part_and_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole table at tiny shapes: the recipe through attnlab-train (nanoGPT's train.py left out:
    no NANOGPT_DIR), a new interpreter as on the GPU (its wall time, start to exit, is the measure), the
    four training modes (float8 emulated) against nanoGPT's model, and eager and compiled decoding
    against HF, every ratio finite; compiled without inductor's CPU code
    (``compiled_without_code_generation``)."""
    compiled_without_code_generation(monkeypatch)
    text = tmp_path / "input.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 40, encoding="utf-8")
    out = tmp_path / "gpu.md"
    args = [
        "--device",
        "cpu",
        "--tiny",
        "--text",
        str(text),
        "--train-references",
        "nanoGPT",
        "--out",
        str(out),
    ]
    assert gpu.main(args) == 0
    markdown = out.read_text(encoding="utf-8")
    rows = rows_of(markdown)
    measures = [(r["part"], r["measure"]) for r in rows]
    assert measures[:2] == [("a", "recipe wall time, start to exit"), ("a", "best val loss")]
    for mode in ("eager", "compiled", "layers", "layers+float8"):
        assert [m for p, m in measures if p == "b" and m.startswith(f"{mode} ")] == [
            f"{mode} step tokens/s",
            f"{mode} MFU",
            f"{mode} peak memory",
        ]
    assert [m for p, m in measures if p == "c"] == [
        f"decoding tokens/s, batch {b}, {how}" for b in (1, 8) for how in ("eager", "compiled")
    ]
    for row in rows:
        if row["part"] in "bc" and "tokens/s" in row["measure"]:
            assert float(row["attnlab"].replace(",", "")) > 0
            reference = "nanoGPT" if row["part"] == "b" else "HF"
            ratio = float(row[f"attnlab ÷ {reference}"].rstrip("×"))
            assert math.isfinite(ratio) and ratio > 0, row
        if row["measure"].endswith("peak memory"):
            assert row["attnlab"] == "—" and row["detail"] == "CUDA only"  # memory: measured on CUDA
    assert "× eager" in rows[-1]["detail"]  # the compiled decoding's gain over eager
    assert markdown.count("greedy tokens agree for 8 of 8") == 2  # the same tokens as HF at both batches
    assert "failed" not in markdown


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_the_scaling_script_without_cuda_says_so_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import gpu_scaling

    assert gpu_scaling.main([]) == 2
    out = capsys.readouterr().out
    assert out == "no CUDA device: run it on a GPU, or check it here with --smoke\n"


def test_the_scaling_ratios_divide_the_median_speeds() -> None:
    """float8 against bf16 compiled layer by layer, and each mode against nanoGPT's in the same mode."""
    from benchmarks.gpu_scaling import ratios, strict

    def speeds(ours: float, nano: float) -> dict:
        return {"attnlab": {"tok_s_median": ours}, "nanoGPT": {"tok_s_median": nano}}

    modes = {
        "compiled": speeds(100.0, 80.0),
        "layers": speeds(120.0, 80.0),
        "layers+float8": speeds(150.0, 80.0),
    }
    got = ratios(modes)
    assert got["attnlab layers+float8 / layers"] == pytest.approx(1.25)
    assert got["attnlab layers / compiled"] == pytest.approx(1.2)
    assert got["attnlab compiled / nanoGPT"] == pytest.approx(1.25)
    assert strict({"peak": float("nan"), "runs": [1.0, float("nan")]}) == {"peak": None, "runs": [1.0, None]}
