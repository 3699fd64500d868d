"""Which errors mean that a peer process of a distributed run was lost, and what of them is shown."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from attnlab.training.peers import PeerLost, lost_peer

GLOO = "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "


@pytest.mark.parametrize(
    ("err", "said"),
    [
        (
            RuntimeError(
                f"{GLOO}Connection closed by peer [127.0.0.1]:27567. This is typically caused by a "
                "remote worker crashing. Check the logs of the remote worker before reporting an error. GLHF!"
            ),
            "Connection closed by peer [127.0.0.1]:27567",
        ),
        (
            RuntimeError(f"{GLOO}Read error [127.0.0.1]:5559: Connection reset by peer"),
            "Read error [127.0.0.1]:5559: Connection reset by peer",
        ),
        (
            RuntimeError(f"{GLOO}Timed out waiting 20000ms for recv operation to complete"),
            "Timed out waiting 20000ms for recv operation to complete",
        ),
        (  # what gloo raises on a process's other pairs once one of its operations timed out
            RuntimeError("Application timeout caused pair closure"),
            "Application timeout caused pair closure",
        ),
        (
            dist.DistBackendError("NCCL communicator was aborted on rank 0.\nmore"),
            "NCCL communicator was aborted on rank 0",
        ),
    ],
)
def test_a_collective_failed_by_a_peer_is_recognised_and_said_in_its_first_sentence(err, said) -> None:
    assert lost_peer(err) == said


@pytest.mark.parametrize(
    "err",
    [
        RuntimeError("CUDA out of memory"),
        RuntimeError("the read timed out"),  # not a collective's
        ValueError(f"{GLOO}Connection closed by peer"),
        PeerLost("a process of this distributed run died (Connection closed by peer)"),
    ],
)
def test_other_errors_are_left_as_they_are(err) -> None:
    assert lost_peer(err) is None
