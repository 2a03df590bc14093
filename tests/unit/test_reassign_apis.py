"""AlterPartitionReassignments and ListPartitionReassignments on the Kafka
front end (partlog.kafka_front.reassign_apis), with the embedded core
behind the controller RPC's bodies as the server takes them (msgpack, the
method's schema, the decoder): the checks made before the controller is
asked, the cluster ACLs, and hostile requests that fail only their own
partitions.  Real clients: tests/system/test_kafka_reassignments.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog.acl import AclBinding, AclOperation, AclPermission, AuthorizerConfig, PatternType, ResourceType
from partlog.acl.source import LocalAcls
from partlog.controller.core import Controller
from partlog.controller.reassignment import (
    Reassignment,
    ReassignmentAdmin,
    dec_alter_reassignments,
    dec_alter_reassignments_response,
    enc_alter_reassignments,
    enc_alter_reassignments_response,
    listed,
)
from partlog.controller.rules import Refused
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.kafka_front.apis import SUPPORTED_VERSIONS
from partlog.kafka_front.authz import Authz
from partlog.kafka_front.codec import build, response_class
from partlog.kafka_front.handler import Session
from partlog.kafka_front.reassign_apis import ReassignApis
from partlog.limits import BROKERS_MAX
from partlog.rpc.methods import CONTROLLER_SCHEMAS
from tests.unit.test_controller import config, create, register


class _CoreAdmin:
    """The embedded core asked through the RPC's bodies, and a broker view of it."""

    def __init__(self, c: Controller) -> None:
        self.c = c
        self.asked: list[dict[tuple[str, int], tuple[int, ...] | None]] = []

    async def alter_reassignments(
        self, changes: Mapping[tuple[str, int], tuple[int, ...] | None]
    ) -> dict[tuple[str, int], Refused | None]:
        body = msgpack.unpackb(msgpack.packb(enc_alter_reassignments(changes)))
        CONTROLLER_SCHEMAS["alter_reassignments"].check(body, "alter_reassignments")
        wanted = dec_alter_reassignments(body)
        self.asked.append(dict(wanted))
        answer = self.c.alter_reassignments(wanted)
        return dec_alter_reassignments_response(
            msgpack.unpackb(msgpack.packb(enc_alter_reassignments_response(0, answer)))
        )[1]

    async def list_reassignments(self, partitions: Iterable[tuple[str, int]] | None) -> list[Reassignment]:
        return listed(self.c.snapshot().topics, partitions)

    def partition(self, tp: TopicIdPartition) -> Any:
        return self.c.partition(tp)


def _apis(c: Controller) -> tuple[ReassignApis, _CoreAdmin]:
    admin = _CoreAdmin(c)
    assert isinstance(admin, ReassignmentAdmin)
    index = {t.name: (t.topic_id, t.num_partitions) for t in c.snapshot().topics}
    return ReassignApis(SimpleNamespace(metadata=admin, topic_index=index)), admin


def _body(parts: list[tuple[str, int, list[int] | None]], allow_rf_change: bool = True) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for name, i, target in parts:
        by_topic.setdefault(name, []).append(
            SimpleNamespace(partition_index=i, replicas=None if target is None else tuple(target))
        )
    topics = [SimpleNamespace(name=n, partitions=ps) for n, ps in by_topic.items()]
    return SimpleNamespace(topics=topics, timeout=30_000, allow_replication_factor_change=allow_rf_change)


def _alter(apis: ReassignApis, body: Any, version: int = 1, session: Any = None) -> Any:
    req = SimpleNamespace(api_version=version)
    return asyncio.run(apis.alter_partition_reassignments(req, body, session or SimpleNamespace()))  # type: ignore[arg-type]


def _codes(out: Any) -> dict[tuple[str, int], int]:
    return {(t["name"], p["partition_index"]): p["error_code"] for t in out["responses"] for p in t["partitions"]}


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Controller]:
    c = Controller(config(tmp_path / "c"), now_ms=0)
    register(c, [1, 2, 3, 4])
    create(c, "t", 3, 2)
    yield c
    c.close()


