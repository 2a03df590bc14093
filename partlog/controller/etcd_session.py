"""A broker's session in etcd, one part of
:class:`~partlog.controller.etcd_meta.EtcdMetadata`: a lease of the session
timeout, kept alive every third of it, and ``brokers/<id>`` put under it.

The put's revision is the broker epoch.  The lease outlives an etcd
leader change (the new leader renews every lease for a full TTL), so a
keep-alive never gives up: an attempt that hangs (on a dead member, or a
follower waiting for an election) is abandoned after half a keep-alive
period and sent again at once, which gRPC's round robin sends to the next
live member.  The session is lost only when etcd itself says the lease is
gone: a keep-alive answered with no TTL is checked with ``LeaseTimeToLive``
first (etcd's Go client likewise trusts only etcd's word, or a whole TTL
without any answer).  A lease that expired (etcd did not
hear from us for a session) fences the broker: the next registration is a
new incarnation with a new epoch, and the metadata source's listeners run
(the broker re-derives its roles, as after a fencing by the embedded
controller).  While another session holds this broker id, registration
waits, as Kafka answers DUPLICATE_BROKER_REGISTRATION.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import uuid
from collections.abc import Callable

from partlog.controller.cluster_meta import BrokerInfo
from partlog.controller.etcd_connection import ETCD_ERRORS, EtcdConnection, put_revision
from partlog.controller.etcd_layout import EtcdView, Keys, enc_broker

__all__ = ["EtcdSession"]

log = logging.getLogger(__name__)

# A registration waiting for another session's lease logs every this many attempts.
DUPLICATE_LOG_EVERY = 30
# A keep-alive attempt gets this share of the keep-alive period (a third of
# the TTL) before it is abandoned and sent again: etcd holds a renewal on a
# follower until a leader answers (up to its request timeout, 5 s plus two
# election timeouts), longer than the period.
KEEPALIVE_ATTEMPT_PERIOD_SHARE = 0.5
# The longest pause between two keep-alive attempts, as a share of the
# period: failures are retried promptly, the next member is tried at once.
KEEPALIVE_RETRY_PERIOD_SHARE = 0.125
# A renewal this share of the TTL after the previous one is logged: the
# lease came close to expiring (etcd or this process's loop was slow).
KEEPALIVE_LATE_TTL_SHARE = 2 / 3


class EtcdSession:
    """The session of ``broker``.  ``failed`` counts and logs a call that
    got no usable answer, ``backoff`` gives the seconds before retry
    ``attempt`` (both the metadata source's)."""

    def __init__(
        self,
        conn: EtcdConnection,
        keys: Keys,
        broker: BrokerInfo,
        session_timeout_ms: int,
        *,
        failed: Callable[[str, BaseException], None],
        backoff: Callable[[int], float],
    ) -> None:
        self.conn = conn
        self.keys = keys
        self.broker = broker
        self.session_timeout_ms = session_timeout_ms
        self._failed = failed
        self._backoff = backoff
        self.lease_id = 0
        # This incarnation's epoch; -1 while (re)registering.
        self.broker_epoch = -1
        # KIP-966: this process's store shut down uncleanly; every registration
        # says so (the acting controller acts on it before it accepts one).
        self.unclean_shutdown = False
        self.registered = asyncio.Event()
        self._reregister = asyncio.Event()
        # Counters for tests, metrics and the benchmark.
        self.registrations = 0
        # Registration attempts refused because another session holds the id.
        self.duplicate_waits = 0
        self.keepalives = 0
        # Keep-alive attempts that got no usable answer (timed out, failed,
        # or a "no TTL" etcd's LeaseTimeToLive refuted) and were retried.
        self.keepalive_retries = 0
        # Keep-alives answered "no TTL" while LeaseTimeToLive still had one.
        self.keepalive_refuted = 0
        # The longest time between two renewals of one lease (seconds).
        self.keepalive_gap_s_max = 0.0

    def incarnation_gone(self, epoch: int) -> None:
        """The incarnation of ``epoch`` is over: register again (once)."""
        if epoch == self.broker_epoch and not self._reregister.is_set():
            log.warning("etcd: broker %s incarnation epoch=%d is fenced: registering again",
                        self.broker.broker_id, epoch)  # fmt: skip
            self._reregister.set()

    def check_view(self, view: EtcdView) -> None:
        """End this incarnation if ``view``, at or past its registration,
        no longer holds its key as registered."""
        epoch = self.broker_epoch
        if epoch > 0 and view.revision >= epoch:
            me = view.brokers.get(self.broker.broker_id)
            if me is None or me.epoch != epoch:
                # Our key is gone (the lease expired) or another process
                # registered this id: this incarnation is over.
                self.incarnation_gone(epoch)

    def _lease_ttl_s(self) -> int:
        return max(2, math.ceil(self.session_timeout_ms / 1000))

    async def register(self, cluster_id: uuid.UUID) -> None:
        """Register a new incarnation under a new lease, retrying until etcd
        answers.  Meanwhile ``broker_epoch`` is -1.

        The key is created only if it does not exist: while another session
        holds this broker id (a previous incarnation whose lease has not
        expired yet, or a second process started with the same id) this
        one waits, as Kafka answers DUPLICATE_BROKER_REGISTRATION until the
        old session times out.  Two processes can then never take turns
        fencing each other, and the old incarnation is fenced (its key gone,
        its partitions re-elected) before the new one exists.  Nothing is
        registered while the prefix names another cluster than ``cluster_id``."""
        bi = self.broker
        key = self.keys.broker(bi.broker_id)
        self.broker_epoch = -1
        self.registered.clear()
        attempt = 0
        while True:
            try:
                c = await self.conn.client()
                t = c.transactions
                lease = await c.lease(self._lease_ttl_s())
                ok, resp = await self.conn.txn(
                    [t.create(key) == 0, t.value(self.keys.cluster_id) == str(cluster_id).encode()],
                    [t.put(key, enc_broker(bi, lease.id, self.unclean_shutdown), lease=lease.id)],
                    [t.get(key), t.get(self.keys.cluster_id)],
                )
                if ok:
                    previous, self.lease_id = self.lease_id, lease.id
                    self.broker_epoch = put_revision(resp)
                    self.registrations += 1
                    self.registered.set()
                    log.info("etcd: broker %d registered epoch=%d lease=%x", bi.broker_id, self.broker_epoch, lease.id)
                    if previous and previous != lease.id:
                        # Our own previous lease: it holds nothing now, and
                        # revoking it ends its candidacy for the controller.
                        with contextlib.suppress(*ETCD_ERRORS):
                            await c.revoke_lease(previous)
                    return
                with contextlib.suppress(*ETCD_ERRORS):
                    await c.revoke_lease(lease.id)
                holder = resp[0][0][1] if resp and resp[0] else None
                if holder is not None:
                    self.duplicate_waits += 1
                    if self.duplicate_waits % DUPLICATE_LOG_EVERY == 1:
                        log.warning(
                            "etcd: broker id %d is registered by another live session (lease %x, epoch %d): "
                            "waiting for it to end (DUPLICATE_BROKER_REGISTRATION)",
                            bi.broker_id, holder.lease, holder.mod_revision,
                        )  # fmt: skip
                else:
                    log.error(
                        "etcd %s: cluster_id is no longer %s: not registering", self.conn.target.url(), cluster_id
                    )
            except ETCD_ERRORS as e:
                self._failed("register", e)
            await asyncio.sleep(self._backoff(attempt))
            attempt += 1

    async def run(self, cluster_id: uuid.UUID, on_new_incarnation: Callable[[], None]) -> None:
        """Keep the lease alive; when it is gone or the incarnation ended,
        register again and call ``on_new_incarnation``.  Runs until cancelled."""
        ttl_s = self._lease_ttl_s()
        period_s = ttl_s / 3
        loop = asyncio.get_running_loop()
        renewed = loop.time()
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period_s):
                    await self._reregister.wait()
            if not self._reregister.is_set():
                if await self._keep_alive(period_s):
                    now = loop.time()
                    gap, renewed = now - renewed, now
                    self.keepalive_gap_s_max = max(self.keepalive_gap_s_max, gap)
                    if gap > ttl_s * KEEPALIVE_LATE_TTL_SHARE:
                        log.warning("etcd: broker lease %x renewed %.1f s after the last renewal (TTL %d s)",
                                    self.lease_id, gap, ttl_s)  # fmt: skip
                    continue
                log.warning("etcd: broker lease %x expired: this incarnation is fenced", self.lease_id)
            self._reregister.clear()
            await self.register(cluster_id)
            renewed = loop.time()
            # The broker restarts its role: its partitions' roles come from
            # the views that follow (the controller moved its leaderships).
            on_new_incarnation()

    async def _keep_alive(self, period_s: float) -> bool:
        """Renew the lease; False once etcd says it is gone.  Each attempt
        is bounded by a share of the period and a failed one is retried
        promptly (see the module doc): waiting a whole period between tries
        could let the lease run out while one member hangs."""
        attempt_s = period_s * KEEPALIVE_ATTEMPT_PERIOD_SHARE
        attempt = 0
        while True:
            try:
                async with asyncio.timeout(attempt_s):
                    c = await self.conn.client()
                    reply = await c.refresh_lease(self.lease_id)
                # None: the stream ended without an answer (no word on the lease).
                if reply is not None and reply.TTL > 0:
                    self.keepalives += 1
                    return True
                if reply is not None and await self._lease_gone(attempt_s):
                    return False
                if reply is not None:
                    self.keepalive_refuted += 1
                    log.warning("etcd: a keep-alive of lease %x said it is gone, etcd says it is not: retrying",
                                self.lease_id)  # fmt: skip
            except ETCD_ERRORS as e:  # TimeoutError among them
                self._failed("keepalive", e)
            self.keepalive_retries += 1
            await asyncio.sleep(min(self._backoff(attempt), period_s * KEEPALIVE_RETRY_PERIOD_SHARE))
            attempt += 1

    async def _lease_gone(self, timeout_s: float) -> bool:
        """etcd's own word (LeaseTimeToLive, answered by its leader) that the
        lease is gone; an error here propagates (the caller retries)."""
        async with asyncio.timeout(timeout_s):
            c = await self.conn.client()
            info = await c.get_lease_info(self.lease_id, keys=False)
        return int(info.TTL) <= 0
