"""The command line's Hydra plumbing: the app that runs a command under Hydra (``app``), what is read
of the command line before composing (``command_line``; a distilling student's defaults:
``teacher_defaults``), ``--help`` with each key described (``help``; ``hydra_shims``: Hydra's internals,
version-guarded), a multirun's jobs (``sweep_jobs``, ``jobs``), eval's choices (``eval_choices``) and
argparse for the commands that take paths (``one_line_parser``)."""
