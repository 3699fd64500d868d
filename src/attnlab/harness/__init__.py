"""attnlab models in the ecosystem's evaluation harness: ``AttnlabLM``, an lm-evaluation-harness
``LM`` over a decoder and its tokenizer (``pip install -e ".[eval]"``), and ``evaluate``, which scores
tasks given as local YAML files."""

from attnlab.harness.run import evaluate

__all__ = ["evaluate"]
