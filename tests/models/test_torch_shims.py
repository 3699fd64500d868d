"""The writes of torch's private state (``models.torch_shims``): one contract per shim, which fails
when the internal it relies on changes, and the version guard that turns them off."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch._inductor.config
from torch._inductor.fx_passes import post_grad

from attnlab.models import torch_shims
from attnlab.models.torch_shims import CHECKED_TORCH, enable_async_tp, set_last_lr, torch_checked


def test_the_installed_torch_is_the_one_the_shims_were_checked_against() -> None:
    """Fails after an upgrade: re-read the contracts below, then move ``CHECKED_TORCH``."""
    assert torch_checked(), (torch.__version__, CHECKED_TORCH)
    assert torch_shims.SHIMS_ON


@pytest.mark.parametrize(
    ("version", "checked"), [("2.13.0+cpu", True), ("2.13.1", True), ("2.14.0", False), ("2.12.0", False)]
)
def test_only_the_checked_minor_version_switches_the_shims_on(version: str, checked: bool) -> None:
    assert torch_checked(version) is checked


def scheduler() -> torch.optim.lr_scheduler.LambdaLR:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)


def test_outside_the_checked_version_every_shim_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch_shims, "SHIMS_ON", False)
    with torch._inductor.config.patch(_micro_pipeline_tp=False):  # inductor's own patching, undone after
        assert not enable_async_tp() and not torch._inductor.config._micro_pipeline_tp
    lr = scheduler()
    set_last_lr(lr, [0.5])
    assert lr.get_last_lr() == [0.1]


def test_inductor_rewrites_for_async_tensor_parallel_where_its_private_setting_is_on() -> None:
    with torch._inductor.config.patch(_micro_pipeline_tp=False):  # inductor's own patching, undone after
        assert enable_async_tp() and torch._inductor.config._micro_pipeline_tp is True
    assert torch._inductor.config._micro_pipeline_tp is False
    assert "config._micro_pipeline_tp" in inspect.getsource(post_grad)


def test_a_schedulers_last_rates_are_the_private_list_that_get_last_lr_returns() -> None:
    lr = scheduler()
    set_last_lr(lr, [0.5])
    assert lr.get_last_lr() == [0.5]
    assert "return self._last_lr" in inspect.getsource(torch.optim.lr_scheduler.LRScheduler.get_last_lr)
