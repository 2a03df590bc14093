"""Verdicts computed from the numbers against stated thresholds.

A report must not say "partlog is faster" because its author expected it:
each comparison here takes two measured values, a threshold, and a
direction (lower is better, or higher), and answers which side wins or that
they tie within the threshold.  The report prints the numbers, the
threshold and the answer together, so a reader can check every one.
"""

from __future__ import annotations

from dataclasses import dataclass

# Two values within this fraction of each other are a tie: run-to-run
# noise of a 20-60 simulated second run is a few percent.
TIE_FRACTION = 0.05


@dataclass(frozen=True, slots=True)
class Comparison:
    """``a`` against ``b`` (lower is better unless ``higher_is_better``)."""

    what: str
    a_label: str
    a: float
    b_label: str
    b: float
    unit: str = ""
    higher_is_better: bool = False
    tie_fraction: float = TIE_FRACTION

    @property
    def winner(self) -> str | None:
        """The label of the better side, or None for a tie."""
        lo, hi = sorted((self.a, self.b))
        if hi == 0 or (hi - lo) / hi <= self.tie_fraction:
            return None
        a_better = (self.a > self.b) == self.higher_is_better
        return self.a_label if a_better else self.b_label

    @property
    def ratio(self) -> float | None:
        """``a / b`` (None when b is 0)."""
        return self.a / self.b if self.b else None

    def sentence(self) -> str:
        def fmt(x: float) -> str:
            return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.2f}"

        numbers = f"{self.a_label} {fmt(self.a)}{self.unit} vs {self.b_label} {fmt(self.b)}{self.unit}"
        w = self.winner
        better = "higher" if self.higher_is_better else "lower"
        if w is None:
            return f"tie ({numbers}; within {self.tie_fraction:.0%})"
        return f"**{w}** ({numbers}; {better} is better, threshold {self.tie_fraction:.0%})"


@dataclass(frozen=True, slots=True)
class Check:
    """A claim with a bound: ``value`` against ``bound`` (``value <= bound``
    unless ``at_least``)."""

    what: str
    value: float
    bound: float
    at_least: bool = False
    unit: str = ""

    @property
    def holds(self) -> bool:
        return self.value >= self.bound if self.at_least else self.value <= self.bound

    def sentence(self) -> str:
        op = ">=" if self.at_least else "<="
        mark = "holds" if self.holds else "**fails**"
        v = f"{self.value:,.2f}".rstrip("0").rstrip(".")
        b = f"{self.bound:,.2f}".rstrip("0").rstrip(".")
        return f"{mark} ({v}{self.unit}; bound {op} {b}{self.unit})"


def compare(what: str, a_label: str, a: float | None, b_label: str, b: float | None, unit: str = "") -> str:
    """A :class:`Comparison`'s sentence, or "n/a" when a side has no value
    (no answered request): a side with no data never wins."""
    missing = [label for label, x in ((a_label, a), (b_label, b)) if x is None]
    if missing:
        return f"n/a (no samples for {' and '.join(missing)})"
    assert a is not None and b is not None
    return Comparison(what, a_label, a, b_label, b, unit).sentence()
