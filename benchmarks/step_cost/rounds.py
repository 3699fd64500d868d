"""One round of the step-cost section: the three contenders in one process, taking turns step by step.

    python -m benchmarks.step_cost.rounds --first 400 --last 2400 --order "attnlab-train,bare Trainer,plain loop" --out F

``attnlab-train``'s run runs as its command runs it (``attnlab.run.train``: the config composed by Hydra
and validated, the wandb logger offline, every callback, checkpoints, progress lines) in the main thread, with one
callback added that takes part in the relay (``benchmarks.step_cost.relay``); the bare ``pl.Trainer`` and
the plain loop (``benchmarks.step_cost.references``) train the same tiny GPT in two threads. Each runs ``last + 1``
steps; the steps ``first`` to ``last - 1`` are timed, one turn each in ``order``. Writes
``{contender: {"steps", "wall", "cpu"}}`` as JSON to ``--out``. The process's stdout is attnlab-train's
console (the caller pipes it, as a batch job would).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

CONTENDERS = ("attnlab-train", "bare Trainer", "plain loop")
SIZE = ["model.n_layers=1", "model.d_model=32", "data.batch_size=4", "data.seq_len=16"]


def attnlab_train_argv(steps: int, run_dir: Path, overrides: Sequence[str] = ()) -> list[str]:
    """attnlab-train's command line (after the program's name): the defaults but validation, which is
    held beyond the run (the end-of-run validation comes after the timed steps), then ``overrides``
    (to see what a default costs: ``checkpoint.every_n_steps=100000``, ``logger=none``, ...)."""
    relay = "{_target_:benchmarks.step_cost.relay.RelayCallback,name:'attnlab-train'}"
    return [
        *SIZE,
        f"trainer.max_steps={steps}",
        f"trainer.val_every_n_steps={10 * steps}",
        f"run_dir={run_dir}",
        f"+callbacks.relay={relay}",
        *overrides,
    ]


def run_attnlab_train(steps: int, run_dir: Path, overrides: Sequence[str]) -> None:
    """``attnlab-train <argv>``'s run in this thread (``attnlab.run.train``)."""
    from attnlab.run import run_config, train

    train(run_config(attnlab_train_argv(steps, run_dir, overrides)), run_dir)


def reference_threads(steps: int, errors: list[BaseException]) -> list[threading.Thread]:
    """The bare Trainer and the plain loop, prepared here (Hydra's compose is not thread-safe) and
    fitted in their own threads, each in the relay."""
    from benchmarks.step_cost import relay as step_relay
    from benchmarks.step_cost.references import fit_loop, fit_trainer, prepare

    relay = step_relay.RELAY
    assert relay is not None
    overrides = [*SIZE, f"trainer.max_steps={steps}"]
    trainer_job = prepare(overrides)
    loop_job = prepare(overrides)

    def contender(name: str, fit: Callable[[], None]) -> threading.Thread:
        def body() -> None:
            try:
                fit()
            except BaseException as err:  # reported by the main thread
                errors.append(err)
            finally:
                relay.leave(name)

        return threading.Thread(target=body, name=name, daemon=True)

    bare = step_relay.RelayCallback("bare Trainer")
    return [
        contender("bare Trainer", lambda: fit_trainer(*trainer_job, callbacks=[bare])),
        contender("plain loop", lambda: fit_loop(*loop_job, at_step=lambda s: relay.step("plain loop", s))),
    ]


def run_round(
    first: int,
    last: int,
    order: list[str],
    run_dir: Path,
    overrides: Sequence[str] = (),
) -> dict[str, dict]:
    """The three contenders' timed windows: ``{name: {"steps", "wall", "cpu"}}``; ``overrides`` go to
    attnlab-train only."""
    import torch

    from benchmarks.step_cost import relay as step_relay

    torch.set_num_threads(1)  # one thread each: the turns never overlap
    step_relay.RELAY = relay = step_relay.Relay(order, first, last)
    errors: list[BaseException] = []
    threads = reference_threads(last + 1, errors)
    for thread in threads:
        thread.start()
    try:
        run_attnlab_train(last + 1, run_dir, overrides)
    finally:
        relay.leave("attnlab-train")
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
    return relay.times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.step_cost.rounds", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--first", type=int, required=True)
    parser.add_argument("--last", type=int, required=True)
    parser.add_argument("--order", default=",".join(CONTENDERS), help="the turn order, comma-separated")
    parser.add_argument("--run-dir", type=Path, default=Path("run"), help="attnlab-train's run directory")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("overrides", nargs="*", help="more attnlab-train overrides (not the references')")
    args = parser.parse_args(argv)
    order = args.order.split(",")
    if sorted(order) != sorted(CONTENDERS):
        parser.error(f"--order must name each of {', '.join(CONTENDERS)} once, got {args.order!r}")
    times = run_round(args.first, args.last, order, args.run_dir, args.overrides)
    args.out.write_text(json.dumps(times))
    return 0


if __name__ == "__main__":
    sys.exit(main())
