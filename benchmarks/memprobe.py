"""Peak memory of one workload, run alone: ``python -m benchmarks.memprobe '{"probe": ..., "kwargs": ...}'``.

Imports the probe's module (and so its libraries) first, then resets the peak RSS (VmHWM), builds
the workload, calls it three times and prints ``{"peak_mib": ...}``: the peak resident memory
above the RSS after the imports. Called by ``benchmarks.common.peak_memory_mib``.
"""

from __future__ import annotations

import importlib
import json
import sys

import torch

from benchmarks.common import mib, peak_rss_kib, reset_peak_rss, rss_kib

PROBES = {"train": "benchmarks.train_step:memory_step", "attention": "benchmarks.attention:memory_step"}


def main() -> None:
    request = json.loads(sys.argv[1])
    torch.set_num_threads(request["threads"])
    module, name = PROBES[request["probe"]].split(":")
    build = getattr(importlib.import_module(module), name)
    before = rss_kib()
    reset_peak_rss()
    step = build(**request["kwargs"])
    for _ in range(3):
        step()
    print(json.dumps({"peak_mib": mib((peak_rss_kib() - before) * 1024)}))


if __name__ == "__main__":
    main()
