"""Resuming a run: what the checkpoint says about the run it came from, and whether this run continues it."""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from typing import Any

from attnlab.schema.errors import PICKLED_CODE, ConfigError
from attnlab.schema.load import from_format_1, is_format_1, plain
from attnlab.schema.optim import RESUME_CHANGEABLE, OnResume
from attnlab.schema.run import RunConfig, process_count
from attnlab.schema.rundir import is_sharded_checkpoint

log = logging.getLogger("attnlab.train")
RUN_KEY = "attnlab_run"  # the checkpoint entry written by training.callbacks.RunState
# Settings that may change on resume without changing what was computed before it.
FREE_ON_RESUME = {
    "data.num_workers",
    "data.pin_memory",
    "data.cache_dir",
    "optim.on_extend",
    "optim.on_resume",
}
DECAYING = ("cosine", "linear")  # the schedules that end at a step budget
COMPARED = ("model", "data", "task", "optim", "seed")
BATCH_KEY = "data.batch_size"  # per process: compared as the batch of all processes together


def read_run_state(ckpt_path: str) -> dict[str, Any]:
    """``{"config": ..., "wandb_id": ...}`` stored in an attnlab checkpoint (neither for other
    checkpoints; a sharded checkpoint's directory too), its ``global_step``: the optimizer steps done
    when it was saved, ``schedule``: the settings of its learning-rate schedule (``tasks.optim.Schedule``'s
    fields, None if it has none), and ``compressed``: the method of attnlab-compress that wrote it (None
    for a checkpoint of attnlab-train)."""
    import torch

    from attnlab.compress import PRUNING_KEY, allow_quantized_tensors, quantization_of
    from attnlab.training.sharded import CONSOLIDATED_KEY

    if is_sharded_checkpoint(ckpt_path):  # its metadata: all but the weights and optimizer states
        from attnlab.training.sharded_files import check_sharded

        meta = check_sharded(Path(ckpt_path))  # and nothing pickled in it runs code
        return {
            **(meta.get(RUN_KEY) or {}),
            "global_step": int(meta.get("global_step", 0)),
            "schedule": saved_schedule(meta),
            "compressed": None,
        }
    allow_quantized_tensors(ckpt_path)  # a checkpoint of attnlab-compress holds torchao's int8 tensors
    try:
        checkpoint = torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError:  # torch's message advises weights_only=False: never do that here
        raise ConfigError("ckpt_path", ckpt_path, PICKLED_CODE) from None
    except Exception as err:  # a damaged or foreign file fails in many ways; all mean the same here
        raise ConfigError(
            "ckpt_path", ckpt_path, f"not a readable checkpoint ({type(err).__name__})"
        ) from None
    state = checkpoint.get(RUN_KEY) if isinstance(checkpoint, dict) else None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ConfigError("ckpt_path", ckpt_path, "not a Lightning checkpoint written by attnlab-train")
    compressed = (quantization_of(checkpoint) or {}).get("method")
    compressed = compressed or ("prune_heads" if PRUNING_KEY in checkpoint else None)
    compressed = compressed or ("consolidate" if CONSOLIDATED_KEY in checkpoint else None)
    return {
        **(state or {}),
        "global_step": int(checkpoint.get("global_step", 0)),
        "schedule": saved_schedule(checkpoint),
        "compressed": compressed,
    }


def saved_schedule(checkpoint: dict) -> dict[str, Any] | None:
    """The fields of the first learning-rate schedule a checkpoint holds (LambdaLR saves its lambda
    objects' fields), or None."""
    schedulers = checkpoint.get("lr_schedulers") or [{}]
    lambdas = schedulers[0].get("lr_lambdas") if isinstance(schedulers[0], dict) else None
    return lambdas[0] if lambdas and isinstance(lambdas[0], dict) else None


