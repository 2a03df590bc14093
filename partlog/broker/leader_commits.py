"""The leader's commit entry: a WAL file's batches for the partitions this
broker leads, appended to its own store (from its own produce path, or the
``commit`` RPC of another broker's).

The replica manager refuses partitions this broker does not lead and makes
acks=all answers wait for the ISR.  A commit whose I/O fails fail-stops the
store (Kafka takes the log directory offline); it is then reopened from disk
in the background, once, and until then every commit answers
KAFKA_STORAGE_ERROR (retriable).

Two stages of the produce path are measured here (``BrokerMetrics.stage``):
``leader_commit``, the commit received to appended and durable, and, for a
commit with acks=all batches, ``replication``, appended to the HWM past
them (the replica manager's wait done), read in a done-callback of that
wait so that measuring adds no step to the commit's path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from partlog.broker.metrics import BrokerMetrics
from partlog.broker.tasks import Tasks
from partlog.broker.txn_verification import TxnVerification
from partlog.kafka.errors import Errors
from partlog.kafka.records import CommitBatchRequest, CommitBatchResponse
from partlog.replication.manager import ReplicaManager
from partlog.store import MetadataStore, StoreError
from partlog.store.verification import GuardKey

log = logging.getLogger(__name__)

# A leader answers an acks=all commit that is not replicated in time with
# REQUEST_TIMED_OUT this much before the sender's commit RPC would time out.
ACKS_ALL_TIMEOUT_MARGIN_MS = 1_000


class LeaderCommits:
    """``wake()`` wakes long-polling fetches; ``stopping()`` tells whether
    the broker is stopping (no reopen then)."""

    def __init__(
        self,
        broker_id: int,
        store: MetadataStore,
        replicas: ReplicaManager,
        *,
        metrics: BrokerMetrics,
        tasks: Tasks,
        wake: Callable[[], None],
        stopping: Callable[[], bool],
        commit_rpc_timeout_ms: int,
        verification: TxnVerification,
    ) -> None:
        self.verification = verification
        self.broker_id = broker_id
        self.store = store
        self.replicas = replicas
        self.metrics = metrics
        self.tasks = tasks
        self._wake = wake
        self._stopping = stopping
        self.commit_rpc_timeout_ms = commit_rpc_timeout_ms
        self._store_reopening = False

    async def commit(
        self,
        key: str,
        uploader: int,
        file_size: int,
        requests: list[CommitBatchRequest],
        acks_all: Sequence[bool] = (),
        transactional_ids: Mapping[int, str] | None = None,
    ) -> tuple[list[CommitBatchResponse], Awaitable[list[CommitBatchResponse]] | None]:
        """Commit to this broker's own store, refusing partitions it does not
        lead; acks=all batches come with an awaitable of the final answers.
        The transactional batches of ``transactional_ids``' producers are
        verified with their coordinators first (KIP-890 part 1,
        :mod:`partlog.broker.txn_verification`)."""
        if not transactional_ids:
            return await self._commit(key, uploader, file_size, requests, acks_all, None)
        refused, guards = await self.verification.verify(requests, transactional_ids)
        try:
            if not refused:
                return await self._commit(key, uploader, file_size, requests, acks_all, guards)
            kept = [i for i in range(len(requests)) if i not in refused]
            answers = [CommitBatchResponse(e, -1, -1, -1, False, requests[i]) for i, e in sorted(refused.items())]
            flags = list(acks_all)
            responses: list[CommitBatchResponse] = []
            wait: Awaitable[list[CommitBatchResponse]] | None = None
            if kept:
                responses, wait = await self._commit(
                    key, uploader, file_size, [requests[i] for i in kept], [flags[i] for i in kept] if flags else (),
                    guards,
                )  # fmt: skip
            return _merged(len(requests), refused, answers, kept, responses), (
                None if wait is None else _merged_later(len(requests), refused, answers, kept, wait)
            )
        finally:
            # Sequenced (or refused) by now: the guards have done their work.
            self.verification.release(guards)

    async def _commit(
        self,
        key: str,
        uploader: int,
        file_size: int,
        requests: list[CommitBatchRequest],
        acks_all: Sequence[bool],
        guards: Mapping[GuardKey, int] | None,
    ) -> tuple[list[CommitBatchResponse], Awaitable[list[CommitBatchResponse]] | None]:
        received = self.replicas.clock.monotonic()
        try:
            responses, wait = await self.replicas.commit(
                key,
                uploader,
                file_size,
                requests,
                acks_all,
                max(1, self.commit_rpc_timeout_ms - ACKS_ALL_TIMEOUT_MARGIN_MS),
                guards,
            )
        except StoreError:
            self.store_failed()
            raise
        appended = self.replicas.clock.monotonic()
        self.metrics.stage("leader_commit", appended - received)
        if wait is not None:
            # The replica manager's wait is a task already: ensure_future
            # returns it as it is.
            wait = asyncio.ensure_future(wait)
            wait.add_done_callback(lambda f: self._replicated(f, appended))
        # Wake long-polling fetches of followers' consumers and ours.
        self._wake()
        return responses, wait

    def _replicated(self, wait: asyncio.Future[list[CommitBatchResponse]], appended: float) -> None:
        if not wait.cancelled() and wait.exception() is None:
            self.metrics.stage("replication", self.replicas.clock.monotonic() - appended)

    def store_failed(self) -> None:
        """A commit's I/O failed and the store fail-stopped: reopen it from
        disk in the background, once."""
        if self.store.failed is None or self._store_reopening or self._stopping():
            return
        self._store_reopening = True
        log.error("broker %d: metadata store failed (%r): reopening it", self.broker_id, self.store.failed)
        self.tasks.spawn(self._reopen_store())

    async def _reopen_store(self) -> None:
        try:
            await asyncio.to_thread(self.store.reopen)
        except StoreError:
            if self._stopping():
                return  # the broker closed the store meanwhile: it stays closed
            raise
        else:
            self.metrics.store_reopens.inc()
            log.warning("broker %d: metadata store reopened from disk", self.broker_id)
            self._wake()
        finally:
            self._store_reopening = False


def _merged(
    n: int,
    refused: Mapping[int, Errors],
    refused_answers: list[CommitBatchResponse],
    kept: list[int],
    responses: list[CommitBatchResponse],
) -> list[CommitBatchResponse]:
    """The answers in request order: the refused batches' and the committed ones'."""
    out: list[CommitBatchResponse | None] = [None] * n
    for i, a in zip(sorted(refused), refused_answers, strict=True):
        out[i] = a
    for i, a in zip(kept, responses, strict=True):
        out[i] = a
    assert all(a is not None for a in out)
    return out  # type: ignore[return-value]


async def _merged_later(
    n: int,
    refused: Mapping[int, Errors],
    refused_answers: list[CommitBatchResponse],
    kept: list[int],
    wait: Awaitable[list[CommitBatchResponse]],
) -> list[CommitBatchResponse]:
    return _merged(n, refused, refused_answers, kept, await wait)


__all__ = ["ACKS_ALL_TIMEOUT_MARGIN_MS", "LeaderCommits"]
