"""OffsetDelete (API 47, KIP-496) on the group coordinator: Kafka 4's
``OffsetMetadataManager.deleteOffsets`` (docs/design/groups.md).

In Kafka's order: the coordinator's own errors (INVALID_GROUP_ID for an
empty id, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS), GROUP_ID_NOT_FOUND
for a group this coordinator does not know, NON_EMPTY_GROUP for a classic
group with members whose protocol type is not ``consumer`` (Kafka's
``validateOffsetDelete``); then per topic: GROUP_SUBSCRIBED_TO_TOPIC for
each partition of a topic the group's members subscribe to, else each named
partition that has a committed offset is deleted (a tombstone, as
DeleteGroups writes) and answered NONE; a partition without one is left out
of the answer, as Kafka's coordinator leaves it out.  A failed tombstone
write is the whole answer's error (the client retries)."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

from partlog.groups.membership import Group, GroupState
from partlog.kafka.errors import Errors
from partlog.kafka_front.group_coordinator import GroupCoordinator
from partlog.kafka_front.group_delete import tombstone_offsets

__all__ = ["CONSUMER_PROTOCOL_TYPE", "delete_offsets", "subscription_topics"]

CONSUMER_PROTOCOL_TYPE = "consumer"
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACTIVE = (GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE)


def subscription_topics(metadata: bytes) -> list[str] | None:
    """The topics of a ConsumerProtocolSubscription (any version: they all
    start with version int16, topics [string]); None when it does not parse
    (Kafka's SchemaException).  Reads only what the bytes hold."""
    if len(metadata) < _I16.size + _I32.size:
        return None
    (count,) = _I32.unpack_from(metadata, _I16.size)
    pos = _I16.size + _I32.size
    if count < 0 or count * _I16.size > len(metadata) - pos:
        return None
    out = []
    for _ in range(count):
        if pos + _I16.size > len(metadata):
            return None
        (n,) = _I16.unpack_from(metadata, pos)
        pos += _I16.size
        if n < 0 or pos + n > len(metadata):
            return None
        try:
            out.append(metadata[pos : pos + n].decode("utf-8"))
        except UnicodeDecodeError:
            return None
        pos += n
    return out


def _classic_subscriptions(g: Group) -> set[str]:
    """Kafka's ClassicGroup.subscribedTopics, as isSubscribedToTopic reads
    it: the union of the members' subscriptions to the chosen protocol; none
    when a member's does not parse (Kafka's Optional.empty)."""
    if g.protocol_type != CONSUMER_PROTOCOL_TYPE or not g.members or g.protocol is None:
        return set()
    out: set[str] = set()
    for m in g.members.values():
        metadata = next((data for name, data in m.protocols if name == g.protocol), None)
        topics = subscription_topics(metadata) if metadata is not None else None
        if topics is None:
            return set()
        out.update(topics)
    return out


async def delete_offsets(
    coordinator: GroupCoordinator, group_id: str, topics: Sequence[tuple[str, Iterable[int]]]
) -> tuple[Errors, dict[str, list[tuple[int, Errors]]]]:
    """The group-level error, and per topic asked the answered partitions."""
    error, part, tp = await coordinator._partition(group_id)
    if part is None or tp is None:
        return error, {}
    g = part.groups.group(group_id)
    consumers = part.consumers.group(group_id)
    known = group_id in part.offsets or g is not None or group_id in part.groups.emptied_types
    if not known and consumers is None:
        return Errors.GROUP_ID_NOT_FOUND, {}
    if g is not None and g.state in _ACTIVE and g.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return Errors.NON_EMPTY_GROUP, {}
    subscribed = _classic_subscriptions(g) if g is not None else set()
    if consumers is not None:
        subscribed.update(n for m in consumers.members.values() for n in m.subscribed)
    held = part.offsets.get(group_id, {})
    out: dict[str, list[tuple[int, Errors]]] = {}
    keys: dict[tuple[str, int], None] = {}  # in order, each once (a topic named twice)
    for name, partitions in topics:
        rows = out.setdefault(name, [])
        for p in dict.fromkeys(partitions):
            if name in subscribed:
                rows.append((p, Errors.GROUP_SUBSCRIBED_TO_TOPIC))
            elif (name, p) in held and (name, p) not in keys:
                rows.append((p, Errors.NONE))
                keys[(name, p)] = None
    if keys:
        error = await tombstone_offsets(coordinator, part, tp, group_id, list(keys))
        if error != Errors.NONE:
            return error, {}
    return Errors.NONE, out