def report_schedule(run: RunConfig, state: dict[str, Any]) -> dict[str, Any]:
    """The schedule of a run, for its ``summary.json``: its name and ``steps``, the step it ends at. A
    resume whose step budget differs from its checkpoint's schedule's also records ``checkpoint_steps``
    and ``on_extend``, and says what happens: with ``optim.on_extend=keep`` a warning when the run goes
    past the end of the schedule (the rate stays at its final value), with ``stretch`` the change of
    the rate at the current step."""
    from attnlab.tasks.optim import Schedule, schedule_steps

    name, steps = str(run.optim.schedule), schedule_steps(run.optim, run.trainer.max_steps)
    saved = state.get("schedule")
    if steps <= 0:  # a run bounded by epochs: the task estimates its steps once the data is known
        return {"name": name, "steps": None}
    if name not in DECAYING or not saved or saved.get("max_steps") in (None, steps):
        return {"name": name, "steps": steps}
    try:
        before = Schedule(**saved)
    except TypeError:  # a schedule of another form than this version's: nothing to compare
        return {"name": name, "steps": steps}
    old, step, how = before.max_steps, state["global_step"], str(run.optim.on_extend)
    rate = run.optim.lr * before(step)
    if how == "keep":
        if steps > old:
            log.warning(
                "trainer.max_steps=%d runs past the end of the checkpoint's %s schedule (step %d): steps "
                "%d-%d keep its final learning rate %.2e (optim.on_extend=keep); optim.on_extend=stretch "
                "stretches the schedule to end at step %d instead",
                steps, name, old, old + 1, steps, run.optim.lr * before(old), steps,
            )  # fmt: skip
        return {"name": name, "steps": old, "checkpoint_steps": old, "on_extend": how}
    after = Schedule(**{**saved, "max_steps": steps})
    log.info(
        "optim.on_extend=stretch: the checkpoint's %s schedule, which ended at step %d, now ends at step "
        "%d; at step %d the learning rate goes from %.2e to %.2e",
        name, old, steps, step, rate, run.optim.lr * after(step),
    )  # fmt: skip
    return {"name": name, "steps": steps, "checkpoint_steps": old, "on_extend": how}


def check_resume(run: RunConfig) -> None:
    """A resumed run must compute what the checkpoint's run computed: same model, data, task, optimiser,
    seed; under ``optim.on_resume=apply`` the optimiser's values (``RESUME_CHANGEABLE``) may change."""
    if run.ckpt_path is None:
        return
    state = read_run_state(run.ckpt_path)
    if state["compressed"] == "consolidate":
        raise ConfigError(
            "ckpt_path",
            run.ckpt_path,
            "is a sharded checkpoint consolidated by attnlab-consolidate, for inference only (no optimizer "
            "state): resume from the sharded checkpoint itself (ckpt_path=last)",
        )
    if state["compressed"]:
        raise ConfigError(
            "ckpt_path",
            run.ckpt_path,
            f"is a checkpoint of attnlab-compress method={state['compressed']}, for inference only (no "
            "optimizer state): resume from the checkpoint of attnlab-train",
        )
    saved = saved_config(state)
    if saved:
        check_global_batch(run, saved, state.get("processes"))
        check_layout(run, saved)
    apply = run.optim.on_resume == OnResume.apply
    for key, (theirs, mine) in changes(run, state).items():
        if apply and key in RESUME_CHANGEABLE:
            continue
        same = "resume with the same settings (its run directory's config.yaml has them all)"
        if key in RESUME_CHANGEABLE:
            same += ", or add optim.on_resume=apply to continue with the changed optimiser settings"
        elif apply:
            same += f"; optim.on_resume=apply changes only {', '.join(sorted(RESUME_CHANGEABLE))}"
        raise ConfigError(
            key, mine, f"the checkpoint {run.ckpt_path} was trained with {key}={theirs}; {same}"
        )


def saved_config(state: dict[str, Any]) -> dict[str, Any] | None:
    """The checkpoint's run config as today's format writes it; None where it recorded none."""
    saved = state.get("config")
    if saved and is_format_1(saved):
        saved = from_format_1(saved)
    return saved or None


