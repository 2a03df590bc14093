"""kill -9 of a leader broker process in the middle of producing: after it
restarts on the same data directory, every acknowledged record is still
there, exactly once (its store fsyncs every commit before answering)."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from partlog.client import Consumer, Producer, RecordMetadata
from partlog.cluster_meta import StaticMetadata
from partlog.records import TopicIdPartition


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _start(cluster: Path, data: Path, broker_id: int) -> subprocess.Popen[bytes]:
    log = open(data / f"broker-{broker_id}.log", "ab")  # noqa: SIM115 - handed to the child
    return subprocess.Popen(
        [sys.executable, "-m", "partlog.cli", "broker", "--cluster", str(cluster), "--id", str(broker_id),
         "--data-dir", str(data), "--commit-interval-ms", "20"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def _wait_listening(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"broker on port {port} did not start")


@pytest.mark.timeout(180)
def test_leader_killed_mid_commit_loses_no_acknowledged_record(tmp_path: Path) -> None:
    ports = _free_ports(3)
    meta = StaticMetadata.generate(azs=3, brokers_per_az=1, topics={"t": 6})
    [topic] = meta.topics()
    cluster = tmp_path / "cluster.toml"
    lines = [
        f'[[brokers]]\nid = {b.broker_id}\naz = "{b.az}"\nport = {ports[i]}\n' for i, b in enumerate(meta.brokers())
    ]
    lines.append(f'[[topics]]\nname = "t"\nid = "{topic.topic_id}"\nleaders = {list(topic.leaders)}\n')
    cluster.write_text("".join(lines))
    procs = {b: _start(cluster, tmp_path, b) for b in (1, 2, 3)}
    try:
        for b, port in zip((1, 2, 3), ports, strict=True):
            _wait_listening(port, procs[b])

        retries = [0]

        async def main() -> tuple[dict[int, RecordMetadata], dict[int, list[tuple[TopicIdPartition, int]]]]:
            tps = [TopicIdPartition(topic.topic_id, p) for p in range(topic.num_partitions)]
            producer = Producer(("127.0.0.1", ports[0]), az="az1", linger_ms=2, retry_backoff_ms=50)
            await producer.start()
            futures = {}
            for i in range(600):
                futures[i] = producer.send(tps[i % len(tps)], f"r{i}".encode())
                await asyncio.sleep(0.002)
                if i == 200:
                    # Broker 2 leads partitions 1 and 4: kill it while commits flow.
                    procs[2].send_signal(signal.SIGKILL)
                    procs[2].wait(10)
                if i == 350:
                    procs[2] = _start(cluster, tmp_path, 2)
                    await asyncio.to_thread(_wait_listening, ports[1], procs[2])
            await producer.flush()
            acked = {i: f.result() for i, f in futures.items() if not f.cancelled() and f.exception() is None}
            retries[0] = producer.stats["retries"]
            await producer.close()
            consumer = Consumer(("127.0.0.1", ports[0]), max_wait_ms=50)
            await consumer.start()
            consumer.assign(tps)
            end = {tp: 0 for tp in tps}
            for md in acked.values():
                end[md.topic_id_partition] = max(end[md.topic_id_partition], md.offset + 1)
            seen: dict[int, list[tuple[TopicIdPartition, int]]] = {}
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(consumer.positions[tp] < end[tp] for tp in tps):
                for rec in await consumer.poll():
                    seen.setdefault(int((rec.value or b"r-1")[1:]), []).append((rec.topic_id_partition, rec.offset))
            await consumer.close()
            return acked, seen

        acked, seen = asyncio.run(main())
        assert len(acked) > 400  # the retries after the restart succeeded
        assert retries[0] > 0  # the kill was felt: commits to broker 2 failed and were retried
        for i, md in acked.items():
            assert seen.get(i) == [(md.topic_id_partition, md.offset)], f"record {i}: acked {md}, read {seen.get(i)}"
        assert all(len(w) == 1 for w in seen.values()), "a record was stored twice"
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
