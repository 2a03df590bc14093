"""``partlog status``'s sans-IO core (partlog.tools.cluster_status) and its
walmgr metrics reader: which partitions count as under-replicated, offline,
under min ISR and moving, which brokers are fenced, what is unhealthy, the
table's alignment, and the JSON's keys.  The command against real clusters
is tests/system/test_cluster_status.py."""

from __future__ import annotations

import uuid

from prometheus_client import generate_latest

from partlog.controller.cluster_meta import NO_LEADER, BrokerInfo, PartitionInfo, TopicInfo
from partlog.tools.cluster_status import (
    EXIT_HEALTHY,
    EXIT_UNHEALTHY,
    ControllerStatus,
    render_table,
    summarize,
    to_json,
)
from partlog.tools.walmgr_status import WalmgrStatus, parse_metrics, read_registry
from walmgr.metrics import WalmgrMetrics
from walmgr.registry import Registry

CID = str(uuid.UUID(int=7))
CONTROLLER = ControllerStatus("embedded", "127.0.0.1:9000", True, 12, CID)
NOW_MS = 1_800_000_000_000


def _topic(name: str, parts: list[PartitionInfo]) -> TopicInfo:
    return TopicInfo(uuid.uuid4(), name, tuple(parts))


def _brokers(*ids: int) -> list[tuple[BrokerInfo, bool]]:
    return [(BrokerInfo(i, f"az{i}", "127.0.0.1", 9100 + i, 9200 + i), True) for i in ids]


def test_a_healthy_cluster_exits_0_and_counts_leaders_and_followers() -> None:
    t = _topic("t", [PartitionInfo(1, 0, (1, 2), (1, 2)), PartitionInfo(2, 0, (2, 1), (2, 1))])
    probes = {1: ("ok", "ok"), 2: ("ok", None)}
    s = summarize(CONTROLLER, _brokers(1, 2), [t], probes, [], now_ms=NOW_MS)
    assert s.exit_status == EXIT_HEALTHY and s.problems == ()
    assert [(b.broker_id, b.led, b.followed) for b in s.brokers] == [(1, 1, 1), (2, 1, 1)]
    lines = render_table(s).splitlines()
    assert lines[-1].split() == ["HEALTH", "healthy"]
    assert any(line.startswith("WALMGR") and "unknown" in line for line in lines)
    # The brokers' columns line up: each column starts at the same offset in every row.
    rows = [line for line in lines if line.startswith("  ")]
    assert len({row.index("127.0.0.1") for row in rows[1:]}) == 1 and rows[0].index("address") == rows[1].index("127")


def test_problems_fenced_offline_under_replicated_under_min_isr_and_ports() -> None:
    t = _topic(
        "t",
        [
            PartitionInfo(NO_LEADER, 3, (3, 4), ()),  # offline, under-replicated, under min ISR
            PartitionInfo(1, 0, (1, 3, 4), (1,)),  # under-replicated; under min ISR 2
            PartitionInfo(1, 0, (1,), (1,)),  # one replica: the minimum is min(2, 1)
        ],
    )
    probes = {1: ("ok", "refused")}
    s = summarize(CONTROLLER, _brokers(1), [t], probes, [], min_insync_replicas=2, list_max=1, now_ms=NOW_MS)
    assert s.exit_status == EXIT_UNHEALTHY
    assert s.problems == (
        "broker 3 fenced",
        "broker 4 fenced",
        "broker 1 kafka port refused",
        "1 partition offline",
        "2 partitions under-replicated",
        "2 partitions under min ISR",
    )
    assert (s.offline.count, s.under_replicated.count, s.under_min_isr.count) == (1, 2, 2)
    assert [r.partition for r in s.under_replicated.first] == [0]  # list_max
    fenced = s.brokers[1]
    assert (fenced.broker_id, fenced.alive, fenced.az, fenced.host, fenced.rpc) == (3, False, None, None, None)
    table = render_table(s, verbose=True)
    assert "... 1 more under-replicated" in table and "t-0  leader -1" in table


def test_reassignments_are_reported_not_unhealthy() -> None:
    moving = PartitionInfo(1, 0, (1, 3, 2), (1, 2), adding=(3,), removing=(2,))  # target (1, 3)
    s = summarize(CONTROLLER, _brokers(1, 2, 3), [_topic("m", [moving])], {}, [], now_ms=NOW_MS)
    assert s.exit_status == EXIT_HEALTHY and s.reassigning.count == 1
    j = to_json(s)["reassignments"]
    assert j == {"count": 1, "first": [{"topic": "m", "partition": 0, "leader": 1, "replicas": [1, 3, 2],
                                        "isr": [1, 2], "adding": [3], "removing": [2]}]}  # fmt: skip
    assert "adding [3]  removing [2]" in render_table(s, verbose=True)


