"""attnlab's Hydra configs, installed as the package ``attnlab.conf`` (see pyproject.toml)."""
