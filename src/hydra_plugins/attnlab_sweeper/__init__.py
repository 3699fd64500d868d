"""attnlab's Hydra sweeper: ``hydra/sweeper=interleaved`` (``attnlab.cli.hydra.sweep_jobs.seeds_first``)."""
