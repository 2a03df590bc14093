"""The session's keep-alive rule (issue 32) against a scripted etcd: an
attempt that hangs (a dead member, a follower waiting for an election) is
abandoned and retried well within the keep-alive period; a keep-alive that
says "no TTL" ends the session only when etcd's LeaseTimeToLive agrees; a
stream that ended without an answer is a failed attempt, not a loss (the
3-member etcd with its leader killed is in
tests/system/test_etcd_session_leader_kill.py)."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

from partlog.controller.cluster_meta import BrokerInfo
from partlog.controller.etcd_layout import Keys
from partlog.controller.etcd_session import KEEPALIVE_ATTEMPT_PERIOD_SHARE, EtcdSession

LEASE = 0x1234
TTL_S = 3  # a keep-alive period of 1 s: attempts of 0.5 s


@dataclass(frozen=True, slots=True)
class _TTL:
    TTL: int


class _Etcd:
    """Answers keep-alives from ``replies`` ("hang", None: a stream without
    answer, or a TTL) and LeaseTimeToLive with ``remaining``."""

    def __init__(self, replies: list[object], remaining: int) -> None:
        self.replies = deque(replies)
        self.remaining = remaining
        self.asked_ttl = 0

    async def client(self) -> _Etcd:
        return self

    async def refresh_lease(self, lease_id: int) -> _TTL | None:
        assert lease_id == LEASE
        r = self.replies.popleft()
        if r == "hang":
            await asyncio.sleep(3600)
        return None if r is None else _TTL(int(r))  # type: ignore[call-overload]

    async def get_lease_info(self, lease_id: int, *, keys: bool) -> _TTL:
        assert lease_id == LEASE and not keys
        self.asked_ttl += 1
        return _TTL(self.remaining)


def _session(etcd: _Etcd) -> tuple[EtcdSession, list[str]]:
    failed: list[str] = []
    s = EtcdSession(
        etcd,  # type: ignore[arg-type]
        Keys("/t"),
        BrokerInfo(1, "az1", "127.0.0.1", 9001),
        TTL_S * 1000,
        failed=lambda what, e: failed.append(what),
        backoff=lambda attempt: 0.01,
    )
    s.lease_id = LEASE
    return s, failed


def _keep_alive(etcd: _Etcd) -> tuple[bool, EtcdSession, list[str]]:
    async def main() -> tuple[bool, EtcdSession, list[str]]:
        s, failed = _session(etcd)
        # Bounded: a keep-alive that never gave up would hang the test.
        async with asyncio.timeout(30):
            ok = await s._keep_alive(TTL_S / 3)
        return ok, s, failed

    return asyncio.run(main())


def test_a_hanging_attempt_is_abandoned_and_retried_within_the_period() -> None:
    # The hanging attempt times out (its own bound, not the period's) and
    # the next one renews.
    ok, s, failed = _keep_alive(_Etcd(["hang", TTL_S], remaining=TTL_S))
    assert ok and s.keepalives == 1 and s.keepalive_retries == 1 and failed == ["keepalive"]
    assert 0 < KEEPALIVE_ATTEMPT_PERIOD_SHARE < 1


def test_no_ttl_is_a_loss_only_when_etcd_agrees() -> None:
    etcd = _Etcd([0, TTL_S], remaining=TTL_S)
    ok, s, _ = _keep_alive(etcd)
    assert ok and etcd.asked_ttl == 1 and s.keepalive_refuted == 1 and s.keepalive_retries == 1
    etcd = _Etcd([0], remaining=-1)
    ok, s, _ = _keep_alive(etcd)
    assert not ok and etcd.asked_ttl == 1 and s.keepalive_retries == 0


def test_a_stream_without_answer_is_retried_not_a_loss() -> None:
    etcd = _Etcd([None, None, TTL_S], remaining=-1)
    ok, s, _ = _keep_alive(etcd)
    assert ok and s.keepalive_retries == 2 and etcd.asked_ttl == 0
