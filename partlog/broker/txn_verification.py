"""KIP-890 part 1 on the partition leader: before a transaction's first batch
is appended, ask the transaction coordinator whether the partition is in the
producer's open transaction.

Kafka's ``ReplicaManager.appendRecordsWithTransactionVerification`` with its
``AddPartitionsToTxnManager``, on partlog's parts:

* a commit carries the transactional ids of the produce requests that named
  one (``{request index: transactional id}``); batches of other writers (our
  own clients, the coordinators' markers) are not verified, as before;
* for each transactional batch of such a producer on a partition this broker
  leads, the store's :class:`~partlog.store.verification.VerificationGuards`
  answers SENTINEL when the producer's transaction is open there (nothing to
  ask), else a guard; the partitions needing one are asked of the coordinator
  of the transactional id, one question per id, all at once: through the
  handler the Kafka front end registers (:meth:`TxnVerification.register`),
  here when this broker is the coordinator, else with the broker RPC
  ``verify_txn`` to it;
* the answers, within :data:`TXN_VERIFICATION_TIMEOUT_MS` (fail closed: no
  answer in time is NETWORK_EXCEPTION), become produce errors as Kafka's
  (:func:`produce_error`); refused batches never reach the store, the others
  are committed with their guards, and the sequencer starts a transaction
  only with the partition's current guard; the guards end when the commit
  has been answered.

The commit waits for the verification, and the commits behind it on the
same connection (appended in order) wait for it: with a coordinator that
does not answer, each commit needing a verification waits up to the
timeout in turn, so the k-th waits up to k times it, and the sender's
commit RPC times out (its batches are answered with a retriable error).
Starting each commit's verification as it arrives would bound that; not
done yet.  A partition this broker does not lead, or does not know, is
refused (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION) rather than
skipped; a cancelled verification ends its guards.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from partlog.broker.metrics import BrokerMetrics
from partlog.broker.peers import Peers
from partlog.kafka import batch_header as bh
from partlog.kafka.errors import Errors
from partlog.kafka.records import CommitBatchRequest, TopicIdPartition
from partlog.rpc.client import RpcConnectionError, RpcRemoteError, RpcTimeoutError
from partlog.rpc.wire import WireError, dec_errors, enc_tp, expect_list, expect_map
from partlog.store.verification import SENTINEL, GuardKey, VerificationGuards

log = logging.getLogger(__name__)

# How long a leader waits for the coordinators' answers before it refuses the
# batches with a retriable error (fail closed).  Kafka bounds the wait by the
# produce's request.timeout.ms (30 s); ours holds a commit, and the commits
# behind it on the connection, so it is far below the commit deadline and at
# most half the commit RPC's timeout (the broker takes the smaller): a
# coordinator is one RPC away.
TXN_VERIFICATION_TIMEOUT_MS = 5_000

# The coordinator's answer for one transactional id: one error per partition.
Verify = Callable[[str, int, int, Sequence[TopicIdPartition]], Awaitable[list[Errors]]]
# The broker id of a transactional id's coordinator, or None when unknown.
Locate = Callable[[str], int | None]


def produce_error(coordinator_error: Errors) -> Errors:
    """Kafka's translation of a verification answer for the produce
    response (ReplicaManager and AddPartitionsToTxnManager, for clients
    without TRANSACTION_ABORTABLE): the coordinator's retriable errors become
    NOT_ENOUGH_REPLICAS (retried without a metadata refresh), PRODUCER_FENCED
    INVALID_PRODUCER_EPOCH; a partition not in the transaction is
    INVALID_TXN_STATE already (the coordinator answers TV1 clients so, where
    Kafka's answers TRANSACTION_ABORTABLE and its manager translates it)."""
    if coordinator_error in (
        Errors.CONCURRENT_TRANSACTIONS,
        Errors.NETWORK_EXCEPTION,
        Errors.COORDINATOR_LOAD_IN_PROGRESS,
        Errors.COORDINATOR_NOT_AVAILABLE,
        Errors.NOT_COORDINATOR,
    ):
        return Errors.NOT_ENOUGH_REPLICAS
    if coordinator_error == Errors.PRODUCER_FENCED:
        return Errors.INVALID_PRODUCER_EPOCH
    return coordinator_error


class TxnVerification:
    """See the module doc.  ``leads(tp)``: this broker leads ``tp`` now."""

    def __init__(
        self,
        broker_id: int,
        guards: VerificationGuards,
        peers: Peers,
        *,
        metrics: BrokerMetrics,
        leads: Callable[[TopicIdPartition], bool],
        timeout_ms: int = TXN_VERIFICATION_TIMEOUT_MS,
    ) -> None:
        assert timeout_ms > 0
        self.broker_id = broker_id
        self.guards = guards
        self.peers = peers
        self.metrics = metrics
        self._leads = leads
        self.timeout_ms = timeout_ms
        self._verify: Verify | None = None
        self._locate: Locate | None = None

    def register(self, verify: Verify, locate: Locate) -> None:
        """The Kafka front end's coordinator: ``verify`` answers for the ids
        this broker coordinates (NOT_COORDINATOR for others), ``locate``
        names the coordinator's broker."""
        self._verify, self._locate = verify, locate

    async def answer(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tps: Sequence[TopicIdPartition]
    ) -> list[Errors]:
        """The ``verify_txn`` RPC: this broker's coordinator answers."""
        if self._verify is None:
            return [Errors.NOT_COORDINATOR] * len(tps)
        return await self._verify(transactional_id, producer_id, producer_epoch, tps)

    async def verify(
        self, requests: Sequence[CommitBatchRequest], transactional_ids: Mapping[int, str]
    ) -> tuple[dict[int, Errors], dict[GuardKey, int]]:
        """Verify the commit's transactional batches of the requests in
        ``transactional_ids`` (request index -> its produce request's
        transactional id): the refused batches (request index -> produce
        error) and the guards held for the others (end them with
        :meth:`release`).  Each request is verified under its own id, as
        Kafka verifies each produce request on its own: a client naming
        another's producer id in the same WAL file is refused alone."""
        guards: dict[GuardKey, int] = {}
        # (partition, producer id, transactional id) -> why it is refused
        refused_keys: dict[tuple[TopicIdPartition, int, str], Errors] = {}
        # (transactional id, producer id, epoch) -> partitions to ask about
        asks: dict[tuple[str, int, int], list[TopicIdPartition]] = {}
        asked: set[tuple[TopicIdPartition, int, str]] = set()
        for i, r in enumerate(requests):
            tid = transactional_ids.get(i)
            tp = r.topic_id_partition
            key = (tp, r.producer_id)
            if tid is None or (tp, r.producer_id, tid) in asked or not _transactional(r):
                continue
            asked.add((tp, r.producer_id, tid))
            if not self._leads(tp):
                # Refused, not skipped: leadership arriving while the others
                # are verified would let the store append it unverified (as
                # Kafka, which looks the partition up before verifying).
                refused_keys[(tp, r.producer_id, tid)] = Errors.NOT_LEADER_OR_FOLLOWER
                continue
            token = guards.get(key)
            if token is None:
                try:
                    token = self.guards.begin(tp, r.producer_id)
                except KeyError:
                    refused_keys[(tp, r.producer_id, tid)] = Errors.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                if token is None:
                    refused_keys[(tp, r.producer_id, tid)] = Errors.NOT_ENOUGH_REPLICAS  # guards full: retriable
                    continue
                guards[key] = token
            if token != SENTINEL:
                asks.setdefault((tid, r.producer_id, r.producer_epoch), []).append(tp)
        if asks:
            try:
                answers = await asyncio.gather(*(self._ask(tid, pid, ep, tps) for (tid, pid, ep), tps in asks.items()))
            except BaseException:
                # Cancelled (the sender's connection dropped): the guards
                # begun here would otherwise never end, and a full table
                # refuses every later verification on this leader.
                self.release(guards)
                raise
            for ((tid, pid, _), tps), errors in zip(asks.items(), answers, strict=True):
                for tp, e in zip(tps, errors, strict=True):
                    self.metrics.txn_verifications.labels(e.name).inc()
                    if e != Errors.NONE:
                        refused_keys[(tp, pid, tid)] = produce_error(e)
        # A guard ends when every request that needed it was refused.
        needed = {(tp, pid) for tp, pid, tid in asked if (tp, pid, tid) not in refused_keys}
        for key in [k for k in guards if k not in needed]:
            token = guards.pop(key)
            self.guards.end(key[0], key[1], token)
        refused = {
            i: refused_keys[k]
            for i, r in enumerate(requests)
            if (tid := transactional_ids.get(i)) is not None
            and (k := (r.topic_id_partition, r.producer_id, tid)) in refused_keys
        }
        return refused, guards

    def release(self, guards: Mapping[GuardKey, int]) -> None:
        """The commit holding ``guards`` was answered."""
        for (tp, pid), token in guards.items():
            if token != SENTINEL:
                self.guards.end(tp, pid, token)

    async def _ask(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tps: list[TopicIdPartition]
    ) -> list[Errors]:
        """The coordinator's answer per partition; NETWORK_EXCEPTION when it
        cannot be had within the timeout, as Kafka's manager answers a
        disconnection or a timeout."""
        try:
            async with asyncio.timeout(self.timeout_ms / 1000):
                got = await self._ask_coordinator(transactional_id, producer_id, producer_epoch, tps)
        except TimeoutError:
            return [Errors.NETWORK_EXCEPTION] * len(tps)
        except Exception:  # a bug answering must refuse the batches, not leak their guards
            log.exception("verifying %r failed", transactional_id)
            return [Errors.NETWORK_EXCEPTION] * len(tps)
        assert len(got) == len(tps), (got, tps)
        return got

    async def _ask_coordinator(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tps: list[TopicIdPartition]
    ) -> list[Errors]:
        coordinator = self._locate(transactional_id) if self._locate is not None else None
        if coordinator is None:
            return [Errors.COORDINATOR_NOT_AVAILABLE] * len(tps)
        if coordinator == self.broker_id:
            return await self.answer(transactional_id, producer_id, producer_epoch, tps)
        body = {
            "transactional_id": transactional_id,
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "partitions": [enc_tp(tp) for tp in tps],
        }
        try:
            client = await self.peers.client(coordinator, timeout_ms=self.timeout_ms)
            got = await client.call("verify_txn", body, timeout_ms=self.timeout_ms)
            rows = expect_list(expect_map(got, "verify_txn").get("partitions"), "verify_txn", len(tps))
            return [dec_errors(expect_list(row, "verify_txn row", 1)[0], "verify_txn") for row in rows]
        except (RpcConnectionError, RpcTimeoutError, RpcRemoteError, WireError, OSError) as e:
            log.info("verify_txn to broker %d failed: %s", coordinator, e)
            return [Errors.NETWORK_EXCEPTION] * len(tps)


def _transactional(r: CommitBatchRequest) -> bool:
    return r.producer_id >= 0 and bh.transactional_batch(r.header)


__all__ = ["TXN_VERIFICATION_TIMEOUT_MS", "TxnVerification", "produce_error"]
