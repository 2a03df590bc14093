"""EtcdCluster: a real 3-member etcd cluster on 127.0.0.1 (Debian's etcd-server)."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

if shutil.which("etcd") is None:
    pytest.skip("etcd not installed (apt-get install etcd-server)", allow_module_level=True)

from partlog.tools.etcd_launcher import EtcdCluster

# A new leader needs one election timeout (1 s here) plus a vote round;
# generous so a loaded CI machine does not flake.
NEW_LEADER_WAIT_S = 10.0
POLL_INTERVAL_S = 0.05

pytestmark = pytest.mark.timeout(60)


def wait_for(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() >= deadline:
            pytest.fail(f"{what} not within {timeout_s:.0f} s")
        time.sleep(POLL_INTERVAL_S)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[EtcdCluster]:
    with EtcdCluster(str(tmp_path / "etcd")) as c:
        yield c


def test_start_health_and_leader(cluster: EtcdCluster) -> None:
    assert all(cluster.alive(i) for i in range(3))
    # start() waited for a majority only; the third follows shortly.
    wait_for(lambda: all(cluster.healthy(i) for i in range(3)), NEW_LEADER_WAIT_S, "all members healthy")
    wait_for(lambda: cluster.leader() is not None, NEW_LEADER_WAIT_S, "a leader")
    assert cluster.leader() in (0, 1, 2)


def test_kill_leader_then_restart(cluster: EtcdCluster) -> None:
    wait_for(lambda: cluster.leader() is not None, NEW_LEADER_WAIT_S, "a leader")
    old = cluster.leader()
    assert old is not None
    cluster.kill(old)
    assert not cluster.alive(old)

    def new_leader() -> bool:
        leader = cluster.leader()
        return leader is not None and leader != old

    wait_for(new_leader, NEW_LEADER_WAIT_S, "a new leader")

    cluster.restart(old)
    assert cluster.alive(old)
    assert cluster.healthy(old)
    assert cluster.leader() in (0, 1, 2)


def test_stop_all_members_then_restart_all(cluster: EtcdCluster) -> None:
    cluster.stop_all_members()
    assert not any(cluster.alive(i) for i in range(3))
    assert cluster.leader() is None
    cluster.restart_all()
    assert all(cluster.alive(i) for i in range(3))
    assert sum(cluster.healthy(i) for i in range(3)) >= 2
    wait_for(lambda: cluster.leader() is not None, NEW_LEADER_WAIT_S, "a leader after restart_all")


def test_close_is_idempotent(tmp_path: Path) -> None:
    c = EtcdCluster(str(tmp_path / "etcd"))
    c.start()
    c.close()
    assert not any(c.alive(i) for i in range(3))
    c.close()


def test_url_shape(tmp_path: Path) -> None:
    # Ports are picked in the constructor: no need to start the cluster.
    c = EtcdCluster(str(tmp_path / "etcd"))
    eps = c.endpoints()
    assert len(eps) == 3
    assert all(host == "127.0.0.1" for host, _ in eps)
    assert len({port for _, port in eps}) == 3
    url = c.url()
    assert re.fullmatch(r"etcd://127\.0\.0\.1:\d+,127\.0\.0\.1:\d+,127\.0\.0\.1:\d+/partlog", url)
    assert url == "etcd://" + ",".join(f"{h}:{p}" for h, p in eps) + "/partlog"
    assert c.url("/x/y").endswith("/x/y")
    with pytest.raises(ValueError):
        c.url("partlog")
