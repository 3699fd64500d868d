"""Offline sequence-to-sequence sets generated from a seed: each needs real seq2seq behaviour.

- dates: a date written in one of many human formats -> ISO 8601 ("Friday, March 5, 2021" -> "2021-03-05")
- numbers: digits -> English words ("1042" -> "one thousand forty-two")
- reverse: a random string -> the same string reversed
Torch-free; every generator returns a list of (source, target) strings.
"""

from __future__ import annotations

import datetime
import random
import string
from collections.abc import Callable

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
FIRST_DATE, LAST_DATE = datetime.date(1950, 1, 1), datetime.date(2049, 12, 31)


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# Each format is unambiguous: day-first and month-first numeric forms use different separators.
DATE_FORMATS: tuple[Callable[[datetime.date], str], ...] = (
    lambda d: f"{d.day} {MONTHS[d.month - 1]} {d.year}",
    lambda d: f"{d.day:02d} {MONTHS[d.month - 1][:3]} {d.year}",
    lambda d: f"{MONTHS[d.month - 1]} {d.day}, {d.year}",
    lambda d: f"{MONTHS[d.month - 1][:3]} {d.day}, {d.year}",
    lambda d: f"{ordinal(d.day)} of {MONTHS[d.month - 1]} {d.year}",
    lambda d: f"the {ordinal(d.day)} of {MONTHS[d.month - 1].lower()}, {d.year}",
    lambda d: f"{WEEKDAYS[d.weekday()]}, {MONTHS[d.month - 1]} {d.day}, {d.year}",
    lambda d: f"{WEEKDAYS[d.weekday()][:3]} {d.day} {MONTHS[d.month - 1][:3]} {d.year}",
    lambda d: f"{MONTHS[d.month - 1].upper()} {d.day} {d.year}",
    lambda d: f"{d.month:02d}/{d.day:02d}/{d.year}",  # US: month first, slashes
    lambda d: f"{d.day:02d}.{d.month:02d}.{d.year}",  # European: day first, dots
    lambda d: f"{d.year}/{d.month}/{d.day}",
)


def dates(n: int, seed: int | str) -> list[tuple[str, str]]:
    """``n`` dates between 1950 and 2049 in random human formats, with their ISO 8601 form."""
    rng = random.Random(seed)
    first, last = FIRST_DATE.toordinal(), LAST_DATE.toordinal()
    out = []
    for _ in range(n):
        day = datetime.date.fromordinal(rng.randint(first, last))
        out.append((rng.choice(DATE_FORMATS)(day), day.isoformat()))
    return out


ONES = (
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
)
TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
SCALES = ((10**9, "billion"), (10**6, "million"), (1000, "thousand"))


def _below_thousand(n: int) -> str:
    hundreds, rest = divmod(n, 100)
    words = [f"{ONES[hundreds]} hundred"] if hundreds else []
    if rest >= 20:
        words.append(TENS[rest // 10] + (f"-{ONES[rest % 10]}" if rest % 10 else ""))
    elif rest:
        words.append(ONES[rest])
    return " ".join(words)


def number_to_words(n: int) -> str:
    """American English words of 0 <= n < 10**12, e.g. 1042 -> "one thousand forty-two"."""
    if not 0 <= n < 10**12:
        raise ValueError(f"number_to_words handles 0 <= n < 10**12, got {n}")
    if n == 0:
        return "zero"
    words = []
    for value, name in SCALES:
        if n >= value:
            words.append(f"{_below_thousand(n // value)} {name}")
            n %= value
    if n:
        words.append(_below_thousand(n))
    return " ".join(words)


def numbers(n: int, seed: int | str, max_digits: int = 6) -> list[tuple[str, str]]:
    """``n`` numbers with 1..max_digits digits (each length equally likely), with their words."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        digits = rng.randint(1, max_digits)
        value = rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)
        out.append((str(value), number_to_words(value)))
    return out


REVERSE_ALPHABET = string.ascii_lowercase + string.digits


def reverse(n: int, seed: int | str, max_len: int = 24) -> list[tuple[str, str]]:
    """``n`` random strings of 1..max_len letters and digits, with the string reversed."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        text = "".join(rng.choices(REVERSE_ALPHABET, k=rng.randint(1, max_len)))
        out.append((text, text[::-1]))
    return out


def unseen_splits(
    make: Callable[[int, str], list[tuple[str, str]]], sizes: dict[str, int], seed: int
) -> dict[str, list[tuple[str, str]]]:
    """train/val/test sets of the given sizes from independent seeds; val and test keep only
    examples whose source is not in the training set, so exact match measures generalisation.
    """
    train = make(sizes["train"], f"{seed}/train")
    seen = {source for source, _ in train}
    out = {"train": train}
    for split in ("val", "test"):
        for factor in (2, 8, 32):  # draw more candidates while too many repeat the training set
            candidates = make(factor * sizes[split] + 100, f"{seed}/{split}")
            rows = [ex for ex in candidates if ex[0] not in seen][: sizes[split]]
            if len(rows) == sizes[split]:
                break
        if len(rows) < sizes[split]:
            raise ValueError(
                f"only {len(rows)} of {sizes[split]} {split} examples are unseen in training: the generated "
                "task is too small for data.num_train; lower it or widen the task"
            )
        seen.update(source for source, _ in rows)
        out[split] = rows
    return out
