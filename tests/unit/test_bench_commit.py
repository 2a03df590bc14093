"""``partlog bench commit``'s cases report what they measured, CPU included
(docs/design/commit-path.md); nothing here asserts a timing."""

from __future__ import annotations

from pathlib import Path

import pytest

from partlog.tools.bench_commit import BATCHES_PER_COMMIT, run_case


@pytest.mark.parametrize(("committers", "idempotent"), [(1, False), (2, True)])
def test_a_case_commits_every_call_and_reports_its_cpu(tmp_path: Path, committers: int, idempotent: bool) -> None:
    r = run_case(
        str(tmp_path),
        sync=False,
        committers=committers,
        idempotent=idempotent,
        commits=8,
        raw_puts_per_s=1.0,
        journal_ceiling_batches_per_s=1.0,
        partitions=64,
        checkpoint_thread=committers > 1,
    )
    assert r.commits == 8 and r.batches == 8 * BATCHES_PER_COMMIT
    assert 1 <= r.group_commits <= 8
    assert r.cpu_us_per_batch > 0 and r.cpu_per_wall > 0
