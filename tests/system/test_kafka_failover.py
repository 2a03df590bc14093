"""Idempotent Kafka producers (confluent-kafka and kafka-python) in every
AZ, through the front end, while brokers are killed and restarted: what
was acknowledged is read back exactly once and in order per partition."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from typing import Any

import pytest

from partlog.tools.local_cluster import TOPIC
from tests.kafka_helpers import QUICK_FENCING_MS, ClusterThread

confluent_kafka = pytest.importorskip("confluent_kafka")

PARTITIONS = 6
PER_PRODUCER = 1500
KILLS = 3
# Records go out in steps of 50; the kills and restarts are spread over the
# steps (see Pacer), so producing spans them.
STEP = 50
STEPS = PER_PRODUCER // STEP
WAIT_S = 120.0  # bound on any one wait of the pacing


class Pacer:
    """Paces the producers by the kill loop instead of by the clock.

    A producer calls :meth:`step` before each step of records and waits
    until the kill loop has released that step; the kill loop releases a
    share of the steps, waits until every producer has sent them and the
    brokers have served more produce requests, then kills (or restarts) a
    broker: every kill and every restart falls between steps of records in
    flight, on a slow machine as on a fast one."""

    def __init__(self, producers: int) -> None:
        self._cond = threading.Condition()
        self._producers = producers
        self._released = 0
        self._reached: dict[str, int] = {}

    def step(self, name: str, step: int) -> None:
        with self._cond:
            self._reached[name] = step
            self._cond.notify_all()
            assert self._cond.wait_for(lambda: step < self._released, WAIT_S), f"{name}: step {step} never released"

    def release(self, steps: int) -> None:
        with self._cond:
            self._released = steps
            self._cond.notify_all()

    def wait_sent(self) -> None:
        """Until every producer has sent every released step (it waits at
        the first step not released; call before releasing the last one)."""

        def sent() -> bool:
            return len(self._reached) == self._producers and min(self._reached.values()) >= self._released

        with self._cond:
            assert self._cond.wait_for(sent, WAIT_S), f"producers stuck at {self._reached}"


def _wait_served(cluster: ClusterThread, since: int) -> None:
    """Until the live brokers have served produce requests past ``since``."""
    deadline = time.monotonic() + WAIT_S
    while sum(cluster.produce_requests().values()) <= since:
        assert time.monotonic() < deadline, "no produce request was served"
        time.sleep(0.01)


def _confluent_producer(
    bootstrap: str, name: str, az: str, acked: list[tuple[int, int, bytes]], failed: list[Any], pacer: Pacer
) -> None:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": f"{name},diskless_az={az}",
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 120_000,
            "retry.backoff.ms": 100,
        }
    )

    def done(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(err)
        else:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    for i in range(PER_PRODUCER):
        if i % STEP == 0:
            p.poll(0.01)
            pacer.step(name, i // STEP)
        while True:
            try:
                p.produce(TOPIC, value=f"{name}-{i:06d}".encode(), partition=i % PARTITIONS, on_delivery=done)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(180) == 0


def _kafka_python_producer(
    bootstrap: str, name: str, az: str, acked: list[tuple[int, int, bytes]], failed: list[Any], pacer: Pacer
) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(
        bootstrap_servers=bootstrap.split(","),
        client_id=f"{name},diskless_az={az}",
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
        retries=1_000_000,
        delivery_timeout_ms=120_000,
        request_timeout_ms=10_000,
    )
    futures = []
    for i in range(PER_PRODUCER):
        if i % STEP == 0:
            pacer.step(name, i // STEP)
        value = f"{name}-{i:06d}".encode()
        futures.append((value, p.send(TOPIC, value=value, partition=i % PARTITIONS)))
    p.flush(180)
    for value, f in futures:
        try:
            m = f.get(timeout=180)
            acked.append((m.partition, m.offset, value))
        except Exception as e:  # counted: an idempotent producer should not fail here
            failed.append(e)
    p.close()


@pytest.mark.slow
def test_idempotent_kafka_producers_lose_and_duplicate_nothing_while_brokers_die(tmp_path: Any) -> None:
    cluster = ClusterThread(
        str(tmp_path), brokers_per_az=2, partitions=PARTITIONS, broker_session_timeout_ms=QUICK_FENCING_MS
    )
    try:
        acked: dict[str, list[tuple[int, int, bytes]]] = {}
        failed: dict[str, list[Any]] = {}
        threads = []
        producers = (
            ("ck-az1", _confluent_producer, "az1"),
            ("ck-az2", _confluent_producer, "az2"),
            ("kp-az3", _kafka_python_producer, "az3"),
        )
        pacer = Pacer(len(producers))
        for name, fn, az in producers:
            acked[name], failed[name] = [], []
            args = (cluster.bootstrap, name, az, acked[name], failed[name], pacer)
            t = threading.Thread(target=fn, args=args, daemon=True)
            t.start()
            threads.append(t)
        rng = random.Random(7)
        # Steps of records before the first kill, between each kill and its
        # restart, between a restart and the next kill, and after the last.
        shares = 2 * KILLS + 1
        for k in range(2 * KILLS):
            served = sum(cluster.produce_requests().values())
            pacer.release(STEPS * (k + 1) // shares)
            pacer.wait_sent()
            _wait_served(cluster, served)
            if k % 2 == 0:
                victim = rng.choice(sorted(cluster.cluster.brokers))
                cluster.kill(victim)
            else:
                cluster.restart(victim)
        pacer.release(STEPS)
        for t in threads:
            t.join(240)
            assert not t.is_alive()
        assert {n: len(f) for n, f in failed.items()} == dict.fromkeys(failed, 0), failed
        assert {n: len(a) for n, a in acked.items()} == dict.fromkeys(acked, PER_PRODUCER)

        from confluent_kafka import Consumer, TopicPartition

        total = sum(len(a) for a in acked.values())
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "verify", "enable.auto.commit": False})
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        got: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + 120
        high = {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in range(PARTITIONS)}
        while len(got) < sum(high.values()) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append((m.partition() or 0, m.offset() or 0, m.value() or b""))
        c.close()
        counts = Counter(v for _, _, v in got)
        dup = [v for v, n in counts.items() if n > 1]
        assert not dup, f"{len(dup)} records duplicated, e.g. {dup[:3]}"
        at = {(p, o): v for p, o, v in got}
        for name, records in acked.items():
            for p, o, v in records:
                assert at.get((p, o)) == v, f"{name}: acknowledged {v!r} at {p}/{o}, read {at.get((p, o))!r}"
            # In order: a producer's records of a partition sit at rising offsets in send order.
            for part in range(PARTITIONS):
                mine = sorted((o, v) for p, o, v in records if p == part)
                assert [v for _, v in mine] == sorted(v for _, v in mine)
        assert len(got) >= total
        print(f"acknowledged {total}, read {len(got)}, kills {KILLS}")
    finally:
        cluster.close()
