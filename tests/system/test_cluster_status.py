"""``partlog status`` (docs/design/status.md) as an operator runs it: a
subprocess against a running cluster on the embedded controller and on
etcd.  Healthy, it exits 0 with every broker alive and answering; after a
broker is killed, exit 1 with that broker fenced and its partitions
under-replicated; walmgr's registry and metrics endpoint are read; a
controller that does not answer, or of another cluster, is one line and
exit 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from partlog.tools.local_cluster import LocalCluster, free_ports
from tests.kafka_helpers import QUICK_FENCING_MS, ClusterThread
from walmgr.config import WalmgrConfig
from walmgr.daemon import Walmgr

_ETCD = pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is not installed")
# Bounds on the waits: generous on a 2-core machine; a test that needs them has failed.
WAIT_S = 60.0


def _status(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "partlog", "status", *args], capture_output=True, text=True, timeout=120
    )


def _target(c: LocalCluster) -> list[str]:
    if c.controller is not None:
        return ["--controller", f"127.0.0.1:{c.controller.port}"]
    return ["--metadata", c.etcd_url]


def _json(*args: str) -> tuple[int, dict[str, Any]]:
    r = _status(*args, "--json")
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)


@pytest.fixture(params=["embedded", pytest.param("etcd", marks=_ETCD)])
def cluster(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[ClusterThread]:
    metadata = "" if request.param == "embedded" else "etcd"
    c = ClusterThread(
        str(tmp_path), partitions=3, brokers_per_az=1, metadata=metadata, broker_session_timeout_ms=QUICK_FENCING_MS
    )
    try:
        yield c
    finally:
        c.close()


def _walmgr(c: ClusterThread, data_dir: str) -> tuple[Walmgr, int]:
    """A walmgr on the cluster's store with a metrics endpoint, one cycle done."""
    [metrics_port] = free_ports(1)
    lc = c.cluster
    cfg = WalmgrConfig.for_cli(
        "file://" + os.path.abspath(os.path.join(lc.data_dir, "objects")),
        data_dir,
        metrics_port=metrics_port,
        metadata=f"controller://127.0.0.1:{lc.controller.port}" if lc.controller else lc.etcd_url,
    )
    mgr = Walmgr(cfg, store=lc.objects)
    c.call(mgr.start())
    c.call(mgr.cycle())
    return mgr, metrics_port


def test_status_healthy_then_a_broker_killed(cluster: ClusterThread, tmp_path: Any) -> None:
    lc = cluster.cluster
    target = _target(lc)
    registry = str(tmp_path / "walmgr")
    mgr, metrics_port = _walmgr(cluster, registry)
    try:
        walmgr = ["--walmgr", registry, "--walmgr", f"http://127.0.0.1:{metrics_port}/"]
        rc, s = _json(*target, *walmgr)
        assert rc == 0 and s["health"] == {"exit_status": 0, "status": "healthy", "problems": []}
        assert s["controller"]["answered"] and s["controller"]["kind"] == ("embedded" if lc.controller else "etcd")
        assert s["controller"]["cluster_id"] == str(lc.admin.cluster_id if lc.admin else None)
        if lc.controller is None:
            assert s["controller"]["acting_broker"] in (1, 2, 3)
        assert [(b["id"], b["alive"], b["rpc"], b["kafka"]) for b in s["brokers"]] == [
            (i, True, "ok", "ok") for i in (1, 2, 3)
        ]
        assert sum(b["led"] for b in s["brokers"]) == 3 and sum(b["followed"] for b in s["brokers"]) == 6
        p = s["partitions"]
        assert p["total"] == 3 and p["under_replicated"]["count"] == p["offline"]["count"] == 0
        assert s["reassignments"] == {"count": 0, "first": []}
        by_source = {w["source"]: w for w in s["walmgr"]}
        assert set(by_source) == {"registry", "metrics"}
        for w in by_source.values():
            assert w["error"] == "" and w["last_cycle_ms"] is not None
        assert by_source["registry"]["cluster_id"] == s["controller"]["cluster_id"]
        assert by_source["metrics"]["cycles"] == 1 and by_source["metrics"]["cycle_errors"] == 0

        table = _status(*target, "-v")
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert lines[0].startswith("CONTROLLER") and lines[-1].split() == ["HEALTH", "healthy"]
        assert any(line.startswith("WALMGR") and "unknown" in line for line in lines)

        other = _status(*target, "--cluster-id", "00000000-0000-0000-0000-000000000001")
        assert other.returncode == 2 and len(other.stderr.splitlines()) == 1 and "belongs to cluster" in other.stderr

        cluster.kill(3)
        admin = lc.admin
        assert admin is not None

        def fenced() -> bool:
            ids = {b.broker_id for b in admin.brokers()}
            if lc.controller is None:
                ids = {i for i in ids if admin.view.accepted(i)}  # type: ignore[union-attr]
            parts = [p for t in admin.topics() for p in t.partitions]
            return 3 not in ids and all(3 not in p.isr for p in parts)

        assert cluster.call(admin.wait_for(fenced, WAIT_S), WAIT_S + 5)
        rc, s = _json(*target, "--walmgr", registry)
        assert rc == 1, s
        b3 = s["brokers"][2]
        assert b3["id"] == 3 and not b3["alive"] and b3["led"] == 0 and b3["followed"] == 3
        assert "broker 3 fenced" in s["health"]["problems"]
        assert s["partitions"]["under_replicated"]["count"] == 3
        assert all(3 not in r["isr"] and 3 in r["replicas"] for r in s["partitions"]["under_replicated"]["first"])
        assert s["partitions"]["offline"]["count"] == 0
        assert all(b["alive"] and b["rpc"] == "ok" for b in s["brokers"][:2])

        table = _status(*target, "-v", "--list-max", "1")
        assert table.returncode == 1
        assert "under-replicated" in table.stdout and "... 2 more under-replicated" in table.stdout
        assert table.stdout.splitlines()[-1].startswith("HEALTH") and "broker 3 fenced" in table.stdout
    finally:
        cluster.call(mgr.stop())


def test_a_controller_that_does_not_answer_is_one_line_and_exit_2() -> None:
    [port] = free_ports(1)
    r = _status("--controller", f"127.0.0.1:{port}", "--timeout-ms", "300")
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"partlog status: controller 127.0.0.1:{port}: no snapshot within 300 ms")
    rc, s = _json("--controller", f"127.0.0.1:{port}", "--timeout-ms", "300")
    assert rc == 2 and s["health"]["status"] == "unreachable" and not s["controller"]["answered"]
    for args in (["--controller", "no-port"], [], ["--controller", "h:1", "--metadata", "etcd://h:2"]):
        r = _status(*args)
        assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr, args
