"""attnlab's benchmark suite: speed and memory side by side with the reference implementations.

``python -m benchmarks.run`` (``make bench``) runs every section and writes ``benchmarks/results.md``
and the plots in ``benchmarks/plots/``. Each section is a module with a ``run(ctx) -> list[Row]``.
"""
