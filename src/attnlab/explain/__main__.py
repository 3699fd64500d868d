"""``python -m attnlab.explain``: the same as ``attnlab-explain``."""

from attnlab.explain.cli import main

main()
