"""The HTML page that shows an explanation's pictures and tables together (``index.html``)."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path

from torch import Tensor


@dataclass
class Section:
    """A heading, a line of text, the PNGs (paths relative to the page) and raw HTML (tables, tokens)."""

    title: str
    text: str = ""
    images: list[str] = field(default_factory=list)
    html: str = ""


def scored_tokens_html(tokens: list[str], scores: Tensor) -> str:
    """Tokens as spans shaded by their score (red positive, blue negative), the score in a tooltip."""
    values = scores.detach().float().cpu().tolist()
    bound = max((abs(v) for v in values), default=0.0) or 1.0
    spans = []
    for token, v in zip(tokens, values):
        alpha = abs(v) / bound
        color = f"rgba(220,40,40,{alpha:.2f})" if v >= 0 else f"rgba(40,80,220,{alpha:.2f})"
        spans.append(
            f'<span class="tok" style="background:{color}" title="{v:.4g}">{html.escape(token)}</span>'
        )
    return '<div class="tokens">' + "".join(spans) + "</div>"


def table_html(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 1400px; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
table { border-collapse: collapse; font-size: 0.9em; }
td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: right; }
.tokens { font-family: monospace; line-height: 2; white-space: pre-wrap; }
.tok { padding: 1px 0; }
"""


def write_report(folder: str | Path, title: str, sections: list[Section]) -> Path:
    """Write ``folder/index.html`` showing every section in order; returns its path."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"]
    parts.append(f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>")
    for s in sections:
        parts.append(f"<h2>{html.escape(s.title)}</h2>")
        if s.text:
            parts.append(f"<p>{html.escape(s.text)}</p>")
        parts.append(s.html)
        parts.extend(
            f'<div><img src="{html.escape(src)}" alt="{html.escape(src)}"></div>' for src in s.images
        )
    parts.append("</body></html>")
    path = Path(folder) / "index.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
