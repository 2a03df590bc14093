"""DeleteGroups on the group coordinator: Kafka's ``handleDeleteGroups``.

Per group, in Kafka's order: the coordinator's own errors (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS), GROUP_ID_NOT_FOUND for a group this
coordinator does not know (no members, no committed offsets, no emptied
membership), NON_EMPTY_GROUP while it has members; else its membership is
forgotten and its committed offsets are deleted durably: one tombstone per
(topic, partition) in the group's ``__consumer_offsets`` partition, written
with acks=all like a commit, so a new coordinator's load drops them too.

Unlike Kafka's old coordinator, which answers NONE even when the tombstones'
append fails, an append error is the group's answer (as a commit's:
COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR), so a client retries instead of
believing offsets gone that a reload brings back.
"""

from __future__ import annotations

import logging

import msgpack

from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import TopicIdPartition
from partlog.kafka_front.group_coordinator import (
    OFFSETS_COMMIT_TIMEOUT_MS,
    GroupCoordinator,
    _commit_error,
    _Partition,
)

log = logging.getLogger(__name__)


async def delete_groups(coordinator: GroupCoordinator, group_ids: list[str]) -> dict[str, Errors]:
    """Delete each of ``group_ids`` (deduplicated) this coordinator serves;
    per group the error, in the order given."""
    out: dict[str, Errors] = {}
    for group_id in dict.fromkeys(group_ids):
        out[group_id] = await _delete_one(coordinator, group_id)
    return out


async def _delete_one(coordinator: GroupCoordinator, group_id: str) -> Errors:
    # Kafka's validateGroupStatus for DELETE_GROUPS accepts an empty id.
    error, part, tp = await coordinator._partition(group_id, empty_ok=True)
    if part is None or tp is None:
        return error
    groups = part.groups
    known = group_id in part.offsets or groups.group(group_id) is not None or group_id in groups.emptied_types
    if not known and part.consumers.group(group_id) is None:
        return Errors.GROUP_ID_NOT_FOUND
    if not part.consumers.forget_empty(group_id):  # a KIP-848 group with members
        return Errors.NON_EMPTY_GROUP
    error = groups.forget(group_id)
    if error != Errors.NONE:
        return error
    keys = list(part.offsets.get(group_id, {}))
    if not keys:
        part.offsets.pop(group_id, None)
        return Errors.NONE
    return await tombstone_offsets(coordinator, part, tp, group_id, keys)


async def tombstone_offsets(
    coordinator: GroupCoordinator, part: _Partition, tp: TopicIdPartition, group_id: str, keys: list[tuple[str, int]]
) -> Errors:
    """Delete ``keys`` of the group's committed offsets durably: one
    tombstone each in its offsets partition (acks=all, as a commit), then
    from memory.  DeleteGroups and OffsetDelete share it."""
    now = coordinator.broker.clock.wall_ms()
    batch = build_record_batch([(msgpack.packb([group_id, topic, p]), None, now) for topic, p in keys])
    [result] = await coordinator.broker.produce([(tp, batch)], acks=-1, timeout_ms=OFFSETS_COMMIT_TIMEOUT_MS)
    error = _commit_error(result.error)
    if error == Errors.NONE and (
        coordinator._parts.get(tp.partition) is not part or coordinator.broker.leader_epoch(tp) != part.leader_epoch
    ):
        # Leadership moved during the append: the new coordinator's load
        # may not have seen the tombstones; the client asks it again.
        error = Errors.NOT_COORDINATOR
    if error != Errors.NONE:
        log.warning("deleting offsets of group %s failed: %s", group_id, error.name)
        return error
    held = part.offsets.get(group_id, {})
    for i, key in enumerate(keys):
        c = held.get(key)
        # A commit written after the tombstone (while it was in flight) stands.
        if c is not None and (result.base_offset < 0 or c.log_offset < result.base_offset + i):
            del held[key]
    if not held:
        part.offsets.pop(group_id, None)
    return Errors.NONE


__all__ = ["delete_groups", "tombstone_offsets"]
