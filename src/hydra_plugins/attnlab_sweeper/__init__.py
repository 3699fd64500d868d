"""attnlab's Hydra sweeper: ``hydra/sweeper=interleaved`` (``attnlab.cli.sweep_jobs.seeds_first``)."""
