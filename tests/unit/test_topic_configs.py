"""Topic configs the controller keeps (docs/design/topic-configs.md): the
ops over overrides against a small reference model, the embedded
controller's persistence, the wire, the etcd view, and what a broker's
store is given (the Kafka clients against running clusters are in
tests/system/test_kafka_topic_configs.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog.broker.topic_configs import TopicConfigSync
from partlog.controller.cluster_meta import PartitionInfo, TopicInfo
from partlog.controller.core import Controller, ControllerConfig
from partlog.controller.etcd_layout import KV, EtcdView, Keys, enc_topic_configs
from partlog.controller.etcd_layout import enc_topic as etcd_topic
from partlog.controller.wire import (
    dec_alter_topic_configs,
    dec_create_topics_configs,
    dec_topic,
    enc_alter_topic_configs,
    enc_create_topics,
    enc_topic,
)
from partlog.kafka.errors import Errors
from partlog.kafka.topic_config import (
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    ConfigOp,
    TopicConfig,
    TopicConfigError,
    apply_config_ops,
)
from partlog.rpc.methods import CONTROLLER_SCHEMAS
from partlog.rpc.wire import WireError

# ----------------------------------------------------------- the reference


def model_apply(current: dict[str, str], ops: list[ConfigOp], replace: bool) -> dict[str, str] | None:
    """What the overrides become, or None when Kafka answers INVALID_CONFIG:
    written from Kafka's ConfigurationControlManager and LogConfig, for the
    few keys the test draws from."""
    out = {} if replace else dict(current)
    for o in ops:
        if o.op == OP_SET:
            out[o.name] = o.value or ""
        elif o.op == OP_DELETE:
            out.pop(o.name, None)
        else:
            if o.name != "cleanup.policy":
                return None  # Can't APPEND/SUBTRACT to a config that is not a LIST
            items = [v for v in out.get(o.name, "delete").split(",") if v]
            for v in (o.value or "").split(","):
                if o.op == OP_APPEND and v not in items:
                    items.append(v)
                elif o.op == OP_SUBTRACT and v in items:
                    items.remove(v)
            out[o.name] = ",".join(items)
    for k, v in out.items():
        if k == "retention.ms":
            if not v.lstrip("-").isdigit() or int(v) < -1:
                return None
        elif k == "cleanup.policy":
            items = [x.strip() for x in v.split(",")]
            if not v.strip() or any(x not in ("compact", "delete") for x in items) or len(set(items)) != len(items):
                return None
        elif k == "min.compaction.lag.ms":
            if not v.isdigit():
                return None
        else:
            return None  # an unknown name
    if int(out.get("min.compaction.lag.ms", "0")) > 2**63 - 1:
        return None
    return out


KEYS = st.sampled_from(["retention.ms", "cleanup.policy", "min.compaction.lag.ms", "no.such.config"])
VALUES = st.sampled_from(["1000", "-1", "-2", "x", "compact", "delete", "compact,delete", "delete,delete", "", "0"])
OPS = st.lists(
    st.builds(lambda op, k, v: ConfigOp(op, k, None if op == OP_DELETE else v), st.integers(0, 3), KEYS, VALUES),
    max_size=4,
    unique_by=lambda o: o.name,  # the front end refuses a key named twice
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(OPS, st.booleans()), max_size=8))
def test_ops_match_the_reference_model(steps: list[tuple[list[ConfigOp], bool]]) -> None:
    current: dict[str, str] = {}
    for ops, replace in steps:
        want = model_apply(current, ops, replace)
        try:
            got: dict[str, str] | None = apply_config_ops(current, ops, replace=replace)
        except TopicConfigError:
            got = None
        assert got == want, (current, ops, replace)
        if got is not None:
            current = got


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(OPS, st.booleans(), st.booleans()), min_size=1, max_size=6))
def test_the_controller_keeps_what_the_model_says_across_restarts(
    tmp_path: Path, steps: list[tuple[list[ConfigOp], bool, bool]]
) -> None:
    path = tmp_path / f"ctl-{uuid.uuid4().hex}"
    c = Controller(ControllerConfig(str(path)), now_ms=0)
    try:
        c.register_broker(1, "az1", "127.0.0.1", 9001, 0)
        assert isinstance(c.create_topic("t", 1, 1), TopicInfo)
        current: dict[str, str] | None = None  # never configured
        for ops, replace, validate_only in steps:
            want = model_apply(current or {}, ops, replace)
            answer = c.alter_topic_configs({"t": (replace, ops), "gone": (replace, ops)}, validate_only=validate_only)
            if want is None:
                assert answer["t"][0] == Errors.INVALID_CONFIG and answer["t"][1]
                assert answer["gone"][0] == Errors.INVALID_CONFIG  # validation first, as Kafka's controller
            else:
                assert answer == {"t": (Errors.NONE, None), "gone": (Errors.UNKNOWN_TOPIC_OR_PARTITION, None)}
                if not validate_only:
                    current = want
            t = c.topic("t")
            assert t is not None and (t.configs is None) == (current is None)
            assert dict(t.configs or ()) == (current or {})
            c.check()
        c.close()
        c = Controller(ControllerConfig(str(path)), now_ms=0)
        t = c.topic("t")
        assert t is not None and dict(t.configs or ()) == (current or {})
        assert [x.configs for x in c.snapshot().topics] == [t.configs]
    finally:
        c.close()


def test_kafka_messages_and_list_ops() -> None:
    assert apply_config_ops({}, [ConfigOp(OP_APPEND, "cleanup.policy", "compact")]) == {
        "cleanup.policy": "delete,compact"
    }
    assert (
        apply_config_ops({"cleanup.policy": "compact,delete"}, [ConfigOp(OP_SUBTRACT, "cleanup.policy", "delete")])[
            "cleanup.policy"
        ]
        == "compact"
    )
    for ops, says in (
        ([ConfigOp(OP_SET, "retention.ms", "abc")],
         "Invalid value abc for configuration retention.ms: Not a number of type LONG"),
        ([ConfigOp(OP_SET, "retention.ms", "-5")],
         "Invalid value -5 for configuration retention.ms: Value must be at least -1"),
        ([ConfigOp(OP_SET, "segment.bytes", str(1 << 40))], "Value must be no more than 2147483647"),
        ([ConfigOp(OP_SET, "bogus", "1")], "Unknown topic config name: bogus"),
        ([ConfigOp(OP_APPEND, "retention.ms", "1")], "Can't APPEND to key retention.ms because its type is not LIST."),
        ([ConfigOp(OP_SET, "min.cleanable.dirty.ratio", "2")], "min.cleanable.dirty.ratio"),
        ([ConfigOp(OP_SET, "retention.ms", "9" * 5000)], "retention.ms"),
    ):  # fmt: skip
        with pytest.raises(TopicConfigError) as e:
            apply_config_ops({}, ops)
        assert says in str(e.value) and len(str(e.value)) < 500
    # AlterConfigs: what is not set goes back to its default.
    assert apply_config_ops({"retention.ms": "1"}, [ConfigOp(OP_SET, "segment.ms", "5")], replace=True) == {
        "segment.ms": "5"
    }


def test_create_topic_with_configs_and_deletion_drops_them(tmp_path: Path) -> None:
    with Controller(ControllerConfig(str(tmp_path / "c")), now_ms=0) as c:
        c.register_broker(1, "az1", "127.0.0.1", 9001, 0)
        assert c.create_topic("bad", 1, 1, {"retention.ms": "x"}) == Errors.INVALID_CONFIG
        assert c.topic("bad") is None
        t = c.create_topic("t", 1, 1, {"cleanup.policy": "compact"})
        assert isinstance(t, TopicInfo) and t.configs == (("cleanup.policy", "compact"),)
        plain = c.create_topic("plain", 1, 1, {})
        assert isinstance(plain, TopicInfo) and plain.configs is None
        c.delete_topics(["t"])
        c.check()
    with Controller(ControllerConfig(str(tmp_path / "c")), now_ms=0) as c:
        assert c.topic("t") is None
        c.check()  # no configs of a deleted topic


# ----------------------------------------------------------------- wire


def test_wire_round_trips_and_old_peers() -> None:
    p = PartitionInfo(1, 0, (1,), (1,), 0)
    t = TopicInfo(uuid.uuid4(), "t", (p,), (("retention.ms", "5"),))
    assert dec_topic(enc_topic(t)) == t
    plain = TopicInfo(uuid.uuid4(), "p", (p,))
    assert len(enc_topic(plain)) == 3 and dec_topic(enc_topic(plain)) == plain  # as before configs
    with pytest.raises(WireError, match="twice"):
        dec_topic([*enc_topic(t)[:3], [["a", "1"], ["a", "2"]]])
    body = enc_create_topics({"t": (1, 1), "u": (1, 1)}, {"t": {"retention.ms": "5"}, "u": {}})
    CONTROLLER_SCHEMAS["create_topics"].check(body, "create_topics")
    assert dec_create_topics_configs(body) == {"t": (("retention.ms", "5"),)}
    assert "configs" not in enc_create_topics({"t": (1, 1)})  # older controllers refuse the field
    change = {"t": (False, (ConfigOp(OP_SET, "retention.ms", "1"), ConfigOp(OP_DELETE, "segment.ms", None)))}
    body = enc_alter_topic_configs(change, True)
    CONTROLLER_SCHEMAS["alter_topic_configs"].check(body, "alter_topic_configs")
    assert dec_alter_topic_configs(body) == (change, True)
    for bad_op in ([4, "a", "1"], [OP_SET, "a", None], [OP_DELETE, "a", "1"]):
        with pytest.raises(WireError):
            dec_alter_topic_configs({"topics": [["t", False, [bad_op]]]})
    with pytest.raises(WireError):
        CONTROLLER_SCHEMAS["alter_topic_configs"].check(
            {"topics": [["t", False, [[OP_SET, "retention.ms", "9" * 1001]]]]}, "alter_topic_configs"
        )


# ----------------------------------------------------------------- etcd


def test_etcd_view_carries_configs_and_refuses_garbage() -> None:
    keys = Keys("/p")
    view = EtcdView(keys)
    tid = uuid.uuid4()
    view.apply(KV(keys.topic("t"), etcd_topic(tid, [(1,)]), 5, 5))
    assert view.snapshot().topics[0].configs is None
    view.apply(KV(keys.topic_configs(tid), enc_topic_configs((("retention.ms", "9"),)), 6, 6))
    assert view.snapshot().topics[0].configs == (("retention.ms", "9"),)
    assert view.configs_of(tid) == ((("retention.ms", "9"),), 6)
    refused = view.refused
    view.apply(KV(keys.topic_configs(tid), b"\xc1", 6, 7))  # not msgpack
    view.apply(KV(keys.configs + b"nothex", enc_topic_configs(()), 8, 8))
    assert view.refused == refused + 2 and view.snapshot().topics[0].configs == (("retention.ms", "9"),)
    view.apply(KV(keys.topic_configs(tid), None, 0, 9))
    assert view.snapshot().topics[0].configs is None


# --------------------------------------------------------------- brokers


def test_a_broker_applies_a_configured_topics_whole_config_once() -> None:
    internal = {"__consumer_offsets": {"retention.ms": -1}}
    sync = TopicConfigSync(internal)
    p = (PartitionInfo(1, 0, (1,), (1,), 0),)
    plain = TopicInfo(uuid.uuid4(), "plain", p)
    t = TopicInfo(uuid.uuid4(), "t", p, (("retention.ms", "5"),))
    offsets = TopicInfo(uuid.uuid4(), "__consumer_offsets", p, (("retention.ms", "5"), ("segment.ms", "7")))
    [(a, whole), (b, whole_offsets)] = sync.pending([plain, t, offsets])
    assert (a, b) == (t, offsets)
    assert whole == {**TopicConfig().to_configs(), "retention.ms": "5"}  # the rest back to Kafka's defaults
    assert whole_offsets["retention.ms"] == "-1" and whole_offsets["segment.ms"] == "7"  # internal ones win
    sync.applied(t)
    assert [x for x, _ in sync.pending([plain, t])] == []
    emptied = TopicInfo(t.topic_id, "t", p, ())
    [(_, whole)] = sync.pending([emptied])
    assert whole == TopicConfig().to_configs()


def test_compression_type_and_file_delete_delay_are_kept_as_kafka_validates_them() -> None:
    """Kafka's topic configs librdkafka's tests set (0077, 0081): kept and
    described, validated as Kafka's ConfigDef does, not applied."""
    from partlog.kafka.topic_config import TopicConfig, TopicConfigError, validate_overrides

    c = validate_overrides({"compression.type": "zstd", "file.delete.delay.ms": "10000"})
    assert (c.compression_type, c.file_delete_delay_ms) == ("zstd", 10_000)
    assert TopicConfig().to_configs()["compression.type"] == "producer"
    assert TopicConfig().to_configs()["file.delete.delay.ms"] == "60000"
    for bad in ({"compression.type": "ZSTD"}, {"compression.type": ""}, {"file.delete.delay.ms": "-1"},
                {"file.delete.delay.ms": "soon"}):  # fmt: skip
        with pytest.raises(TopicConfigError, match="Invalid value"):
            validate_overrides(bad)