def test_checks_before_the_controller_and_kafkas_codes_after(core: Controller) -> None:
    apis, admin = _apis(core)
    t = core.topic("t")
    assert t is not None
    reps = list(t.partitions[0].replicas)
    free = next(b for b in (1, 2, 3, 4) if b not in reps)
    asked = [("t", 0, reps), ("t", 0, None), ("bad name", 0, reps), ("t", 1, [1, 2, 3, 4]), ("t", 2, [9999, 9998]),
             ("t", 7, reps), ("nope", 0, reps)]  # fmt: skip
    out = _alter(apis, _body(asked, allow_rf_change=False))
    assert _codes(out) == {
        ("t", 0): Errors.INVALID_REQUEST,  # named twice: every copy
        ("bad name", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION,
        ("t", 1): Errors.INVALID_REPLICA_ASSIGNMENT,  # KIP-860: RF 2 -> 4 refused here
        ("t", 2): Errors.INVALID_REPLICA_ASSIGNMENT,  # the controller: not registered
        ("t", 7): Errors.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert out["allow_replication_factor_change"] is False and out["error_code"] == 0
    assert set(admin.asked[0]) == {("t", 2), ("t", 7), ("nope", 0)}
    # A move, listed, then cancelled; a cancel with nothing in progress.
    moved = _alter(apis, _body([("t", 0, [free, reps[1]])]))
    assert _codes(moved) == {("t", 0): 0}
    listing = asyncio.run(apis.list_partition_reassignments(SimpleNamespace(), SimpleNamespace(topics=None),
                                                            SimpleNamespace()))  # type: ignore[arg-type]  # fmt: skip
    [lt] = listing["topics"]
    assert lt["partitions"] == [{"partition_index": 0, "replicas": [free, reps[1], reps[0]], "adding_replicas": [free],
                                 "removing_replicas": [reps[0]]}]  # fmt: skip
    assert _codes(_alter(apis, _body([("t", 0, None)]))) == {("t", 0): 0}
    assert _codes(_alter(apis, _body([("t", 0, None)]))) == {("t", 0): Errors.NO_REASSIGNMENT_IN_PROGRESS}
    core.check()
    # Every version encodes the answers.
    for version in range(SUPPORTED_VERSIONS[45][0], SUPPORTED_VERSIONS[45][1] + 1):
        built = build(response_class(45, version), _alter(apis, _body([("t", 0, None)]), version))
        assert len(built.responses) == 1
    assert len(build(response_class(46, 0), listing).topics) == 1


def test_the_cluster_acls_decide_first(core: Controller) -> None:
    """ALTER on the cluster to move, DESCRIBE to list; without it the
    whole answer and every partition are CLUSTER_AUTHORIZATION_FAILED and
    the controller is not asked."""
    source = LocalAcls()
    describe = AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:ANONYMOUS", "*",
                          AclOperation.DESCRIBE, AclPermission.ALLOW)  # fmt: skip
    asyncio.run(source.create_acls([describe]))
    apis, admin = _apis(core)
    apis.authz = Authz(AuthorizerConfig(), source)
    who = Session("10.0.0.7:1")
    out = _alter(apis, _body([("t", 0, [1]), ("t", 1, None)]), session=who)
    assert out["error_code"] == Errors.CLUSTER_AUTHORIZATION_FAILED
    assert set(_codes(out).values()) == {Errors.CLUSTER_AUTHORIZATION_FAILED} and not admin.asked
    listing = asyncio.run(apis.list_partition_reassignments(SimpleNamespace(), SimpleNamespace(topics=None), who))
    assert listing["error_code"] == 0


_targets = st.one_of(
    st.none(),
    st.lists(st.integers(-(2**31), 2**31 - 1) | st.integers(-1, 5), max_size=6),
    st.just([1] * (BROKERS_MAX + 1)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hostile=st.lists(st.tuples(st.sampled_from(["t", "nope", ""]), st.integers(-3, 5), _targets), max_size=6))
def test_hostile_requests_fail_only_their_partitions(core: Controller, hostile: list[Any]) -> None:
    """Any names, indexes and targets: each partition gets its own answer,
    a good move beside them starts, and the controller's invariants hold."""
    apis, _ = _apis(core)
    before = core.topic("t")
    assert before is not None
    good = ("t", 2, list(reversed(before.partitions[2].replicas)))  # a reorder completes at once
    out = _alter(apis, _body([*[h for h in hostile if h[:2] != ("t", 2)], good]))
    codes = _codes(out)
    assert codes[("t", 2)] == 0
    assert len(codes) == len({(n, i) for n, i, _ in hostile if (n, i) != ("t", 2)}) + 1
    core.check()
    for name, i, _ in hostile:
        if name != "t" or not 0 <= i < 3:
            assert codes[(name, i)] != 0
