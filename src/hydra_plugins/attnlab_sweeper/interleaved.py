"""``attnlab-train -m hydra/sweeper=interleaved pos=rope,alibi seed=1,2,3``: Hydra's basic sweeper
(a grid, run in order) with the jobs ordered seed by seed, every configuration of one seed before the
next seed: rope, alibi, rope, alibi, ... . A machine whose speed drifts (another job starts on a
shared GPU, the clock throttles) then slows both sides of a comparison alike, not the last
configuration's seeds only (modded-nanogpt interleaves its A/B runs for this). Hydra finds sweepers
in the ``hydra_plugins`` package only: this is where ``conf/hydra/sweeper/interleaved.yaml`` points."""

from __future__ import annotations

from hydra.core.override_parser.types import Override

from attnlab.cli.hydra.hydra_shims import basic_sweeper
from attnlab.cli.hydra.sweep_jobs import seeds_first

BasicSweeper = basic_sweeper()


class InterleavedSweeper(BasicSweeper):
    """The basic sweeper, its grid's seed (``seed=...``) varied slowest."""

    @staticmethod
    def split_arguments(overrides: list[Override], max_batch_size: int | None) -> list[list[list[str]]]:
        return BasicSweeper.split_arguments(seeds_first(overrides), max_batch_size)