def test_json_keys_are_stable() -> None:
    w = WalmgrStatus("registry", "/r", last_cycle_ms=NOW_MS - 5_000, cluster_id=CID, deleted_files=3)
    s = summarize(CONTROLLER, _brokers(1), [], {}, [w], now_ms=NOW_MS)
    j = to_json(s)
    assert list(j) == ["health", "controller", "brokers", "partitions", "reassignments", "walmgr"]
    assert j["health"] == {"exit_status": 0, "status": "healthy", "problems": []}
    assert set(j["brokers"][0]) == {"id", "alive", "az", "host", "port", "kafka_port", "led", "followed", "rpc",
                                    "kafka"}  # fmt: skip
    assert set(j["partitions"]) == {"total", "min_insync_replicas", "under_replicated", "offline", "under_min_isr"}
    [wj] = j["walmgr"]
    assert wj["last_cycle_age_s"] == 5.0 and wj["last_cycle"] == "2027-01-15T07:59:55Z"
    assert wj["counts_since"] == "registry created" and wj["deleted_files"] == 3 and wj["cycles"] is None


def test_walmgr_of_another_cluster_or_unreadable_is_unhealthy() -> None:
    other = WalmgrStatus("registry", "/r", cluster_id=str(uuid.UUID(int=8)))
    broken = WalmgrStatus("metrics", "http://127.0.0.1:1/", error="Connection refused")
    s = summarize(CONTROLLER, _brokers(1), [], {}, [other, broken], now_ms=NOW_MS)
    assert s.problems == (
        f"walmgr /r belongs to cluster {uuid.UUID(int=8)}",
        "walmgr http://127.0.0.1:1/: Connection refused",
    )


def test_walmgr_metrics_page_is_read() -> None:
    reg = Registry.__new__(Registry)  # counts() only: no environment needed
    reg.counts = lambda: {}  # type: ignore[method-assign]
    m = WalmgrMetrics(reg, lambda: NOW_MS - 2_000, lambda: NOW_MS)
    m.cycles.inc(4)
    m.deleted_files.inc(10)
    m.kept_doubt.inc(2)
    m.cycle_errors.inc(1)
    w = parse_metrics("http://x/", generate_latest(m.prom).decode(), NOW_MS)
    assert w.error == "" and (w.cycles, w.deleted_files, w.kept_doubt, w.cycle_errors) == (4, 10, 2, 1)
    assert w.last_cycle_ms == NOW_MS - 2_000 and w.tracked == 0
    assert parse_metrics("u", "other_total 1\n", NOW_MS).error == "no walmgr_cycles_total: not walmgr's metrics"
    assert parse_metrics("u", "{{{ not prometheus", NOW_MS).error.startswith("not Prometheus text")


def test_walmgr_registry_is_read(tmp_path: object) -> None:
    path = str(tmp_path)
    with Registry(path) as reg:
        reg.meta_set("last_cycle_ms", str(NOW_MS))
        reg.bind_cluster(uuid.UUID(CID))
    w = read_registry(path)  # beside a writer in another process: tests/system/test_cluster_status.py
    assert (w.error, w.last_cycle_ms, w.cluster_id, w.deleted_files, w.tracked) == ("", NOW_MS, CID, 0, 0)
    assert w.last_cycle is None  # a registry of a walmgr that kept no summary
    missing = read_registry(path + "/none")
    assert missing.error == "no walmgr registry here (data.mdb missing)"


def test_walmgr_last_cycle_summary_is_read_and_checked(tmp_path: object) -> None:
    from walmgr.cycle_report import LAST_CYCLE_META, CycleReport
    from walmgr.deleter import DeleteReport

    report = CycleReport(started_ms=NOW_MS, candidates=5, referenced_count=3, doubt_count=1)
    report.deleted = DeleteReport(deleted_files=1)
    path = str(tmp_path)
    with Registry(path) as reg:
        reg.meta_set(LAST_CYCLE_META, report.summary())
    got = read_registry(path).last_cycle
    assert got == {"candidates": 5, "kept_referenced": 3, "kept_doubt": 1, "deleted_files": 1,
                   "delete_failures": 0, "scan_error": ""}  # fmt: skip
    for bad in ({"candidates": -1}, [1, 2], {**report.summary(), "kept_doubt": "x"}):
        with Registry(path) as reg:
            reg.meta_set(LAST_CYCLE_META, bad)
        assert read_registry(path).last_cycle is None


def test_walmgr_registry_named_by_its_config_file_or_undecodable(tmp_path: object) -> None:
    path = str(tmp_path)
    with Registry(f"{path}/reg") as reg:
        reg.meta_set("last_cycle_ms", "not a time")
    config = f"{path}/walmgr.toml"
    with open(config, "w") as f:
        f.write(f'store = "file://{path}/objects"\nregistry = "{path}/reg"\nmetadata = "controller://127.0.0.1:1"\n')
    w = read_registry(config)
    assert w.where == config and w.error == "invalid literal for int() with base 10: 'not a time'"
