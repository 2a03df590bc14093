"""scripts/conformance's rows (partlog.tools.conformance): the suite's
entries, and each test's row read from its runner's output: its summary
table, else the PASSED banners and first failures of a runner that
aborted or was killed at its cap; a number run once per SUBTESTS filter
gets one row merged from its runs."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# Ends the log of a runner killed at its cap.
CAP_MARK = "conformance: killed at its cap of"

# Tests run once per SUBTESTS filter of the suite (a substring of the
# sub-test names "function:line: ..."), and why: the rest of their
# sub-tests are out of scope.  A row passes when every run passes.
SUBTESTS: dict[str, tuple[tuple[str, ...], str]] = {
    "0135": (("do_test:",), "its share-consumer sub-tests (KIP-932, out of scope) left out"),
    "0142": (
        ("do_test_consumer:", "do_test_producer:", "do_test_txn_producer:", "do_test_reauth_failure:"),
        "its share-consumer sub-tests (KIP-932, out of scope) left out; OAUTHBEARER ones skip themselves",
    ),
}


@dataclass(frozen=True, slots=True)
class SuiteTest:
    """One entry of tests/test.c's table."""

    name: str  # e.g. 0045_subscribe_update_mock
    number: str  # e.g. 0045
    local: bool
    manual: bool
    known_issue: bool
    scenario: str


@dataclass(frozen=True, slots=True)
class Row:
    test: str
    result: str  # pass, fail, n/a
    seconds: float
    reason: str


_ANSI = re.compile(r"\x1b\[[0-9;]*m|\x1b\(B")
_SUMMARY = re.compile(r"^\|\s*(\d{4}_\w+)\s*\|\s*([A-Z]+)\s*\|\s*([0-9.]+)s\s*\|\s*(.*)$")


def rows_of(entries: Sequence[SuiteTest], output: str, secs: float) -> list[Row]:
    """The rows of one test number's entries from its runner's output: its
    summary table, or (when the runner aborted or was killed before
    printing one) the first failure it reported."""
    got = parse_summary(output)
    clean = _ANSI.sub("", output)
    capped = CAP_MARK in clean
    rows = []
    for t in entries:
        row = got.get(t.name)
        if row is None and (ms := _passed_ms(clean, t.name)) is not None:
            row = Row(t.name, "pass", ms / 1000, "")
        if row is None:
            why = first_failure(clean, t.name) or (
                "started, no result" if f"[{t.name}" in clean else "not reached: the runner aborted"
            )
            if capped:
                why = f"over its cap of {clean.rsplit(CAP_MARK, 1)[1].strip()}: {why}"
            row = Row(t.name, "fail", secs, why)
        rows.append(row)
    return rows


def number_rows(
    entries: Sequence[SuiteTest], number: str, run: Callable[[str | None, int], tuple[str, float]]
) -> list[Row]:
    """The rows of one test number: one ``run(None, 0)``, or (for a number
    in SUBTESTS) one run per filter, merged: a failed run fails the row
    (its filter named), else a passed one passes it with SUBTESTS' reason,
    else it is n/a (every run skipped)."""
    if number not in SUBTESTS:
        output, secs = run(None, 0)
        return rows_of(entries, output, secs)
    patterns, why = SUBTESTS[number]
    runs = [(pattern, rows_of(entries, *run(pattern, i))) for i, pattern in enumerate(patterns)]
    out = []
    for k, t in enumerate(entries):
        got = [(pattern, rs[k]) for pattern, rs in runs]
        secs = sum(r.seconds for _, r in got)
        failed = [(p, r) for p, r in got if r.result == "fail"]
        if failed:
            out.append(Row(t.name, "fail", secs, f"SUBTESTS={failed[0][0]}: {failed[0][1].reason}"))
        elif any(r.result == "pass" for _, r in got):
            out.append(Row(t.name, "pass", secs, why))
        else:
            out.append(Row(t.name, "n/a", secs, got[0][1].reason))
    return out


def _passed_ms(output: str, name: str) -> float | None:
    """The duration of an entry whose PASSED banner the output holds."""
    if f"Test {name} PASSED" not in output:
        return None
    m = re.search(re.escape(name) + r": duration ([0-9.]+)ms", output)
    return float(m.group(1)) if m else 0.0


def first_failure(output: str, name: str) -> str:
    """``FILE:LINE: message`` of the first ``### Test "<name> ..." failed at``
    block of a runner's (uncoloured) output, or ""."""
    m = re.search(r'### Test "' + re.escape(name) + r'[^"]*" failed at (\S+?):(\d+):[^\n]*###\n([^\n]*)', output)
    return f"{m.group(1)}:{m.group(2)}: {m.group(3).strip()}" if m else ""


def parse_summary(output: str) -> dict[str, Row]:
    """The runner's summary table (``| NAME | STATE | 1.2s | why``)."""
    rows: dict[str, Row] = {}
    for raw in output.splitlines():
        m = _SUMMARY.match(_ANSI.sub("", raw).strip())
        if m is None:
            continue
        name, state, secs, rest = m.groups()
        reason = rest.lstrip("|").strip()
        result = {"PASSED": "pass", "SKIPPED": "n/a"}.get(state, "fail")
        if result == "fail" and not reason:
            reason = state.lower()
        rows[name] = Row(name, result, float(secs), reason)
    return rows


__all__ = ["CAP_MARK", "SUBTESTS", "Row", "SuiteTest", "first_failure", "number_rows", "parse_summary", "rows_of"]
