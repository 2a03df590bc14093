"""The pure rules of CreateTopics (partlog.controller.topic_create):
manual replica assignments against a small reference written from Kafka's
ReplicationControlManager.createTopic / validateManualPartitionAssignment
(hostile values: negative ids, long lists, repeated and missing partition
indexes), the -1 shape rule, and a batch decided against the state its
earlier topics leave (one transaction per request in the controller)."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.controller.cluster_meta import BrokerInfo, TopicInfo
from partlog.controller.core import Controller
from partlog.controller.model import ControllerConfig
from partlog.controller.rules import Refused
from partlog.controller.topic_create import (
    CreateState,
    NewTopic,
    assignment_bounds,
    dec_create_topics_assignments,
    enc_assignments,
    manual_partitions,
    plan_topics,
    shape_refusal,
)
from partlog.kafka.errors import Errors
from partlog.limits import BROKERS_MAX, PARTITIONS_PER_TOPIC_MAX

REGISTERED = {0, 1, 2, 3}
ACTIVE = {0, 1, 2}  # 3 is fenced


def _reference(
    assignments: Sequence[tuple[int, Sequence[int]]], registered: Callable[[int], bool], active: Callable[[int], bool]
) -> tuple[Errors, str] | list[tuple[int, tuple[int, ...], tuple[int, ...]]]:
    """Kafka's loop, written out plainly: (error, the message's key words)
    or per partition (leader, replicas, isr)."""
    seen: dict[int, tuple[int, tuple[int, ...], tuple[int, ...]]] = {}
    rf = None
    for index, replicas in assignments:
        if index in seen:
            return Errors.INVALID_REPLICA_ASSIGNMENT, "multiple"
        if len(replicas) == 0:
            return Errors.INVALID_REPLICA_ASSIGNMENT, "empty"
        ordered = sorted(replicas)
        for k, b in enumerate(ordered):
            if not registered(b):
                return Errors.INVALID_REPLICA_ASSIGNMENT, f"broker {b},"
            if k and ordered[k - 1] == b:
                return Errors.INVALID_REPLICA_ASSIGNMENT, f"broker {b} more than once"
        if rf is not None and len(replicas) != rf:
            return Errors.INVALID_REPLICA_ASSIGNMENT, "not consistent"
        rf = len(replicas)
        isr = tuple(b for b in replicas if active(b))
        if not isr:
            return Errors.INVALID_REPLICA_ASSIGNMENT, "fenced"
        seen[index] = (isr[0], tuple(replicas), isr)
    if sorted(seen) != list(range(len(seen))) or not seen:
        return Errors.INVALID_REPLICA_ASSIGNMENT, "consecutive" if seen else "no partitions"
    return [seen[i] for i in range(len(seen))]


_ids = st.integers(min_value=-3, max_value=5) | st.integers(min_value=-(2**31), max_value=2**31 - 1)
_assignments = st.lists(st.tuples(st.integers(min_value=-2, max_value=6), st.lists(_ids, max_size=6)), max_size=8)


@settings(max_examples=400, deadline=None)
@given(_assignments)
def test_manual_partitions_as_kafkas_loop(asked: list[tuple[int, list[int]]]) -> None:
    got = manual_partitions([(i, tuple(r)) for i, r in asked], REGISTERED.__contains__, ACTIVE.__contains__)
    want = _reference(asked, REGISTERED.__contains__, ACTIVE.__contains__)
    if isinstance(want, tuple):
        assert isinstance(got, Refused), (asked, got)
        assert got.error == want[0]
        assert want[1] in got.message, (got.message, want)
    else:
        assert not isinstance(got, Refused), (asked, got)
        assert [(p.leader, p.replicas, p.isr) for p in got] == want
        assert all(p.leader_epoch == 0 and p.partition_epoch == 0 for p in got)


def test_shape_rule_names_the_replication_factor_first() -> None:
    assert shape_refusal(-1, -1) is None
    r = shape_refusal(3, 2)
    assert r is not None and r.error == Errors.INVALID_REQUEST and "replication factor" in r.message
    r = shape_refusal(3, -1)
    assert r is not None and "numPartitions" in r.message


def test_bounds_refuse_what_no_cluster_takes() -> None:
    assert assignment_bounds([(0, (1, 2))]) is None
    too_many = [(i, (1,)) for i in range(PARTITIONS_PER_TOPIC_MAX + 1)]
    assert assignment_bounds(too_many) == Refused(
        Errors.INVALID_PARTITIONS, f"more than {PARTITIONS_PER_TOPIC_MAX} partitions"
    )
    long = assignment_bounds([(0, tuple(range(BROKERS_MAX + 1)))])
    assert long is not None and long.error == Errors.INVALID_REPLICA_ASSIGNMENT


@given(_assignments)
def test_assignments_round_trip_the_wire(asked: list[tuple[int, list[int]]]) -> None:
    encoded = {"assignments": enc_assignments({"t": [(i, tuple(r)) for i, r in asked]})}
    assert dec_create_topics_assignments(encoded) == {"t": tuple((i, tuple(r)) for i, r in asked)}


def _state(alive: int = 3, partitions: int = 0) -> CreateState:
    brokers = [BrokerInfo(b, f"az{b}", "127.0.0.1", 9000 + b) for b in range(alive)]
    return CreateState(brokers, range(alive).__contains__, partitions, lambda _n: None)


def test_a_batch_counts_its_own_partitions_and_names() -> None:
    ids = iter(uuid.UUID(int=i + 1) for i in range(10))
    out = plan_topics(
        [NewTopic("a", 2, 1), NewTopic("a", 2, 1), NewTopic("b", 3, 4), NewTopic("c", 1, 1)],
        _state(partitions=0),
        lambda: next(ids),
        lambda _t: False,
    )
    a = out["a"]
    assert isinstance(a, TopicInfo) and a.topic_id == uuid.UUID(int=1)  # the second "a" answers the first
    assert out["b"] == Errors.INVALID_REPLICATION_FACTOR
    c = out["c"]
    assert isinstance(c, TopicInfo) and c.topic_id == uuid.UUID(int=2)
    # c's replicas start after a's two partitions (assign_replicas' start).
    assert c.partitions[0].replicas == (2,)


def test_the_controller_writes_a_request_as_one_version() -> None:
    with tempfile.TemporaryDirectory() as d:
        c = Controller(ControllerConfig(d), now_ms=0)
        for b in range(3):
            c.register_broker(b, "az", "127.0.0.1", 9000 + b, 0)
        before = c.version
        out = c.create_topics([NewTopic(f"t{i}", 4, 3) for i in range(200)])
        assert all(isinstance(a, TopicInfo) for a in out.values())
        assert c.version == before + 1
        placed = c.create_topics([NewTopic("placed", -1, -1, None, ((0, (2, 1)), (1, (1, 0))))])["placed"]
        assert isinstance(placed, TopicInfo)
        assert [(p.leader, p.replicas) for p in placed.partitions] == [(2, (2, 1)), (1, (1, 0))]
        c.close()
        reopened = Controller(ControllerConfig(d), now_ms=0)
        assert reopened.topic("placed") == placed and reopened.topic("t199") == out["t199"]
        reopened.close()