def test_flush_configs_are_kept_and_met_whatever_their_value() -> None:
    """flush.messages and flush.ms (librdkafka's 0081 sets flush.ms): Kafka's
    ranges (at least 1 and 0), default Long.MAX_VALUE; partlog acknowledges
    only durable batches, so any value is met."""
    from partlog.kafka.topic_config import TopicConfig, TopicConfigError, validate_overrides

    c = validate_overrides({"flush.ms": "12345678", "flush.messages": "1"})
    assert (c.flush_ms, c.flush_messages) == (12_345_678, 1)
    assert TopicConfig().to_configs()["flush.ms"] == str(2**63 - 1)
    assert TopicConfig().to_configs()["flush.messages"] == str(2**63 - 1)
    for bad in ({"flush.messages": "0"}, {"flush.ms": "-1"}, {"flush.ms": "soon"}, {"flush.ms": str(2**63)}):
        with pytest.raises(TopicConfigError, match="Invalid value"):
            validate_overrides(bad)


def test_the_applier_writes_many_topics_in_slices_and_never_stale() -> None:
    # Regression (librdkafka 0081 on a cluster with the suite's topics): a
    # dynamic default changed every topic at once and the broker, writing
    # them all without yielding, missed its heartbeats and was fenced.
    import asyncio

    from partlog.broker.topic_configs import TopicConfigApplier
    from partlog.controller.cluster_meta import TopicInfo

    topics = {f"t{i}": TopicInfo(uuid.UUID(int=i + 1), f"t{i}", (), configs=()) for i in range(50)}
    defaults: dict[str, str] = {}
    written: list[tuple[str, object]] = []
    ticks: list[int] = []

    def write(t: TopicInfo, whole: dict[str, str | int]) -> bool:
        written.append((t.name, whole["retention.ms"]))
        return t.name != "t7"  # one store refuses: not retried for ever

    async def run() -> None:
        tasks: list[asyncio.Task[None]] = []
        applier = TopicConfigApplier(TopicConfigSync({}), lambda: topics.values(), lambda: defaults, write,
                                     lambda c: tasks.append(asyncio.ensure_future(c)))  # fmt: skip
        applier.apply_all()
        assert len(written) == 50
        written.clear()

        async def ticker() -> None:
            for _ in range(100):
                ticks.append(len(written))
                await asyncio.sleep(0)

        defaults["retention.ms"] = "1000"
        applier.schedule()
        applier.schedule()  # one pass at a time
        tick = asyncio.ensure_future(ticker())
        # A topic changed during the pass is written with its newest config.
        await asyncio.sleep(0)
        topics["t49"] = TopicInfo(topics["t49"].topic_id, "t49", (), configs=(("retention.ms", "5"),))
        while tasks and not all(t.done() for t in tasks):
            await asyncio.gather(*tasks)
        await tick
        assert len(tasks) == 1
        assert {n for n, _ in written} == set(topics)
        assert dict(written)["t49"] == "5" and dict(written)["t0"] == "1000"
        # The loop ran between slices: not everything was written in one go.
        assert any(0 < n < 50 for n in ticks)

    asyncio.run(run())
