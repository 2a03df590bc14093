"""The acks=all waits of a leader's commit, as Kafka's ``DelayedProduce``.

``ReplicaManager.commit`` appends, registers one future per partition that
has an acks=all batch (it ends with NONE once the HWM passed the append, or
with NOT_ENOUGH_REPLICAS_AFTER_APPEND or NOT_LEADER_OR_FOLLOWER), and hands
the caller :func:`await_acks` as a task: it turns those outcomes into the
commit's final answers.
"""

from __future__ import annotations

import asyncio

from partlog.kafka.errors import Errors
from partlog.kafka.records import CommitBatchResponse, TopicIdPartition
from partlog.replication.stats import ReplicationStats


async def await_acks(
    answers: list[CommitBatchResponse],
    flags: list[bool],
    waits: dict[TopicIdPartition, asyncio.Future[Errors]],
    timeout_ms: int,
    stats: ReplicationStats,
) -> list[CommitBatchResponse]:
    """``answers`` once every wait finished or timed out: an acks=all batch
    (``flags``) answered NONE becomes the error its partition's wait ended
    with (REQUEST_TIMED_OUT after ``timeout_ms``); the others stand."""
    errors: dict[TopicIdPartition, Errors] = {}
    for tp, fut in waits.items():
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                errors[tp] = await asyncio.shield(fut)
        except TimeoutError:
            # Kafka's DelayedProduce expires with REQUEST_TIMED_OUT; the
            # entry stays appended and may still be replicated.
            errors[tp] = Errors.REQUEST_TIMED_OUT
        timeout_ms = max(1, timeout_ms // 2)  # later ones already had time to complete
    out = []
    for a, flag in zip(answers, flags, strict=True):
        err = errors.get(a.request.topic_id_partition, Errors.NONE)
        if flag and a.errors == Errors.NONE and err != Errors.NONE:
            stats.acks_all_failed += 1
            a = CommitBatchResponse(err, -1, -1, -1, False, a.request)
        out.append(a)
    return out


__all__ = ["await_acks"]
