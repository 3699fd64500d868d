"""The commands (``attnlab-train``, ``-eval``, ``-sample``, ``-explain``, ``-compress``, ``-export``,
``-report``, ``-consolidate``, ``-prepare``), one module each: Hydra entry, validation, the run directory
claimed, then the work of ``attnlab.run``. Their Hydra plumbing is ``cli.hydra``. The top layer: it may
import every other package, and none imports it. Importing this package imports nothing else."""
