"""attnlab models in the ecosystem's evaluation harness: ``AttnlabLM`` and ``AttnlabSeq2SeqLM``,
lm-evaluation-harness ``LM``s over a decoder or an encoder-decoder and its tokenizer
(``pip install -e ".[eval]"``), and ``evaluate``, which scores tasks given as local YAML files."""

from attnlab.harness.run import TaskRefused, evaluate, flat_metrics, harness_lm

__all__ = ["TaskRefused", "evaluate", "flat_metrics", "harness_lm"]
