"""``python -m attnlab.eval`` (torchrun and SLURM start it so): the ``attnlab-eval`` command."""

from attnlab.cli.eval import main

if __name__ == "__main__":
    main()
