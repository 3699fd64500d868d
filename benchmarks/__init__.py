"""attnlab's benchmark suite: speed and memory side by side with the reference implementations.

``python -m benchmarks.run`` (``make bench``) runs the sections (each a module with a
``run(settings) -> list[Row]``), saves each one's rows under ``benchmarks/saved/`` and writes
``benchmarks/results.md`` and the plots in ``benchmarks/plots/`` from every saved section.
``benchmarks.common`` is the timing library of the sections and of every other command here.
"""
