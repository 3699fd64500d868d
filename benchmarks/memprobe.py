"""Peak memory of one workload, run alone: ``python -m benchmarks.memprobe '{"probe": ..., "kwargs": ...}'``.

Imports the probe's module (and so its libraries) first, then resets the peak RSS (VmHWM), builds
the workload, calls it three times and prints ``{"peak_mib": ...}``: the peak resident memory
above the RSS after the imports. Called by ``benchmarks.common.peak_memory_mib``.

With ``"warm": true`` the workload is built and called once first (a compiled kernel compiles
there), freed memory is handed back to the system (``malloc_trim``), and the peak is measured above
the RSS of the built, warmed workload: the memory the calls themselves add.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import sys

import torch

from benchmarks.common import mib, peak_rss_kib, reset_peak_rss, rss_kib

PROBES = {
    "train": "benchmarks.train_step:memory_step",
    "attention": "benchmarks.attention:memory_step",
    "flex": "benchmarks.flex:memory_step",
}


def hand_back_freed_memory() -> None:
    """Collect garbage and return the allocator's free pages to the system (glibc's malloc_trim)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: the figure keeps retained pages
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def main() -> None:
    request = json.loads(sys.argv[1])
    torch.set_num_threads(request["threads"])
    module, name = PROBES[request["probe"]].split(":")
    build = getattr(importlib.import_module(module), name)
    if request.get("warm"):
        step = build(**request["kwargs"])
        step()
        hand_back_freed_memory()
        before = rss_kib()
        reset_peak_rss()
    else:
        before = rss_kib()
        reset_peak_rss()
        step = build(**request["kwargs"])
    for _ in range(3):
        step()
    print(json.dumps({"peak_mib": mib((peak_rss_kib() - before) * 1024)}))


if __name__ == "__main__":
    main()
