"""The commands (``attnlab-train``, ``-eval``, ``-sample``, ``-explain``) and what only they need: Hydra
and one-line errors (``app``), loading a checkpoint (``checkpoint``), the per-family behaviour of the
commands (``families``) and ``model.init_from`` (``pretrained``). The top layer: it may import every
other package, and none imports it. Importing this package imports nothing else."""
