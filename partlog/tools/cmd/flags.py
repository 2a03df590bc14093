"""argparse ``type=`` helpers that refuse values no run could use.

Each numeric flag names its range beside its definition, so a bad value is
refused while the line is parsed, before anything starts, with one line and
exit status 2 (``partlog cluster: argument --azs: must be > 0 (see partlog
cluster --help)``).  A value that is not a number at all gets argparse's
own words (``invalid int value: '1e8'``), as a plain ``type=int`` would.
The comparisons are the ones the flags always had: ``value <= 0`` is
refused by the positive types, ``value < 0`` by the non-negative ones.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

# Upper bound of timeout flags, which have no limit elsewhere: a day, in ms.
TIMEOUT_MS_MAX = 86_400_000


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None


def positive_int(text: str) -> int:
    value = _int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def positive_float(text: str) -> float:
    value = _float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def non_negative_float(text: str) -> float:
    value = _float(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An int in ``[low, high]``, both included."""
    assert low <= high

    def parse(text: str) -> int:
        value = _int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in [{low}, {high}], got {value}")
        return value

    return parse


def positive_int_at_most(high: int) -> Callable[[str], int]:
    """An int in ``[1, high]``: ``must be > 0`` below, the range above."""
    in_range = int_in(1, high)

    def parse(text: str) -> int:
        positive_int(text)
        return in_range(text)

    return parse
