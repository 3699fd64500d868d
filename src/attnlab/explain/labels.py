"""How positions read on a picture's axes and in its title: tokens with visible whitespace, a ViT's
CLS and patches by row and column. Plain strings, no matplotlib, so the commands can use them too."""

from __future__ import annotations

from torch import nn


def display_token(token: str) -> str:
    """A token as it should read on an axis: whitespace made visible."""
    return token.replace("\n", "⏎").replace("\t", "⇥").replace(" ", "␣") or "∅"


def quoted_token(token: str) -> str:
    """A token as a title names it: quoted, whitespace made visible ('␣', not ' ')."""
    return repr(display_token(token))


def display_label(label: str) -> str:
    """A position's label as a title names it: a ViT's CLS or p(row,col) as is, a token quoted."""
    return label if label == "CLS" or label.startswith("p(") else quoted_token(label)


def patch_labels(model: nn.Module) -> list[str]:
    """Labels of a ViT's positions: ``CLS`` (when it has one), then ``p(row,col)`` of each patch."""
    side = model.cfg.image_size // model.cfg.patch_size
    patches = [f"p({r},{c})" for r in range(side) for c in range(side)]
    return ["CLS", *patches] if model.cfg.pooling == "cls" else patches
