"""Generation and prediction for every family: sampling and greedy decoding (decoder-only),
greedy and beam search (encoder-decoder), fill-mask and class probabilities (encoders, ViT)."""

from attnlab.generate.common import pad_batch
from attnlab.generate.decoder import generate, sample_in_windows
from attnlab.generate.encoder import MaskFill, class_probabilities, fill_mask, image_probabilities
from attnlab.generate.seq2seq import Hypothesis, beam_search, greedy_decode

__all__ = [
    "Hypothesis",
    "MaskFill",
    "beam_search",
    "class_probabilities",
    "fill_mask",
    "generate",
    "greedy_decode",
    "image_probabilities",
    "pad_batch",
    "sample_in_windows",
]
