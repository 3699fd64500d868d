"""The places where attnlab writes torch's private state, in one place, and the version they were
checked against.

* ``enable_async_tp``: torch's async tensor parallel is switched on by an inductor setting with a
  private name (``torch._inductor.config._micro_pipeline_tp``, as torchtitan sets it).
* ``set_last_lr``: a learning-rate scheduler's rates after a restore changed the schedule
  (``tasks.optim.reschedule``): ``get_last_lr()``, which the logged ``lr`` reads, returns the private
  ``_last_lr`` that only ``step()`` sets.

Each depends on something torch does not promise; the contract tests (``tests/models/test_torch_shims.py``)
fail when that changes. Under a torch version other than ``CHECKED_TORCH`` every shim is off: tensor
parallelism runs without the overlap, and the first ``lr`` logged after such a restore is the old one.

Here, in ``models``, because it is the lowest package whose code needs one (``models.parallel``).
"""

from __future__ import annotations

import torch

CHECKED_TORCH = (2, 13)  # the major and minor version whose internals the contract tests read


def torch_checked(version: str = torch.__version__) -> bool:
    """Whether ``version`` (torch's, by default) is the one the shims were checked against."""
    major, minor, *_ = (version.split("+")[0] + ".0.0").split(".")
    return (int(major), int(minor)) == CHECKED_TORCH


SHIMS_ON = torch_checked()


def enable_async_tp() -> bool:
    """Switch on inductor's rewrite of each all-gather followed by a matrix product (and each product
    followed by a reduce-scatter) of a compiled graph into chunks that overlap the communication with
    the computation; whether it is on."""
    if not SHIMS_ON:
        return False
    import torch._inductor.config

    torch._inductor.config._micro_pipeline_tp = True
    return True


def set_last_lr(scheduler: torch.optim.lr_scheduler.LRScheduler, rates: list[float]) -> None:
    """Make ``scheduler.get_last_lr()`` return ``rates`` (the optimizer's rates, set by the caller)."""
    if SHIMS_ON:
        scheduler._last_lr = list(rates)
