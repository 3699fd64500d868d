"""Imported last by the fork server (``forked.PRELOAD``): moves every object the preloaded modules made
into the garbage collector's permanent generation (``gc.freeze``), so that a forked child's
collections neither walk those millions of objects nor write to their pages, which the child would
then copy from the server (Python's documentation of ``gc.freeze``, for servers that fork)."""

import gc

gc.collect()
gc.freeze()
