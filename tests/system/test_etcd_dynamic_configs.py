"""Dynamic broker and group configs on etcd (controller.etcd_configs)
against a real etcd on loopback: a change through one side is answered and
seen by another; invalid values write nothing; hostile values under the
prefix are refused and counted, never held; two writers racing on one
resource lose no update."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import Awaitable, Callable, Iterator

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog.controller.etcd_configs import CONFIGS_VALUE_BYTES_MAX, EtcdConfigs, config_key
from partlog.controller.etcd_connection import EtcdConnection
from partlog.controller.etcd_url import parse_etcd_url
from partlog.kafka.dynamic_config import RESOURCE_BROKER, RESOURCE_GROUP, DynamicChange
from partlog.kafka.errors import Errors
from partlog.kafka.topic_config import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT, ConfigOp
from partlog.tools.etcd_launcher import EtcdCluster
from tests.tmpdirs import module_dir

needs_etcd = pytest.mark.skipif(
    shutil.which("etcd") is None, reason="etcd is not installed (scripts/test installs Debian's etcd-server)"
)
WAIT_S = 20.0
SESSION = "consumer.session.timeout.ms"
HEARTBEAT = "consumer.heartbeat.interval.ms"


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with module_dir(tmp_path_factory, "etcd") as d, EtcdCluster(str(d), members=1) as cluster:
        yield cluster


def _url(etcd: EtcdCluster) -> str:
    return etcd.url(f"/c{uuid.uuid4().hex[:12]}")


async def _until(cond: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT_S):
        while not cond():
            await asyncio.sleep(0.02)


def _run(body: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(120):
            await body()

    asyncio.run(bounded())


def _change(rtype: int, name: str, *ops: tuple[int, str, str | None], replace: bool = False) -> DynamicChange:
    return DynamicChange(rtype, name, replace, tuple(ConfigOp(op, k, v) for op, k, v in ops))


def _ok(n: int) -> list[tuple[Errors, str | None]]:
    return [(Errors.NONE, None)] * n


@needs_etcd
def test_a_change_is_answered_and_seen_by_another_side(etcd: EtcdCluster) -> None:
    target = parse_etcd_url(_url(etcd))

    async def main() -> None:
        a, b = EtcdConfigs(target), EtcdConfigs(target)
        await a.start()
        await b.start()
        seen: list[int] = []
        b.add_listener(lambda: seen.append(b.configs.version))
        try:
            assert a.loaded and b.loaded and not a.configs.resources
            changes = [
                _change(
                    RESOURCE_BROKER,
                    "1",
                    (OP_SET, "background.threads", "9"),
                    (OP_APPEND, "log.cleanup.policy", "compact"),
                ),
                _change(RESOURCE_GROUP, "g", (OP_SET, SESSION, "50000")),
            ]
            # validate_only answers as the change would, and changes nothing.
            assert await a.alter_dynamic_configs(changes, validate_only=True) == _ok(2)
            assert not a.configs.resources
            assert await a.alter_dynamic_configs(changes, validate_only=False) == _ok(2)
            # The writer holds its change when it answers; the other soon.
            want = {"background.threads": "9", "log.cleanup.policy": "delete,compact"}
            assert a.configs.of(RESOURCE_BROKER, "1") == want
            await _until(lambda: b.configs.of(RESOURCE_BROKER, "1") == want)
            await _until(lambda: b.configs.group("g").session_timeout_ms == 50000)
            assert b.configs.group("g").heartbeat_interval_ms == 5000
            assert seen and b.configs.version == a.configs.version > 0
            # DELETE and SUBTRACT remove; a resource left empty has no key.
            gone = [
                _change(
                    RESOURCE_BROKER,
                    "1",
                    (OP_DELETE, "background.threads", None),
                    (OP_SUBTRACT, "log.cleanup.policy", "compact"),
                ),
                _change(RESOURCE_GROUP, "g", (OP_DELETE, SESSION, None)),
            ]
            assert await b.alter_dynamic_configs(gone, validate_only=True) == _ok(2)
            await asyncio.sleep(0.2)
            assert a.configs.of(RESOURCE_BROKER, "1") == want
            assert await b.alter_dynamic_configs(gone, validate_only=False) == _ok(2)
            assert b.configs.of(RESOURCE_BROKER, "1") == {"log.cleanup.policy": "delete"}
            await _until(lambda: a.configs.group("g").session_timeout_ms == 45000)
            assert (RESOURCE_GROUP, "g") not in a.configs.resources
            assert a.configs.of(RESOURCE_BROKER, "1") == {"log.cleanup.policy": "delete"}
            c = await a.conn.client()
            assert await c.get(config_key(a.root, RESOURCE_GROUP, "g")) is None
            assert a.refused == b.refused == 0
        finally:
            await b.stop()
            await a.stop()

    _run(main)


@needs_etcd
def test_invalid_values_are_refused_and_write_nothing(etcd: EtcdCluster) -> None:
    target = parse_etcd_url(_url(etcd))

    async def main() -> None:
        a = EtcdConfigs(target)
        await a.start()
        try:
            bad = [
                _change(RESOURCE_BROKER, "1", (OP_SET, "background.threads", "0")),
                _change(RESOURCE_BROKER, "", (OP_SET, "log.retention.ms", "soon")),
                _change(RESOURCE_GROUP, "g", (OP_SET, SESSION, "1000")),
                _change(RESOURCE_GROUP, "g", (OP_SET, HEARTBEAT, "50000")),
                _change(RESOURCE_GROUP, "g", (OP_SET, "unknown.config", "1")),
                _change(RESOURCE_BROKER, "1", (OP_APPEND, "background.threads", "2")),
            ]
            for validate_only in (True, False):
                answers = await a.alter_dynamic_configs(bad, validate_only=validate_only)
                # A BROKER resource's bad value is INVALID_REQUEST, as Kafka's broker answers.
                expected = [Errors.INVALID_REQUEST if c.resource_type == RESOURCE_BROKER else Errors.INVALID_CONFIG
                            for c in bad]  # fmt: skip
                assert [e for e, _ in answers] == expected, answers
                assert all(m for _, m in answers)
            c = await a.conn.client()
            assert [kv for kv in await c.get_prefix(a.root)] == []
            assert not a.configs.resources and a.refused == 0
            # A valid change beside an invalid one: only the valid one lands.
            mixed = [bad[0], _change(RESOURCE_GROUP, "g", (OP_SET, HEARTBEAT, "6000"))]
            answers = await a.alter_dynamic_configs(mixed, validate_only=False)
            assert [e for e, _ in answers] == [Errors.INVALID_REQUEST, Errors.NONE]
            assert dict(a.configs.resources) == {(RESOURCE_GROUP, "g"): {HEARTBEAT: "6000"}}
        finally:
            await a.stop()

    _run(main)


def _packed(v: object) -> bytes:
    out = msgpack.packb(v)
    assert isinstance(out, bytes)
    return out


# Garbage under the prefix: an undecodable key ('x' is not hex), and any bytes.
_garbage = st.dictionaries(
    st.binary(max_size=40).map(lambda b: b"x" + b),
    st.binary(max_size=200),
    max_size=5,
)


@needs_etcd
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(garbage=_garbage)
def test_hostile_values_are_refused_counted_and_never_held(etcd: EtcdCluster, garbage: dict[bytes, bytes]) -> None:
    target = parse_etcd_url(_url(etcd))

    async def main() -> None:
        configs = EtcdConfigs(target)
        raw = EtcdConnection(target, 5_000)
        root = configs.root
        good = {HEARTBEAT: "6000", SESSION: "50000"}
        hostile = {root + k: v for k, v in garbage.items()}
        hostile |= {
            # Another resource's configs under a key that is not its own.
            config_key(root, RESOURCE_GROUP, "h") + b"00": _packed(good),
            root + config_key(b"", RESOURCE_GROUP, "h").upper(): _packed(good),  # hex, but not ours
            root + _packed([True, "1"]).hex().encode(): _packed({"background.threads": "2"}),
            config_key(root, 7, "x"): _packed({"a": "b"}),
            config_key(root, RESOURCE_BROKER, "abc"): _packed({"background.threads": "2"}),
            config_key(root, RESOURCE_GROUP, "unknown"): _packed({"no.such.config": "1"}),
            config_key(root, RESOURCE_GROUP, "bad"): _packed({SESSION: "1"}),
            config_key(root, RESOURCE_GROUP, "int"): _packed({SESSION: 50000}),
            config_key(root, RESOURCE_GROUP, "empty"): _packed({}),
            config_key(root, RESOURCE_GROUP, "list"): _packed([SESSION, "50000"]),
            config_key(root, RESOURCE_GROUP, "huge"): _packed({SESSION: "5" * CONFIGS_VALUE_BYTES_MAX}),
            config_key(root, RESOURCE_BROKER, "2"): b"\x00" * (CONFIGS_VALUE_BYTES_MAX + 1),
        }
        c = await raw.client()
        await c.put(config_key(root, RESOURCE_GROUP, "g"), _packed(good))
        for k, v in hostile.items():
            await c.put(k, v)
        await configs.start()
        try:
            assert configs.loaded and dict(configs.configs.resources) == {(RESOURCE_GROUP, "g"): good}
            assert configs.refused == len(hostile)
            # While following: garbage keeps being refused; a good key
            # overwritten by garbage is gone (its defaults apply).
            await c.put(root + b"more", b"\xc1")
            await c.put(config_key(root, RESOURCE_GROUP, "g"), _packed({SESSION: "1"}))
            await _until(lambda: configs.refused == len(hostile) + 2)
            await _until(lambda: not configs.configs.resources)
            assert configs.configs.group("g").session_timeout_ms == 45000
            # A change overwrites a refused value under its resource's key.
            change = _change(RESOURCE_GROUP, "g", (OP_SET, SESSION, "55000"))
            assert await configs.alter_dynamic_configs([change], validate_only=False) == _ok(1)
            assert dict(configs.configs.resources) == {(RESOURCE_GROUP, "g"): {SESSION: "55000"}}
        finally:
            await configs.stop()
            await raw.close()

    _run(main)


@needs_etcd
def test_racing_writers_lose_no_update(etcd: EtcdCluster) -> None:
    target = parse_etcd_url(_url(etcd))
    rounds = 10

    async def main() -> None:
        a, b = EtcdConfigs(target), EtcdConfigs(target)
        await a.start()
        await b.start()
        try:
            sessions = [_change(RESOURCE_GROUP, "g", (OP_SET, SESSION, str(50000 + i))) for i in range(rounds)]
            beats = [_change(RESOURCE_GROUP, "g", (OP_SET, HEARTBEAT, str(6000 + i))) for i in range(rounds)]
            answers = await asyncio.gather(
                *(a.alter_dynamic_configs([ch], validate_only=False) for ch in sessions),
                *(b.alter_dynamic_configs([ch], validate_only=False) for ch in beats),
            )
            errors = [r[0][0] for r in answers]
            # A writer that lost every compare times out (nothing written);
            # with two writers, each wins most of its attempts.
            assert set(errors) <= {Errors.NONE, Errors.REQUEST_TIMED_OUT}, answers
            ok_a = [i for i in range(rounds) if errors[i] == Errors.NONE]
            ok_b = [i for i in range(rounds) if errors[rounds + i] == Errors.NONE]
            assert ok_a and ok_b, answers
            # Each side's alterations run one at a time, in order: the last
            # answered NONE of each is what a serial order of both ends with.
            want = {SESSION: str(50000 + ok_a[-1]), HEARTBEAT: str(6000 + ok_b[-1])}
            await _until(lambda: a.configs.of(RESOURCE_GROUP, "g") == b.configs.of(RESOURCE_GROUP, "g") == want)
            assert a.configs.group("g").session_timeout_ms == 50000 + ok_a[-1]
        finally:
            await b.stop()
            await a.stop()

    _run(main)


@needs_etcd
def test_a_change_of_more_resources_than_a_transaction_holds(etcd: EtcdCluster) -> None:
    target = parse_etcd_url(_url(etcd))

    async def main() -> None:
        a = EtcdConfigs(target)
        await a.start()
        try:
            # Over etcd's --max-txn-ops: written in batches, every change answered.
            many = [_change(RESOURCE_GROUP, f"g{i}", (OP_SET, SESSION, "50000")) for i in range(300)]
            assert await a.alter_dynamic_configs(many, validate_only=False) == _ok(300)
            assert len(a.configs.resources) == 300
        finally:
            await a.stop()

    _run(main)
