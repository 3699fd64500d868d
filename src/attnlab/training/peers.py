"""A distributed run whose peer process died or froze: the collective that failed raises the backend's
own error (gloo's ``[.../pair.cc:553] Connection closed by peer ... GLHF!``, its ``Timed out waiting
20000ms for recv``, or on the other pairs of that process the bare ``Application timeout caused
pair closure`` that gloo signals after such a timeout, NCCL's watchdog timeout or abort), which says neither what happened nor how to go
on. ``lost_peer`` recognises such an error, so the command can say both in one line (``PeerLost``).

Torch-free: it reads the error's type name and text.
"""

from __future__ import annotations

import re

# torch.distributed's own error types (DistBackendError, DistNetworkError, DistStoreError, ...)
DIST_ERRORS = {"DistError", "DistBackendError", "DistNetworkError", "DistStoreError", "DistQueueEmptyError"}
# gloo's "Application timeout caused pair closure" names no backend: its words are gloo's own
BACKEND = re.compile(r"gloo|nccl|processgroup|c10d|pair closure", re.IGNORECASE)
PEER_GONE = re.compile(
    r"closed by peer|reset by peer|broken pipe|timed out|timeout|aborted|remote process exited",
    re.IGNORECASE,
)
SOURCE = re.compile(r"^\[[^\]]*\]\s*")  # gloo's "[/path/to/pair.cc:553] " before its message


class PeerLost(RuntimeError):
    """A process of this distributed run died or stopped answering, so this one's collectives failed."""


def lost_peer(err: BaseException) -> str | None:
    """What the backend's error ``err`` says of the lost peer (its first sentence, without gloo's source
    location), or None when ``err`` is not a collective failed by a peer."""
    if not isinstance(err, RuntimeError) or isinstance(err, PeerLost):
        return None
    text = str(err).strip()
    dist_error = any(cls.__name__ in DIST_ERRORS for cls in type(err).__mro__)
    if not PEER_GONE.search(text) or not (dist_error or BACKEND.search(text)):
        return None
    first = SOURCE.sub("", text.splitlines()[0] if text else type(err).__name__)
    return first.split(". ")[0].rstrip(".")
