"""One torch thread for the explain tests (tiny ops gain nothing from more); their tiny models of every
family are the root conftest's ``tiny_model``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
