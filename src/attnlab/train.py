"""``python -m attnlab.train`` (torchrun and SLURM start it so): the ``attnlab-train`` command."""

from attnlab.cli.train import main

if __name__ == "__main__":
    main()
