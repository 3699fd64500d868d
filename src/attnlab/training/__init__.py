"""The machinery around a training run: the Hydra command line, run directories, loggers, callbacks,
and the Trainer. Importing this package is torch-free; the modules that need Lightning import it."""
