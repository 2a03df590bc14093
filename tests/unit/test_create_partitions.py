"""CreatePartitions without a cluster: the embedded controller's core (placement as
for new topics, Kafka's refusals and messages, persistence, validate_only),
the etcd view growing a topic without losing its partitions' states, the
controller RPC's bodies, and hostile requests through the Kafka front end's
handler costing bounded work and failing only their own topic.  Real clients
against real clusters: tests/system/test_kafka_create_partitions.py."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog.acl import AclBinding, AclOperation, AclPermission, AuthorizerConfig, PatternType, ResourceType
from partlog.acl.source import LocalAcls
from partlog.controller.cluster_meta import NO_LEADER, PartitionInfo, TopicInfo
from partlog.controller.core import Controller
from partlog.controller.etcd_layout import KV, EtcdView, Keys, enc_part, enc_topic
from partlog.controller.partition_admin import (
    ASSIGNMENT_ITEMS_PER_REQUEST_MAX,
    NewPartitions,
    PartitionAdmin,
    dec_create_partitions,
    dec_create_partitions_response,
    enc_create_partitions,
    enc_create_partitions_response,
)
from partlog.controller.rules import Refused, assign_replicas
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.kafka_front.apis import SUPPORTED_VERSIONS
from partlog.kafka_front.authz import Authz
from partlog.kafka_front.codec import build, response_class
from partlog.kafka_front.handler import Session
from partlog.kafka_front.partition_apis import PartitionApis
from partlog.limits import BROKERS_MAX, PARTITIONS_PER_TOPIC_MAX
from partlog.rpc.methods import CONTROLLER_SCHEMAS
from partlog.rpc.wire import WireError
from tests.unit.test_controller import config, create, register


def _grow(c: Controller, name: str, count: int, assignments: Any = None, validate_only: bool = False) -> Any:
    out = c.create_partitions(name, count, assignments, validate_only)
    c.check()
    return out


def test_added_partitions_are_placed_as_a_new_topics_and_the_old_ones_untouched(tmp_path: Path) -> None:
    c = Controller(config(tmp_path / "c"), now_ms=0)
    register(c, [1, 2, 3, 4, 5, 6])
    create(c, "other", 5, 2)
    before = create(c, "t", 3, 3)
    alive = [b.info() for b in c.registrations()]
    # The partitions in the cluster before the growth choose the first leader, as for a new topic.
    expected = assign_replicas(alive, 4, 3, 8)
    grown = _grow(c, "t", 7)
    assert isinstance(grown, TopicInfo) and grown.topic_id == before.topic_id
    assert grown.partitions[:3] == before.partitions
    assert [p.replicas for p in grown.partitions[3:]] == expected
    assert all(p == PartitionInfo(p.replicas[0], 0, p.replicas, p.replicas, 0) for p in grown.partitions[3:])
    c.close()
    # Durable: a restarted controller has the grown topic.
    c = Controller(config(tmp_path / "c"), now_ms=0)
    t = c.topic("t")
    assert t is not None and t.partitions == grown.partitions
    c.close()


def test_refusals_carry_kafkas_errors_and_messages(tmp_path: Path) -> None:
    c = Controller(config(tmp_path / "c"), now_ms=0)
    register(c, [1, 2, 3])
    create(c, "t", 2, 2)
    version = c.version

    def refused(count: int, assignments: Any = None) -> tuple[Errors, str]:
        r = _grow(c, "t", count, assignments)
        assert isinstance(r, Refused), r
        return r.error, r.message

    assert refused(2) == (Errors.INVALID_PARTITIONS, "Topic already has 2 partition(s).")
    assert refused(1) == (
        Errors.INVALID_PARTITIONS,
        "The topic t currently has 2 partition(s); 1 would not be an increase.",
    )
    assert refused(PARTITIONS_PER_TOPIC_MAX + 1)[0] == Errors.INVALID_PARTITIONS
    assert refused(4, [[1, 2]]) == (
        Errors.INVALID_REPLICA_ASSIGNMENT,
        "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.",
    )
    assert refused(3, [[1, 9]]) == (
        Errors.INVALID_REPLICA_ASSIGNMENT,
        "The manual partition assignment includes broker 9, but no such broker is registered.",
    )
    assert refused(3, [[2, 2]]) == (
        Errors.INVALID_REPLICA_ASSIGNMENT,
        "The manual partition assignment includes the broker 2 more than once.",
    )
    assert refused(3, [[]])[1] == "The manual partition assignment includes an empty replica list."
    assert refused(3, [[1, 2, 3]])[1].startswith("The manual partition assignment includes a partition with 3 replica")
    r = _grow(c, "nope", 3)
    assert isinstance(r, Refused) and r.error == Errors.UNKNOWN_TOPIC_OR_PARTITION
    # validate_only decides and writes nothing.
    v = _grow(c, "t", 5, validate_only=True)
    assert isinstance(v, TopicInfo) and v.num_partitions == 5
    assert c.version == version and c.topic("t").num_partitions == 2  # type: ignore[union-attr]
    c.close()


def test_a_manual_assignment_leads_with_its_first_alive_replica(tmp_path: Path) -> None:
    c = Controller(config(tmp_path / "c"), now_ms=0)
    epochs = register(c, [1, 2, 3])
    create(c, "t", 1, 2)
    c.tick(0)
    for b in (2, 3):  # broker 1 falls silent and is fenced
        c.heartbeat(b, epochs[b], 2_000)
    c.tick(2_000)
    assert c.registration(1).fenced  # type: ignore[union-attr]
    grown = _grow(c, "t", 3, [[1, 3], [2, 3]])
    assert isinstance(grown, TopicInfo)
    assert grown.partitions[1] == PartitionInfo(3, 0, (1, 3), (3,), 0)
    assert grown.partitions[2] == PartitionInfo(2, 0, (2, 3), (2, 3), 0)
    r = _grow(c, "t", 4, [[1, 1]])
    assert isinstance(r, Refused) and "more than once" in r.message
    c.close()


def test_the_etcd_view_grows_a_topic_and_keeps_its_partitions_states() -> None:
    keys = Keys("/c")
    tid = uuid.UUID(int=7)
    view = EtcdView(keys)
    view.load([KV(keys.topic("t"), enc_topic(tid, [(1, 2), (2, 3)]), 5, 5)], 5)
    written = PartitionInfo(2, 1, (1, 2), (2,), 2)
    view.apply(KV(keys.part(TopicIdPartition(tid, 0)), enc_part(written), 6, 6))
    assert view.topic_modified("t") == 5
    view.apply(KV(keys.topic("t"), enc_topic(tid, [(1, 2), (2, 3), (3, 1)]), 5, 7))
    t = view.snapshot().topics[0]
    assert t.partitions == (written, PartitionInfo(2, 0, (2, 3), (2, 3), 0), PartitionInfo(3, 0, (3, 1), (3, 1), 0))
    assert view.topic_modified("t") == 7 and view.partition_count() == 3 and view.refused == 0
    # Shrinking, or changing an existing partition's replicas, is refused: the topic stays as it was.
    for bad in ([(1, 2)], [(1, 3), (2, 3), (3, 1)]):
        view.apply(KV(keys.topic("t"), enc_topic(tid, bad), 5, 8))
    assert view.refused == 2 and view.snapshot().topics[0] == t
    # The new partition's own key is followed from then on.
    moved = PartitionInfo(NO_LEADER, 1, (3, 1), (3,), 1)
    view.apply(KV(keys.part(TopicIdPartition(tid, 2)), enc_part(moved), 9, 9))
    assert view.partition(TopicIdPartition(tid, 2)) == moved


def test_the_rpc_bodies_round_trip_and_are_bounded() -> None:
    asked = {"a": NewPartitions(3), "b": NewPartitions(4, ((1, 2), (2, 3)))}
    assert dec_create_partitions(enc_create_partitions(asked, True)) == (asked, True)
    info = TopicInfo(uuid.UUID(int=1), "a", (PartitionInfo(1, 0, (1,), (1,), 0),))
    answers: list[tuple[str, TopicInfo | Refused]] = [
        ("a", info),
        ("b", Refused(Errors.INVALID_PARTITIONS, "x" * 5_000)),
    ]
    got = dec_create_partitions_response(enc_create_partitions_response(3, answers))
    assert got["a"] == info and got["b"] == Refused(Errors.INVALID_PARTITIONS, "x" * 1_000)
    huge = {"a": NewPartitions(2, ((1,) * (ASSIGNMENT_ITEMS_PER_REQUEST_MAX + 1),))}
    with pytest.raises(WireError, match="assignment items"):
        dec_create_partitions(enc_create_partitions(huge, False))
    twice = {"topics": [["a", 2, None], ["a", 3, None]], "validate_only": False}
    with pytest.raises(WireError, match="named twice"):
        dec_create_partitions(twice)


# ------------------------------------------------- the Kafka front end's handler


class _CoreAdmin:
    """A metadata source whose controller is the embedded core, in process,
    asked through the RPC's bodies as the server takes them (msgpack, the
    method's schema, the decoder): a request the schema refused would fail
    every topic in it."""

    def __init__(self, c: Controller) -> None:
        self.c = c
        self.asked = 0

    async def create_partitions(
        self, topics: dict[str, NewPartitions], validate_only: bool
    ) -> dict[str, TopicInfo | Refused]:
        self.asked += 1
        body = msgpack.unpackb(msgpack.packb(enc_create_partitions(topics, validate_only)))
        CONTROLLER_SCHEMAS["create_partitions"].check(body, "create_partitions")
        wanted, only = dec_create_partitions(body)
        answers = [(n, self.c.create_partitions(n, a.count, a.assignments, only)) for n, a in wanted.items()]
        return dec_create_partitions_response(
            msgpack.unpackb(msgpack.packb(enc_create_partitions_response(0, answers)))
        )


def _request(topics: list[tuple[str, int, list[list[int]] | None]], validate_only: bool = False) -> Any:
    def topic(name: str, count: int, assignments: list[list[int]] | None) -> Any:
        parts = None if assignments is None else tuple(SimpleNamespace(broker_ids=tuple(a)) for a in assignments)
        return SimpleNamespace(name=name, count=count, assignments=parts)

    return SimpleNamespace(topics=[topic(*t) for t in topics], validate_only=validate_only, timeout=30_000)


def _handler(c: Controller) -> tuple[PartitionApis, _CoreAdmin]:
    admin = _CoreAdmin(c)
    assert isinstance(admin, PartitionAdmin)
    broker: Any = SimpleNamespace(metadata=admin)
    return PartitionApis(broker), admin


def _answer(apis: PartitionApis, body: Any) -> dict[str, tuple[int, str | None]]:
    out = asyncio.run(apis.create_partitions(SimpleNamespace(api_version=3), body, SimpleNamespace()))  # type: ignore[arg-type]
    return {r["name"]: (r["error_code"], r["error_message"]) for r in out["results"]}


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Any:
    c = Controller(config(tmp_path_factory.mktemp("front") / "c"), now_ms=0)
    register(c, [1, 2, 3])
    create(c, "keep", 2, 2)
    yield c
    c.close()


def test_the_handler_answers_duplicates_internal_topics_and_bad_names_before_the_controller(front: Controller) -> None:
    apis, admin = _handler(front)
    got = _answer(apis, _request([("dup", 3, None), ("dup", 4, None), ("__consumer_offsets", 60, None),
                                  ("bad name", 3, None)]))  # fmt: skip
    assert got["dup"] == (int(Errors.INVALID_REQUEST), "Duplicate topic name.")
    assert got["__consumer_offsets"][0] == int(Errors.INVALID_REQUEST)
    assert got["bad name"][0] == int(Errors.UNKNOWN_TOPIC_OR_PARTITION)
    assert admin.asked == 0


_counts = st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(-3, 12))
_ids = st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(-1, 5))
_assignments: st.SearchStrategy[list[list[int]] | None] = st.one_of(
    st.none(),
    st.lists(st.lists(_ids, max_size=6), max_size=12),
    # Beyond the request's bounds: refused for that topic alone, never sent.
    st.just([[1, 2]] * (PARTITIONS_PER_TOPIC_MAX + 1)),
    st.just([[1] * (BROKERS_MAX + 1)]),
    st.just([[] for _ in range(PARTITIONS_PER_TOPIC_MAX)]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hostile=st.lists(st.tuples(st.sampled_from(["h1", "h2", "h3", "nope"]), _counts, _assignments), max_size=4))
def test_hostile_requests_fail_only_their_topic(front: Controller, hostile: list[Any]) -> None:
    """Any counts and assignments: each topic gets its own answer (an
    error, or the growth), the topic named beside them grows, every other
    topic is untouched, and the controller's invariants hold."""
    for name in ("h1", "h2", "h3"):
        if front.topic(name) is None:
            create(front, name, 1, 2)
    keep = front.topic("keep")
    before = {n: front.topic(n) for n in ("h1", "h2", "h3")}
    sizes = {n: t.num_partitions for n, t in before.items() if t is not None}
    good = f"ok-{front.version}"
    create(front, good, 1, 1)
    apis, _ = _handler(front)
    got = _answer(apis, _request([*hostile, (good, 2, None)]))
    assert got[good] == (0, None)
    named = [n for n, _, _ in hostile]
    for name, count, _ in hostile:
        code, _ = got[name]
        t = front.topic(name)
        if named.count(name) > 1 or name == "nope":
            assert code != 0 and (t is None or t.num_partitions == sizes[name])
        elif code == 0:
            assert t is not None and t.num_partitions == count
            assert t.partitions[: sizes[name]] == before[name].partitions  # type: ignore[union-attr]
        else:
            assert t is not None and t.num_partitions == sizes[name]
    assert front.topic("keep") == keep
    front.check()
    front.delete_topics([good])


