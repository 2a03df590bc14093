"""An etcd metadata session's counters as broker metrics (read at scrape
time): each name present, counters as ``_total``, the gap as a gauge; a
source without a session reports zeros."""

from __future__ import annotations

from prometheus_client import generate_latest

from partlog.broker.metrics import BrokerMetrics
from partlog.controller.etcd_meta import EtcdMetadata


def test_the_session_counters_are_scraped() -> None:
    m = BrokerMetrics(1, lambda: 0.0, 1, lambda: 0.0, 1, lambda: 0.0)
    stats = {"registrations": 2.0, "duplicate_waits": 0.0, "keepalives": 17.0, "keepalive_retries": 3.0,
             "keepalive_refuted": 1.0, "keepalive_gap_s_max": 4.5}  # fmt: skip
    m.watch_metadata_session(lambda: stats)
    text = generate_latest(m.registry).decode()
    for line in ("partlog_etcd_registrations_total 2.0", "partlog_etcd_keepalives_total 17.0",
                 "partlog_etcd_keepalive_retries_total 3.0", "partlog_etcd_keepalive_refuted_total 1.0",
                 "partlog_etcd_duplicate_waits_total 0.0", "partlog_etcd_keepalive_gap_seconds_max 4.5"):  # fmt: skip
        assert line in text, line
    stats["keepalives"] = 18.0
    assert "partlog_etcd_keepalives_total 18.0" in generate_latest(m.registry).decode()


def test_a_view_without_a_session_reports_zeros() -> None:
    view = EtcdMetadata("etcd://127.0.0.1:1/p")  # never started: no connection, no session
    assert set(view.session_stats().values()) == {0.0} and len(view.session_stats()) == 6
