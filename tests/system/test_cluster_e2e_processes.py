"""End-to-end runs outside this process: ``partlog cluster`` on S3 (SeaweedFS),
and a broker process killed with SIGKILL loses no acknowledged record (the
in-process cluster runs are in tests/integration/test_cluster_e2e.py)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.records import TopicIdPartition
from partlog.tools.cluster_options import ClusterOptions
from partlog.tools.cluster_run import run
from partlog.wal.s3_store import S3Store
from tests.cluster_helpers import (
    Sent,
    broker_addr,
    check_cluster_result,
    check_exactly_once,
    consume_all,
    free_ports,
    produce,
    producer_in,
    start_broker_process,
    stop_processes,
    topic_partitions,
    wait_listening,
    write_cluster_toml,
)
from tests.s3server import ACCESS_KEY_ID, SECRET_ACCESS_KEY


@pytest.mark.timeout(180)
def test_cluster_run_on_s3(tmp_path: Path, seaweedfs: str, s3_bucket: S3Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # A store URL carries no credentials: boto3's standard chain reads them
    # from the environment.  Only these, not whatever the machine has.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    url = f"s3://{s3_bucket.bucket}?" + urllib.parse.urlencode({"endpoint": seaweedfs})
    opts = ClusterOptions(
        azs=3,
        brokers_per_az=1,
        partitions=6,
        producers_per_az=1,
        rate_per_producer=100,
        duration_s=1.5,
        data_dir=str(tmp_path),
        store_url=url,
        commit_interval_ms=100,
    )
    r = asyncio.run(run(opts))
    assert s3_bucket.bucket in r["store"]
    check_cluster_result(r, azs=3)
    # The WAL files really are in the bucket (and not in a local directory).
    page = s3_bucket.list_page("wal/")
    assert page.objects
    assert not (tmp_path / "objects").exists()


@pytest.mark.timeout(180)
def test_broker_process_killed_with_sigkill_loses_no_acknowledged_record(tmp_path: Path) -> None:
    """Three ``partlog broker`` processes (sync: the store fsyncs before a
    commit is answered).  Broker 2 leads partitions 1 and 4 and is the
    representative of az2's producer: it is killed with SIGKILL while both
    producers send, restarted on the same data dir and port, and producing
    goes on (twice).  Every acknowledged record survives, exactly once."""
    meta = StaticMetadata.generate(azs=3, brokers_per_az=1, topics={"t": 6})
    ports = dict(zip((1, 2, 3), free_ports(3), strict=True))
    meta = meta.with_ports(ports)
    cluster = tmp_path / "cluster.toml"
    write_cluster_toml(cluster, meta, ports)
    store_url = "file://" + str(tmp_path / "objects")
    victim = 2
    assert [p for p, leader in enumerate(meta.topics()[0].leaders) if leader == victim] == [1, 4]

    def start(broker_id: int) -> subprocess.Popen[bytes]:
        return start_broker_process(
            cluster, tmp_path, broker_id, store_url=store_url, extra=["--commit-interval-ms", "20"]
        )

    procs = {b: start(b) for b in ports}
    # Twice: the second kill hits a broker that restarted with retries pending.
    kill_at, restart_at = (100, 250), (150, 300)
    events: list[str] = []
    try:
        for b, port in ports.items():
            wait_listening(port, procs[b])

        async def main() -> tuple[Sent, dict[Any, Any], int]:
            tps = topic_partitions(meta)
            producers = [producer_in(meta, "az1", retry_backoff_ms=50), producer_in(meta, "az2", retry_backoff_ms=50)]
            for p in producers:
                await p.start()

            async def during(i: int) -> None:
                if i in kill_at:
                    procs[victim].send_signal(signal.SIGKILL)
                    await asyncio.to_thread(procs[victim].wait, 10)
                    events.append(f"killed at {i}")
                elif i in restart_at:
                    procs[victim] = start(victim)
                    await asyncio.to_thread(wait_listening, ports[victim], procs[victim])
                    events.append(f"restarted at {i}")

            try:
                sent = await produce(producers, tps, 400, every=5, pause_s=0.01, during=during)
                retries = sum(p.stats["retries"] for p in producers)
            finally:
                for p in producers:
                    await p.close()
            return sent, await consume_all(broker_addr(meta, 1), tps, sent), retries

        sent, seen, retries = asyncio.run(main())
        assert events == ["killed at 100", "restarted at 150", "killed at 250", "restarted at 300"]
        assert procs[victim].poll() is None, "the restarted broker must still run"
        assert retries > 0, "the kill must have been felt"
        check_exactly_once(sent, seen)
        # Producing went on after the restart, also to the victim's partitions.
        [topic] = meta.topics()
        victim_tps = {TopicIdPartition(topic.topic_id, p) for p in (1, 4)}
        late = [md for (_, seq), md in sent.acked.items() if seq > 300 and md.topic_id_partition in victim_tps]
        assert late
        assert len(sent.acked) > len(sent.all_keys) // 2
    finally:
        stop_processes(list(procs.values()))
