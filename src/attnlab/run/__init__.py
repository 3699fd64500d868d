"""attnlab's commands as library calls, for experiments, benchmarks, notebooks and tests.

    from attnlab import run

    config = run.run_config(["model=gpt-tiny", "pos=rope", "trainer.max_steps=50"])
    result = run.train(config, Path("runs/rope"))              # RunResult: best, test metrics, checkpoint
    metrics = run.evaluate(result.checkpoint, Path("runs/rope/eval/64"), ["data.seq_len=64"])
    print(run.sample(run.command_config("sample", [f"ckpt_path={result.checkpoint}", "prompt=Hello"])))

Each function does what its console script's job does, in this process, without Hydra's run directory
files, console handling or exit codes: the ``attnlab-*`` commands (``attnlab.cli``) add those around the
same code. Configs are composed from attnlab's ``conf/`` as the command line composes them
(``compose``), or built from the schema's dataclasses.

The work behind each function lives in this package, below ``attnlab.cli`` (which imports it, never
the reverse): training (``prepared``, ``fit``, ``budget``, ``devices``, ``teacher``, ``pretrained``),
evaluation (``evaluation``, ``eval_data``, ``eval_lengths``, ``answers``, ``harness``, ``memory``), the
commands that read a checkpoint (``sampling``, ``explaining``, ``compressing``, ``prune``,
``exporting``, ``families``), and the configs (``configs``, ``presets``, ``bad_input``).
"""

from attnlab.run.commands import RunResult, compress, evaluate, explain, export, report, sample, train
from attnlab.run.configs import command_config, compose, run_config

__all__ = [
    "RunResult",
    "command_config",
    "compose",
    "compress",
    "evaluate",
    "explain",
    "export",
    "report",
    "run_config",
    "sample",
    "train",
]