def test_alter_on_the_topic_is_needed(front: Controller) -> None:
    """Kafka's check: ALTER on the topic, after the duplicate check; the
    denied topic is not grown, the allowed one is."""
    source = LocalAcls()
    allowed = AclBinding(ResourceType.TOPIC, "yes", PatternType.LITERAL, "User:ANONYMOUS", "*", AclOperation.ALTER,
                         AclPermission.ALLOW)  # fmt: skip
    asyncio.run(source.create_acls([allowed]))
    create(front, "yes", 1, 1)
    create(front, "no", 1, 1)
    apis, _ = _handler(front)
    apis.authz = Authz(AuthorizerConfig(), source)
    body = _request([("yes", 2, None), ("no", 2, None)])
    out = asyncio.run(apis.create_partitions(SimpleNamespace(api_version=3), body, Session("10.0.0.7:1")))
    got = {r["name"]: r["error_code"] for r in out["results"]}
    assert got == {"yes": 0, "no": int(Errors.TOPIC_AUTHORIZATION_FAILED)}
    assert front.topic("no").num_partitions == 1  # type: ignore[union-attr]
    # Every version encodes the answer.
    for version in range(SUPPORTED_VERSIONS[37][0], SUPPORTED_VERSIONS[37][1] + 1):
        assert len(build(response_class(37, version), out).results) == 2


class _SlowAdmin:
    async def create_partitions(
        self, topics: dict[str, NewPartitions], validate_only: bool
    ) -> dict[str, TopicInfo | Refused]:
        await asyncio.sleep(3600)
        raise AssertionError("not reached")


def test_the_timeout_answers_request_timed_out() -> None:
    apis = PartitionApis(SimpleNamespace(metadata=_SlowAdmin()))
    body = _request([("t", 3, None)])
    body.timeout = 50
    got = _answer(apis, body)
    assert got["t"][0] == int(Errors.REQUEST_TIMED_OUT)
