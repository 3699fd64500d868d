"""The one input that ``attnlab.explain`` explains, and how its pictures are titled."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class Example:
    """One input (batch of size 1, in the data layout) and how to label it.

    ``tokens`` label the input positions (the source for seq2seq; a ViT's are ``patch_labels``),
    ``target_tokens`` the decoder's input (seq2seq: bos, then the output) and ``output_tokens`` what
    each decoder position writes (the output, then eos): the decoder's queries are labelled by what
    they write, its keys by what they read. ``image`` is the ViT input before
    normalisation (C, H, W), ``focus`` the position whose prediction is explained (a masked position
    for MLM), ``prediction`` a short line naming the prediction and its probability (the title of
    every picture, e.g. "predicted class 7 (p=0.93)"), ``description`` a longer line for the page.
    """

    batch: dict[str, Tensor]
    tokens: list[str] | None = None
    target_tokens: list[str] | None = None
    output_tokens: list[str] | None = None
    image: Tensor | None = None
    focus: int | None = None
    prediction: str = ""
    description: str = ""


def titled(what: str, example: Example) -> str:
    """A figure title: what it shows, then the prediction it explains."""
    return f"{what}\n{example.prediction}" if example.prediction else what
