"""What every section shares: settings, the machine, interleaved timing, ratios, peak memory.

Absolute times drift on a shared machine, so a comparison is always measured in one process,
the implementations taking turns (the order reversed every round), and reported as a ratio per
round with min/median/max over the rounds.
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent


@dataclass
class Settings:
    """How big and how long: ``size`` is ``full`` (the default suite), ``quick`` or ``tiny`` (smoke test)."""

    size: str = "full"
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    out_dir: Path = BENCH_DIR
    memory: bool = True  # measure peak memory (one child process per figure)
    notes: list[str] = field(default_factory=list)  # skipped parts and why, printed under the table

    @property
    def tiny(self) -> bool:
        return self.size == "tiny"

    def pick(self, full: object, quick: object, tiny: object) -> object:
        """The value for the current size."""
        return {"full": full, "quick": quick, "tiny": tiny}[self.size]


@dataclass
class Row:
    """One line of the results table: a measured figure, its spread over rounds, and its target."""

    section: str
    measure: str
    config: str
    median: float
    low: float
    high: float
    unit: str
    detail: str = ""
    target: float | None = None  # met when the median reaches it
    target_text: str = ""
    higher_is_better: bool = True
    extra: dict = field(default_factory=dict)  # raw figures for the plots

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        return self.median >= self.target if self.higher_is_better else self.median <= self.target


# -- the machine --------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    found = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return found.group(1).strip() if found else platform.machine()


def memory_gib() -> float:
    try:
        found = re.search(r"MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text())
    except OSError:
        return 0.0
    return int(found.group(1)) / 2**20 if found else 0.0


def versions() -> str:
    import transformers

    return f"torch {torch.__version__}, transformers {transformers.__version__}, python {platform.python_version()}"


def machine() -> str:
    """One line: CPU model, logical cores, threads used, memory; the GPU when there is one."""
    text = f"{cpu_model()}, {os.cpu_count()} logical cores, {torch.get_num_threads()} threads, {memory_gib():.0f} GiB"
    if torch.cuda.is_available():
        text += f"; GPU {torch.cuda.get_device_name(0)}"
    return text


def machine_short() -> str:
    """The short form for the table's machine column."""
    name = re.sub(r"\(R\)|\(TM\)|CPU|Processor|@.*", "", cpu_model())
    return f"{' '.join(name.split())} {os.cpu_count()}c/{torch.get_num_threads()}t"


# -- timing -------------------------------------------------------------------------------------


def interleaved(fns: dict[str, Callable[[], object]], *, repeats: int, warmup: int) -> dict[str, list[float]]:
    """Seconds per call of each function, measured round-robin; the order is reversed every round."""
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - start)
    return times


def spread(values: list[float]) -> tuple[float, float, float]:
    """(min, median, max)."""
    return min(values), statistics.median(values), max(values)


def speedup(times: dict[str, list[float]], ours: str, reference: str) -> tuple[float, float, float]:
    """min/median/max over rounds of ``reference time / our time`` (above 1: we are faster)."""
    return spread([r / o for o, r in zip(times[ours], times[reference])])


def best(fn: Callable[[], object], repeats: int) -> float:
    """The fastest of ``repeats`` timed calls, in seconds (after one untimed call)."""
    fn()
    fastest = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        fastest = min(fastest, time.perf_counter() - start)
    return fastest


def ratio_row(
    section: str,
    measure: str,
    config: str,
    ratios: tuple[float, float, float],
    detail: str,
    target: float | None = None,
) -> Row:
    low, median, high = ratios
    text = f"≥ {target:g}×" if target is not None else ""
    return Row(section, measure, config, median, low, high, "×", detail, target, text)


# -- peak memory --------------------------------------------------------------------------------


def _status_kib(key: str) -> int:
    found = re.search(rf"^{key}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    return int(found.group(1)) if found else 0


def reset_peak_rss() -> None:
    """Set the process's peak RSS (VmHWM) back to its current RSS (Linux ``clear_refs`` 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def rss_kib() -> int:
    return _status_kib("VmRSS")


def peak_rss_kib() -> int:
    return _status_kib("VmHWM")


def peak_memory_mib(settings: Settings, probe: str, *, warm: bool = False, **kwargs: object) -> float:
    """Peak resident memory (MiB) that ``probe`` adds above the imports, measured in a fresh process;
    with ``warm``, above the built workload after one untimed call (``benchmarks.memprobe``).

    CPU tensors come from the system allocator, which keeps freed pages, so a figure measured
    after another implementation ran in the same process would be too low; hence one process per
    measurement. Returns NaN where /proc is unavailable, memory is not measured, or the probe fails.
    """
    if not settings.memory or not Path("/proc/self/clear_refs").exists():
        return float("nan")
    args = json.dumps({"probe": probe, "threads": settings.threads, "kwargs": kwargs, "warm": warm})
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.memprobe", args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        print(f"memory probe {probe} {kwargs} failed:\n{done.stderr[-2000:]}", file=sys.stderr)
        return float("nan")
    return json.loads(done.stdout.strip().splitlines()[-1])["peak_mib"]


def mib(n_bytes: float) -> float:
    return n_bytes / 2**20
