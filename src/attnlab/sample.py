"""``python -m attnlab.sample`` (torchrun and SLURM start it so): the ``attnlab-sample`` command."""

from attnlab.cli.sample import main

if __name__ == "__main__":
    main()
