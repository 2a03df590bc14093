"""The fetch session cache (KIP-227, partlog/kafka_front/fetch_sessions.py)
against Kafka's rules: a reference model driven by hypothesis through full,
incremental and closing fetches, evictions and time, and the hostile cases
one by one (a huge session, epochs out of order, another principal's id,
a close while a fetch is in flight, a v13 fetch of a session made by names).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from partlog.kafka.errors import Errors
from partlog.kafka_front.fetch_sessions import (
    EPOCH_MAX,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchMeta,
    FetchSessionCache,
    Full,
    Incremental,
    Key,
    PartitionAnswer,
    PartitionRequest,
    SessionError,
    Sessionless,
    next_epoch,
)

KEYS: list[Key] = [(t, p) for t in ("a", "b") for p in range(3)]
SLOTS = 3
EVICTION_MS = 100
SESSION_MAX = 5
CACHE_MAX = 12


def _req(offset: int = 0) -> PartitionRequest:
    return PartitionRequest(fetch_offset=offset, max_bytes=1024)


def _ans(hwm: int = 0, records: int = 0, error: int = 0) -> PartitionAnswer:
    return PartitionAnswer(error=error, high_watermark=hwm, last_stable_offset=hwm, log_start_offset=0,
                           records_bytes=records)  # fmt: skip


def _cache(**kw: int) -> FetchSessionCache:
    rng = random.Random(7)
    return FetchSessionCache(rng.getrandbits, **kw)


def _full(cache: FetchSessionCache, keys: list[Key], now: int = 0, principal: str = "User:a") -> int:
    ctx = cache.new_context(FetchMeta(0, INITIAL_EPOCH, 12, principal), [(k, _req()) for k in keys], [], now)
    assert isinstance(ctx, Full)
    sid, keep = cache.answer(ctx, [_ans() for _ in keys], now)
    assert all(keep)
    return sid


# ------------------------------------------------------------------ the rules


def test_epochs_wrap_to_one_and_final_stays_final() -> None:
    assert next_epoch(INITIAL_EPOCH) == 1
    assert next_epoch(EPOCH_MAX) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_an_incremental_fetch_answers_only_news_and_moves_the_epoch() -> None:
    cache = _cache()
    sid = _full(cache, KEYS[:3])
    ctx = cache.new_context(FetchMeta(sid, 1, 12, "User:a"), [], [], 1)
    assert isinstance(ctx, Incremental) and [k for k, _ in ctx.fetching] == KEYS[:3]
    _, keep = cache.answer(ctx, [_ans(), _ans(hwm=5), _ans(records=10, hwm=0)], 1)
    assert keep == [False, True, True]
    # The partition that gave records moves to the end of the fetch order.
    assert list(cache.get(sid).partitions) == [KEYS[0], KEYS[1], KEYS[2]]  # type: ignore[union-attr]
    again = cache.new_context(FetchMeta(sid, 1, 12, "User:a"), [], [], 2)
    assert again == SessionError(Errors.INVALID_FETCH_SESSION_EPOCH)
    ctx = cache.new_context(FetchMeta(sid, 2, 12, "User:a"), [], [KEYS[0]], 2)
    assert isinstance(ctx, Incremental) and len(ctx.fetching) == 2
    # An error is always answered, and the partition again once it is gone.
    _, keep = cache.answer(ctx, [_ans(hwm=5, error=6), _ans()], 2)
    assert keep == [True, False]
    ctx = cache.new_context(FetchMeta(sid, 3, 12, "User:a"), [], [], 3)
    assert isinstance(ctx, Incremental)
    _, keep = cache.answer(ctx, [_ans(hwm=5), _ans()], 3)
    assert keep == [True, False]


def test_unknown_ids_other_principals_and_topic_id_mismatch() -> None:
    cache = _cache()
    sid = _full(cache, KEYS[:2])
    assert cache.new_context(FetchMeta(sid + 1, 1, 12, "User:a"), [], [], 0) == SessionError(
        Errors.FETCH_SESSION_ID_NOT_FOUND
    )
    assert cache.new_context(FetchMeta(0, 1, 12, "User:a"), [], [], 0) == SessionError(
        Errors.FETCH_SESSION_ID_NOT_FOUND
    )
    # Another principal neither uses nor closes it.
    assert cache.new_context(FetchMeta(sid, 1, 12, "User:eve"), [], [], 0) == SessionError(
        Errors.FETCH_SESSION_ID_NOT_FOUND
    )
    assert isinstance(cache.new_context(FetchMeta(sid, FINAL_EPOCH, 12, "User:eve"), [], [], 0), Sessionless)
    assert cache.get(sid) is not None
    assert cache.new_context(FetchMeta(sid, 1, 13, "User:a"), [], [], 0) == SessionError(
        Errors.FETCH_SESSION_TOPIC_ID_ERROR
    )


def test_closing_while_a_fetch_waits_answers_that_fetch_and_frees_the_slot() -> None:
    cache = _cache()
    sid = _full(cache, KEYS[:2])
    waiting = cache.new_context(FetchMeta(sid, 1, 12, "User:a"), [], [], 1)
    assert isinstance(waiting, Incremental)
    closing = cache.new_context(FetchMeta(sid, FINAL_EPOCH, 12, "User:a"), [(KEYS[0], _req())], [], 1)
    assert isinstance(closing, Sessionless)
    assert len(cache) == 0 and cache.partitions == 0
    assert cache.answer(waiting, [_ans(records=1), _ans()], 2)[1] == [True, False]
    assert cache.new_context(FetchMeta(sid, 2, 12, "User:a"), [], [], 2) == SessionError(
        Errors.FETCH_SESSION_ID_NOT_FOUND
    )


def test_a_session_of_a_million_partitions_is_not_made() -> None:
    cache = _cache()
    many = [(("t", i), _req()) for i in range(1_000_000)]
    ctx = cache.new_context(FetchMeta(0, INITIAL_EPOCH, 12, "User:a"), many, [], 0)
    assert isinstance(ctx, Full)
    sid, _ = cache.answer(ctx, [_ans()] * len(many), 0)
    assert sid == 0 and len(cache) == 0 and cache.partitions == 0


def test_growing_a_session_past_its_limit_closes_it() -> None:
    cache = _cache(session_partitions_max=3, cache_partitions_max=10)
    sid = _full(cache, KEYS[:2])
    ctx = cache.new_context(FetchMeta(sid, 1, 12, "User:a"), [(k, _req()) for k in KEYS[2:4]], [], 1)
    assert isinstance(ctx, Sessionless) and len(ctx.fetching) == 2
    assert len(cache) == 0 and cache.partitions == 0


def test_eviction_needs_a_stale_or_old_and_smaller_session() -> None:
    cache = _cache(slots=1, eviction_ms=100)
    first = _full(cache, KEYS[:2], now=0)
    assert _full(cache, KEYS[:3], now=50) == 0  # young: kept
    assert _full(cache, KEYS[:3], now=150, principal="User:b") != 0  # stale: evicted
    assert cache.get(first) is None and cache.stats["evictions"] == 1


def test_an_old_session_in_use_is_evicted_only_for_a_larger_one() -> None:
    cache = _cache(slots=1, eviction_ms=100)
    sid = _full(cache, KEYS[:2], now=0)
    assert isinstance(cache.new_context(FetchMeta(sid, 1, 12, "User:a"), [], [], 150), Incremental)
    assert _full(cache, KEYS[2:4], now=160) == 0  # as large: Kafka's EvictableKey keeps it
    assert cache.get(sid) is not None
    assert _full(cache, KEYS[2:5], now=170) != 0  # larger and the old one is older than eviction.ms
    assert cache.get(sid) is None


# ------------------------------------------------------------ the model


@dataclass
class ModelSession:
    principal: str
    privileged: bool
    created: int
    last_used: int
    touched: int  # order of last use among sessions
    epoch: int
    parts: dict[Key, tuple[int, int]] = field(default_factory=dict)  # key -> (hwm told, lso told)
    by_all: bool = False
    by_privileged: bool = False


class SessionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.rng = random.Random(0)
        self.cache = FetchSessionCache(self.rng.getrandbits, slots=SLOTS, eviction_ms=EVICTION_MS,
                                       session_partitions_max=SESSION_MAX, cache_partitions_max=CACHE_MAX)  # fmt: skip
        self.model: dict[int, ModelSession] = {}
        self.now = 0
        self.seq = 0

    def _touch(self, m: ModelSession) -> None:
        m.last_used = self.now
        self.seq += 1
        m.touched = self.seq
        old = self.now - m.created > EVICTION_MS
        m.by_all, m.by_privileged = old, old or not m.privileged

    def _model_evict(self, privileged: bool, size: int) -> bool:
        stalest = min(self.model.items(), key=lambda kv: kv[1].touched)
        if self.now - stalest[1].last_used > EVICTION_MS:
            del self.model[stalest[0]]
            return True
        cands = sorted(
            ((m.privileged, len(m.parts), sid) for sid, m in self.model.items()
             if (m.by_privileged if privileged else m.by_all)),
        )  # fmt: skip
        if not cands or (privileged, size, 0) < cands[0]:
            return False
        del self.model[cands[0][2]]
        return True

    @rule(ms=st.integers(0, 80))
    def tick(self, ms: int) -> None:
        self.now += ms

    @rule(
        keys=st.lists(st.sampled_from(KEYS), unique=True, max_size=len(KEYS)),
        principal=st.sampled_from(["User:a", "User:b"]),
        privileged=st.booleans(),
        close=st.booleans(),
        final=st.booleans(),
        hwm=st.integers(0, 2),
    )
    def full(self, keys: list[Key], principal: str, privileged: bool, close: bool, final: bool, hwm: int) -> None:
        named = next(iter(self.model), 0) if close else 0
        epoch = FINAL_EPOCH if final else INITIAL_EPOCH
        ctx = self.cache.new_context(FetchMeta(named, epoch, 12, principal, privileged),
                                     [(k, _req()) for k in keys], [], self.now)  # fmt: skip
        if named and self.model[named].principal == principal:
            del self.model[named]
        sid, keep = self.cache.answer(ctx, [_ans(hwm=hwm)] * len(keys), self.now)
        assert all(keep) and len(keep) == len(keys)
        if final:
            assert isinstance(ctx, Sessionless) and sid == 0
            return
        assert isinstance(ctx, Full)
        total = sum(len(m.parts) for m in self.model.values())
        fits = 0 < len(keys) <= SESSION_MAX and total + len(keys) <= CACHE_MAX
        if fits and (len(self.model) < SLOTS or self._model_evict(privileged, len(keys))):
            assert sid != 0 and sid not in self.model
            m = ModelSession(principal, privileged, self.now, self.now, 0, 1, {k: (hwm, hwm) for k in keys})
            self._touch(m)
            self.model[sid] = m
        else:
            assert sid == 0

    @precondition(lambda self: bool(self.model))
    @rule(
        data=st.data(),
        wrong_epoch=st.booleans(),
        other_principal=st.booleans(),
        add=st.lists(st.sampled_from(KEYS), unique=True, max_size=3),
        forget=st.lists(st.sampled_from(KEYS), unique=True, max_size=3),
    )
    def incremental(self, data: st.DataObject, wrong_epoch: bool, other_principal: bool, add: list[Key],
                    forget: list[Key]) -> None:  # fmt: skip
        sid = data.draw(st.sampled_from(sorted(self.model)))
        m = self.model[sid]
        epoch = m.epoch + 1 if wrong_epoch else m.epoch
        principal = "User:eve" if other_principal else m.principal
        ctx = self.cache.new_context(FetchMeta(sid, epoch, 12, principal), [(k, _req(1)) for k in add], forget,
                                     self.now)  # fmt: skip
        if other_principal:
            assert ctx == SessionError(Errors.FETCH_SESSION_ID_NOT_FOUND)
            return
        if wrong_epoch:
            assert ctx == SessionError(Errors.INVALID_FETCH_SESSION_EPOCH)
            return
        for k in add:
            m.parts.setdefault(k, (-1, -1))
        for k in forget:
            m.parts.pop(k, None)
        total = sum(len(s.parts) for s in self.model.values())
        if not m.parts or len(m.parts) > SESSION_MAX or total > CACHE_MAX:
            assert isinstance(ctx, Sessionless) and [k for k, _ in ctx.fetching] == add
            del self.model[sid]
            assert self.cache.answer(ctx, [_ans()] * len(add), self.now) == (0, [True] * len(add))
            return
        assert isinstance(ctx, Incremental)
        assert {k for k, _ in ctx.fetching} == set(m.parts)
        self._touch(m)
        m.epoch = next_epoch(m.epoch)
        answers = [
            _ans(hwm=data.draw(st.integers(0, 2)), records=data.draw(st.sampled_from([0, 0, 10])),
                 error=data.draw(st.sampled_from([0, 0, 0, 6])))
            for _ in ctx.fetching
        ]  # fmt: skip
        got_sid, keep = self.cache.answer(ctx, answers, self.now)
        assert got_sid == sid
        for (k, _), a, kept in zip(ctx.fetching, answers, keep, strict=True):
            told_hwm, told_lso = m.parts[k]
            news = a.records_bytes > 0 or a.error != 0 or a.high_watermark != told_hwm
            news = news or a.last_stable_offset != told_lso
            assert kept == news, (k, a, m.parts[k])
            m.parts[k] = (-1 if a.error else a.high_watermark, a.last_stable_offset)

    @invariant()
    def same_sessions(self) -> None:
        assert len(self.cache) == len(self.model) <= SLOTS
        assert self.cache.partitions == sum(len(m.parts) for m in self.model.values()) <= CACHE_MAX
        for sid, m in self.model.items():
            s = self.cache.get(sid)
            assert s is not None and s.epoch == m.epoch and set(s.partitions) == set(m.parts)


SessionMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_session_cache_against_model = SessionMachine.TestCase
