"""create_topics over the embedded controller's RPC: manual assignments and
their refusals with Kafka's messages travel at RPC version 3; a controller
of an older version gets no assignments (its topics are UNSUPPORTED_VERSION
here, the rest of the request is created); a call's timeout is the one the
caller passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from partlog.controller.cluster_meta import TopicInfo
from partlog.controller.rules import Refused
from partlog.controller.server import ControllerServer
from partlog.kafka.errors import Errors
from tests.integration.test_controller_rpc import client, run, until
from tests.unit.test_controller import config


@pytest.mark.timeout(60)
def test_assignments_over_rpc_and_an_older_controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        server = ControllerServer(config(tmp_path / "ctl"), secret=b"s3cret")
        await server.start()
        brokers = [client(server, b) for b in (1, 2, 3)]
        admin = client(server, None)
        try:
            for b in brokers:
                await b.start()
            await admin.start()
            await until(lambda: len(admin.brokers()) == 3, "three brokers")
            out = await admin.create_topics(
                {"placed": (-1, -1), "twice": (-1, -1), "plain": (1, 1)},
                assignments={"placed": [(0, (3, 1)), (1, (1, 2))], "twice": [(0, (2, 2))]},
                timeout_ms=10_000,
            )
            placed = out["placed"]
            assert isinstance(placed, TopicInfo)
            assert [(p.leader, p.replicas) for p in placed.partitions] == [(3, (3, 1)), (1, (1, 2))]
            assert out["twice"] == Refused(
                Errors.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes the broker 2 more than once.",
            )
            assert isinstance(out["plain"], TopicInfo)

            async def version_two() -> int:
                return 2

            # The connection's negotiated version is the input here: a version 2 controller.
            monkeypatch.setattr(admin, "_controller_version", version_two)
            older = await admin.create_topics(
                {"placed-2": (-1, -1), "plain-2": (1, 1)}, assignments={"placed-2": [(0, (1,))]}
            )
            refused = older["placed-2"]
            assert isinstance(refused, Refused) and refused.error == Errors.UNSUPPORTED_VERSION
            assert isinstance(older["plain-2"], TopicInfo)
            assert admin.topic("placed-2") is None
        finally:
            for c in (*brokers, admin):
                await c.stop()
            await server.stop()

    run(main)