def changes(run: RunConfig, state: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The settings (dotted keys) in which ``run`` differs from its checkpoint's run, each as (the
    checkpoint's value, this run's), leaving out those that may change freely (``FREE_ON_RESUME``)."""
    saved = saved_config(state)
    if not saved:
        return {}
    ours, found = plain(run), {}
    for group in COMPARED:
        mine_flat = _flat(ours[group], group)
        for key, theirs in _flat(saved.get(group), group).items():
            mine = mine_flat.get(key)
            if key == BATCH_KEY and state.get("processes") and process_count(run.trainer):
                continue  # per process: check_global_batch compared the batch of all processes
            if key not in FREE_ON_RESUME and mine != theirs:
                found[key] = (theirs, mine)
    return found


def continuations(run: RunConfig, state: dict[str, Any], changed: dict[str, tuple[Any, Any]]) -> list[dict]:
    """The run's continuations with changed optimiser settings (``optim.on_resume=apply``): the
    checkpoint's, then this resume's if it ``changed`` any. Each entry: the ``step`` it continued from,
    the checkpoint, and each changed key as [old, new]."""
    history = list(state.get("continuations") or [])
    if not changed:
        return history
    entry = {"step": state["global_step"], "ckpt_path": run.ckpt_path}
    return [*history, {**entry, "changed": {key: list(values) for key, values in changed.items()}}]


def changes_line(entry: dict) -> str:
    """One continuation of ``continuations`` as the line the run prints."""
    said = ", ".join(f"{key} {old} -> {new}" for key, (old, new) in entry["changed"].items())
    return f"optim.on_resume=apply: from step {entry['step']} of {entry['ckpt_path']}: {said}"


def check_global_batch(run: RunConfig, saved: dict[str, Any], processes: int | None) -> None:
    """A resume on another number of processes must draw the same batch a step: ``data.batch_size``
    (per process) times the data-parallel processes (a tensor-parallel group draws one batch) as the
    checkpoint's run (the data stream counts samples over all
    processes, so it continues at the same sample). Unchecked here when either count is unknown
    (``trainer.devices=auto``, a checkpoint that did not record it): the batch size must then be equal."""
    ours = process_count(run.trainer)
    ours = ours // run.trainer.tensor_parallel_size if ours else None  # tensor parallel: one batch a group
    theirs = (saved.get("data") or {}).get("batch_size")
    if not processes or not ours or theirs is None:
        return
    batch = getattr(run.data, "batch_size", None)
    if batch is not None and batch * ours != theirs * processes:
        raise ConfigError(
            BATCH_KEY,
            batch,
            f"the checkpoint {run.ckpt_path} was trained with {BATCH_KEY}={theirs} on {processes} "
            f"data-parallel process(es), {theirs * processes} samples a step: resume with {BATCH_KEY} "
            f"times those processes ({ours} here) equal to {theirs * processes}",
        )


def check_layout(run: RunConfig, saved: dict[str, Any]) -> None:
    """Under fsdp2 each process loads its shards by parameter name, and tensor parallel splits the
    fused attention projections (``models.parallel``): a checkpoint resumes there only into the same
    layout, split (any tensor-parallel size: the saved tensors are whole) or not. A run without
    sharding reads any of them whole, joined back (``training.sharded.load_whole``)."""
    theirs = int((saved.get("trainer") or {}).get("tensor_parallel_size") or 1)
    ours = run.trainer.tensor_parallel_size
    if run.trainer.strategy != "fsdp2" or (theirs > 1) == (ours > 1):
        return
    if theirs > 1:
        allowed = "resume with tensor parallel (any size above 1), or in one process or trainer=ddp"
    else:
        allowed = "resume with trainer.tensor_parallel_size=1"
    raise ConfigError(
        "trainer.tensor_parallel_size",
        ours,
        f"the checkpoint {run.ckpt_path} was written with trainer.tensor_parallel_size={theirs}, its "
        f"attention projections {'split' if theirs > 1 else 'fused'}: {allowed}",
    )


def _flat(value: Any, prefix: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, Any] = {}
    for k, v in value.items():
        out.update(_flat(v, f"{prefix}.{k}"))
    return out
