"""ListOps (Nangia & Bowman 2018; the Long Range Arena variant): nested list operations on digits.

An expression such as ``[MAX 4 3 [MIN 2 3 ] 1 0 [MED 1 5 8 9 2 ] ]`` evaluates to a digit 0-9,
the class to predict. Solving it needs attention across the whole, hierarchically structured
sequence. Generated here from a seed; torch-free.
"""

from __future__ import annotations

import random
import statistics
from collections import Counter

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
CLOSE = "]"
VOCABULARY = (*OPERATORS, CLOSE, *(str(d) for d in range(10)))
NUM_CLASSES = 10

Tree = int | tuple[str, list["Tree"]]


class _TooLong(Exception):
    """Raised while generating a tree that has outgrown its token budget."""


def random_tree(
    rng: random.Random, max_depth: int, max_args: int, op_prob: float, budget: list[int], depth: int = 1
) -> Tree:
    """An operation with 2..max_args arguments; each argument is itself an operation with
    probability ``op_prob`` (while depth < max_depth), else a digit. ``budget`` holds the tokens
    left; running out raises ``_TooLong`` at once rather than growing a tree that will be rejected.
    """
    budget[0] -= 2  # the operator and the closing bracket
    args: list[Tree] = []
    for _ in range(rng.randint(2, max_args)):
        if depth < max_depth and rng.random() < op_prob:
            args.append(random_tree(rng, max_depth, max_args, op_prob, budget, depth + 1))
        else:
            args.append(rng.randrange(10))
            budget[0] -= 1
        if budget[0] < 0:
            raise _TooLong
    return rng.choice(OPERATORS), args


def evaluate(tree: Tree) -> int:
    """The reference value of an expression: MIN, MAX, MED (median, rounded down) and SM (sum mod 10)."""
    if isinstance(tree, int):
        return tree
    op, args = tree
    values = [evaluate(a) for a in args]
    if op == "[MIN":
        return min(values)
    if op == "[MAX":
        return max(values)
    if op == "[MED":
        return int(statistics.median(values))
    if op == "[SM":
        return sum(values) % 10
    raise ValueError(f"unknown ListOps operator {op!r}")


def to_tokens(tree: Tree) -> list[str]:
    if isinstance(tree, int):
        return [str(tree)]
    op, args = tree
    return [op, *(t for a in args for t in to_tokens(a)), CLOSE]


def parse(text: str) -> Tree:
    """The tree of a space-separated expression (the inverse of ``to_tokens``)."""
    tokens = text.split()
    tree, end = _parse(tokens, 0)
    if end != len(tokens):
        raise ValueError(f"trailing tokens after a complete ListOps expression: {tokens[end:]}")
    return tree


def _parse(tokens: list[str], i: int) -> tuple[Tree, int]:
    if tokens[i] not in OPERATORS:
        return int(tokens[i]), i + 1
    op, args, i = tokens[i], [], i + 1
    while tokens[i] != CLOSE:
        arg, i = _parse(tokens, i)
        args.append(arg)
    return (op, args), i + 1


def generate(
    n: int, seed: int, *, max_len: int, max_depth: int = 4, max_args: int = 5, op_prob: float = 0.25
) -> list[tuple[str, int]]:
    """``n`` (expression, value) pairs of at most ``max_len`` tokens, reproducible from ``seed``."""
    if max_len < 4:
        raise ValueError(f"a ListOps expression needs at least 4 tokens, got a maximum of {max_len}")
    rng = random.Random(seed)
    examples: list[tuple[str, int]] = []
    while len(examples) < n:
        try:
            tree = random_tree(rng, max_depth, max_args, op_prob, budget=[max_len])
        except _TooLong:
            continue
        examples.append((" ".join(to_tokens(tree)), evaluate(tree)))
    return examples


def majority_rate(labels: list[int]) -> float:
    """Accuracy of always predicting the most frequent label: the baseline a classifier must beat."""
    return Counter(labels).most_common(1)[0][1] / len(labels)
