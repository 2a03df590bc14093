"""walmgr's RPC client takes the same TLS options as the brokers (issue 13):
with mutual TLS it reaches only brokers holding a certificate of the
cluster's CA, and a walmgr without one is refused and deletes nothing."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from partlog.broker.server import Broker, BrokerConfig
from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.produce.pipeline import ProduceConfig
from partlog.replication.config import ReplicationConfig
from partlog.runtime import SYSTEM_CLOCK, SkewedClock
from partlog.wal.localdir_store import LocalDirStore
from tests.cluster_helpers import topic_partitions
from tests.tls_certs import client_context, server_context
from tests.unit.test_walmgr_tls_options import DEADLINE_MS, _config
from tests.walmgr_helpers import listed, orphan
from walmgr.daemon import Walmgr

GATE_S = (DEADLINE_MS + 200) / 1000


@pytest.mark.timeout(120)
def test_walmgr_checks_references_over_mutual_tls(tmp_path: Path, certs: Path) -> None:
    objects = LocalDirStore(tmp_path / "objects", fsync=False)

    async def main() -> None:
        meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1})
        cfg = BrokerConfig(
            1,
            "az1",
            str(tmp_path / "broker-1"),
            produce=ProduceConfig(commit_interval_ms=20),
            sync=False,
            commit_deadline_ms=DEADLINE_MS,
            replication=ReplicationConfig(release_grace_ms=0),  # walmgr deletes at once
            server_ssl=server_context(certs, mutual=True),
            client_ssl=client_context(certs, with_cert=True),
        )
        clock = SkewedClock(SYSTEM_CLOCK)  # jumps past the age gate (no sleep)
        broker = Broker(cfg, meta, objects, clock=clock)
        await broker.start()
        try:
            meta = meta.with_ports({1: broker.port})
            broker.set_metadata(meta)
            [tp] = topic_partitions(meta)
            [r] = await broker.produce([(tp, build_record_batch([(None, b"live", int(time.time() * 1000))]))], acks=1)
            assert r.error == Errors.NONE
            live = set(broker.store.file_usage())
            dead = orphan(objects, [tp], cluster_id=meta.cluster_id)
            clock.skew_ms += round((GATE_S + 0.2) * 1000)

            # Without a certificate: the broker refuses the connection, every
            # check is a doubt, nothing is deleted.
            plain = Walmgr(_config(tmp_path, "registry-plain"), store=objects, metadata=meta, clock=clock)
            await plain.start()
            try:
                report = await plain.cycle()
                assert report.planned == [] and dead in report.doubt, report.doubt
            finally:
                await plain.stop()
            assert {dead} | live <= listed(objects)

            # With the cluster's CA and a client certificate (config keys).
            tls = {
                "tls_ca_file": str(certs / "ca.crt"),
                "tls_cert_file": str(certs / "client.crt"),
                "tls_key_file": str(certs / "client.key"),
            }
            mgr = Walmgr(_config(tmp_path, "registry-tls", **tls), store=objects, metadata=meta, clock=clock)
            await mgr.start()
            try:
                report = await mgr.cycle()
                assert report.planned == [dead], (report.planned, report.doubt)
            finally:
                await mgr.stop()
            assert live <= listed(objects) and dead not in listed(objects)
        finally:
            await broker.stop()

    asyncio.run(main())
