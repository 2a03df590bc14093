"""The controller RPC's bodies, both directions (:mod:`partlog.controller.server`
lists the methods), beside the other bodies' codecs in :mod:`partlog.rpc.wire`.

Requests: ``enc_*`` for the client, ``dec_*`` for the server; responses:
``enc_*_response`` for the server, ``dec_*_response`` for the client.
Decoders check shapes and raise :class:`~partlog.rpc.wire.WireError` naming
the field; Kafka errors travel as ``"error"`` (an unknown code decodes as
UNKNOWN_SERVER_ERROR).  A partition's value (:func:`enc_partition`) is also
what the controller's LMDB state and etcd keep.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from partlog.controller.cluster_meta import BrokerInfo, PartitionInfo, TopicInfo, kafka_listener_ports
from partlog.controller.model import MetadataSnapshot
from partlog.controller.rules import Refused
from partlog.kafka.errors import Errors
from partlog.kafka.producer_ids import ProducerIdBlock
from partlog.kafka.records import TopicIdPartition
from partlog.kafka.topic_config import TOPIC_CONFIG_OPS_MAX, ConfigOp
from partlog.limits import AZ_CHARS_MAX, BROKER_ID_MAX, BROKERS_MAX, HOST_CHARS_MAX, PORT_MAX, TOPICS_PER_REQUEST_MAX
from partlog.rpc.wire import WireError, expect_bytes, expect_int, expect_list, expect_map, expect_str, field

__all__ = [
    "dec_alter_partition",
    "dec_alter_partition_response",
    "dec_alter_topic_configs",
    "dec_alter_topic_configs_response",
    "dec_broker_epoch",
    "dec_configs",
    "dec_create_topics",
    "dec_create_topics_configs",
    "dec_create_topics_response",
    "dec_delete_topics",
    "dec_delete_topics_response",
    "dec_heartbeat_response",
    "dec_partition",
    "dec_pid_response",
    "dec_poll",
    "dec_poll_response",
    "dec_register",
    "dec_register_response",
    "dec_topic",
    "dec_unclean_shutdown",
    "enc_alter_partition",
    "enc_alter_partition_response",
    "enc_alter_topic_configs",
    "enc_alter_topic_configs_response",
    "enc_broker_epoch",
    "enc_configs",
    "enc_create_topics",
    "enc_create_topics_response",
    "enc_delete_topics",
    "enc_delete_topics_response",
    "enc_heartbeat_response",
    "enc_partition",
    "enc_pid_response",
    "enc_poll",
    "enc_register",
    "enc_register_response",
    "enc_snapshot",
    "enc_topic",
]


# What a refusal's message may carry back (Kafka's are one sentence).
_MESSAGE_CHARS_MAX = 1_000


def enc_partition(p: PartitionInfo) -> list[Any]:
    # The reassignment's lists only while one is in progress (seven items):
    # a settled partition encodes as before reassignments existed.
    # The ELR, when not empty, as an eighth item (the lists then always).
    moving = [list(p.adding), list(p.removing)] if p.adding or p.removing or p.elr else []
    elr = [list(p.elr)] if p.elr else []
    return [p.leader, p.leader_epoch, list(p.replicas), list(p.isr), p.partition_epoch, *moving, *elr]


def dec_partition(v: Any, what: str = "partition") -> PartitionInfo:
    items = expect_list(v, what)
    if len(items) not in (5, 7, 8):
        raise WireError(f"{what}: expected 5, 7 or 8 items, got {len(items)}")
    leader, leader_epoch, replicas, isr, partition_epoch = items[:5]
    adding, removing = (
        (_broker_ids(items[5], f"{what}.adding"), _broker_ids(items[6], f"{what}.removing"))
        if len(items) >= 7
        else ((), ())
    )
    elr = _broker_ids(items[7], f"{what}.elr") if len(items) == 8 else ()
    return PartitionInfo(
        expect_int(leader, f"{what}.leader"),
        expect_int(leader_epoch, f"{what}.leader_epoch"),
        _broker_ids(replicas, f"{what}.replicas"),
        _broker_ids(isr, f"{what}.isr"),
        expect_int(partition_epoch, f"{what}.partition_epoch"),
        adding,
        removing,
        elr,
    )


def _broker_ids(v: Any, what: str) -> tuple[int, ...]:
    return tuple(expect_int(r, f"{what}[]") for r in expect_list(v, what))


def enc_topic(t: TopicInfo) -> list[Any]:
    # The config overrides only when the controller keeps some (four items).
    configs = [] if t.configs is None else [enc_configs(t.configs)]
    return [t.name, t.topic_id.bytes, [enc_partition(p) for p in t.partitions], *configs]


def dec_topic(v: Any, what: str = "topic") -> TopicInfo:
    items = expect_list(v, what)
    if len(items) not in (3, 4):
        raise WireError(f"{what}: expected 3 or 4 items, got {len(items)}")
    name, tid, parts = items[:3]
    raw = expect_bytes(tid, f"{what}.topic_id")
    if len(raw) != 16:
        raise WireError(f"{what}.topic_id: expected 16 bytes, got {len(raw)}")
    return TopicInfo(
        uuid.UUID(bytes=raw),
        expect_str(name, f"{what}.name"),
        tuple(
            dec_partition(p, f"{what}.partitions[{i}]") for i, p in enumerate(expect_list(parts, f"{what}.partitions"))
        ),
        dec_configs(items[3], f"{what}.configs") if len(items) == 4 else None,
    )


def enc_configs(configs: Iterable[tuple[str, str]]) -> list[list[str]]:
    return [[k, v] for k, v in configs]


def dec_configs(v: Any, what: str) -> tuple[tuple[str, str], ...]:
    """Config overrides as sorted (name, value) pairs, each name once."""
    items = expect_list(v, what)
    if len(items) > TOPIC_CONFIG_OPS_MAX:
        raise WireError(f"{what}: at most {TOPIC_CONFIG_OPS_MAX} configs, got {len(items)}")
    out = {}
    for i, item in enumerate(items):
        k, val = expect_list(item, f"{what}[{i}]", 2)
        out[expect_str(k, f"{what}[{i}].name")] = expect_str(val, f"{what}[{i}].value")
    if len(out) != len(items):
        raise WireError(f"{what}: a config named twice")
    return tuple(sorted(out.items()))


def _dec_error(m: dict[str, Any], what: str) -> Errors:
    code = expect_int(field(m, "error", what), f"{what}.error")
    try:
        return Errors(code)
    except ValueError:
        return Errors.UNKNOWN_SERVER_ERROR


# register_broker


def enc_register(b: BrokerInfo, unclean_shutdown: bool = False) -> dict[str, Any]:
    """``unclean_shutdown`` (KIP-966; the caller sends it only at RPC version
    3 and above): the broker's store may have lost acknowledged entries."""
    out: dict[str, Any] = {"broker_id": b.broker_id, "az": b.az, "host": b.host, "port": b.port}
    out["kafka_port"] = b.kafka_port
    if b.kafka_listeners:
        out["kafka_listeners"] = b.kafka_listeners
    if unclean_shutdown:
        out["unclean_shutdown"] = True
    return out


def dec_unclean_shutdown(body: Any) -> bool:
    """A registration's ``unclean_shutdown`` (absent: False, a clean shutdown
    or an older broker)."""
    v = expect_map(body, "register_broker").get("unclean_shutdown", False)
    if type(v) is not bool:
        raise WireError(f"register_broker.unclean_shutdown: expected a bool, got {type(v).__name__}")
    return v


def dec_register(body: Any) -> BrokerInfo:
    w = "register_broker"
    m = expect_map(body, w)
    bid = expect_int(field(m, "broker_id", w), f"{w}.broker_id")
    az = expect_str(field(m, "az", w), f"{w}.az")
    host = expect_str(field(m, "host", w), f"{w}.host")
    port = expect_int(field(m, "port", w), f"{w}.port")
    if not 0 <= bid <= BROKER_ID_MAX:
        raise WireError(f"{w}.broker_id: must be in [0, {BROKER_ID_MAX}], got {bid}")
    if not 0 < len(az) <= AZ_CHARS_MAX:
        raise WireError(f"{w}.az: must be 1-{AZ_CHARS_MAX} characters, got {len(az)}")
    if len(host) > HOST_CHARS_MAX:
        raise WireError(f"{w}.host: must be at most {HOST_CHARS_MAX} characters, got {len(host)}")
    if not 0 <= port <= PORT_MAX:
        raise WireError(f"{w}.port: must be in [0, {PORT_MAX}], got {port}")
    kafka_port = expect_int(m.get("kafka_port", 0), f"{w}.kafka_port")
    if not 0 <= kafka_port <= PORT_MAX:
        raise WireError(f"{w}.kafka_port: must be in [0, {PORT_MAX}], got {kafka_port}")
    return BrokerInfo(bid, az, host, port, kafka_port, _kafka_listeners(m.get("kafka_listeners", ""), w))


def _kafka_listeners(v: Any, what: str) -> str:
    text = expect_str(v, f"{what}.kafka_listeners")
    if text:
        try:
            kafka_listener_ports(text)
        except ValueError as e:
            raise WireError(f"{what}: {e}") from None
    return text


def enc_register_response(answer: int | Errors) -> dict[str, Any]:
    if isinstance(answer, Errors):
        return {"error": int(answer), "broker_epoch": -1}
    return {"error": 0, "broker_epoch": answer}


def dec_register_response(body: Any) -> int | Errors:
    w = "register_broker response"
    m = expect_map(body, w)
    err = _dec_error(m, w)
    if err != Errors.NONE:
        return err
    epoch = expect_int(field(m, "broker_epoch", w), f"{w}.broker_epoch")
    if epoch < 0:
        raise WireError(f"{w}.broker_epoch: negative ({epoch})")
    return epoch


# heartbeat and allocate_producer_ids: who is asking


def enc_broker_epoch(broker_id: int, broker_epoch: int) -> dict[str, Any]:
    return {"broker_id": broker_id, "broker_epoch": broker_epoch}


def dec_broker_epoch(body: Any, w: str) -> tuple[int, int]:
    m = expect_map(body, w)
    return expect_int(field(m, "broker_id", w), f"{w}.broker_id"), expect_int(
        field(m, "broker_epoch", w), f"{w}.broker_epoch"
    )


def enc_heartbeat_response(err: Errors, version: int) -> dict[str, Any]:
    return {"error": int(err), "version": version}


def dec_heartbeat_response(body: Any) -> Errors:
    return _dec_error(expect_map(body, "heartbeat response"), "heartbeat response")


def enc_pid_response(answer: ProducerIdBlock | Errors, broker_id: int) -> dict[str, Any]:
    if isinstance(answer, Errors):
        return {"error": int(answer), "broker_id": broker_id, "first_producer_id": -1, "size": 0}
    return {
        "error": 0,
        "broker_id": answer.assigned_broker_id,
        "first_producer_id": answer.first_producer_id,
        "size": answer.size,
    }


def dec_pid_response(body: Any) -> ProducerIdBlock | Errors:
    w = "allocate_producer_ids response"
    m = expect_map(body, w)
    err = _dec_error(m, w)
    if err != Errors.NONE:
        return err
    block = ProducerIdBlock(
        expect_int(field(m, "broker_id", w), f"{w}.broker_id"),
        expect_int(field(m, "first_producer_id", w), f"{w}.first_producer_id"),
        expect_int(field(m, "size", w), f"{w}.size"),
    )
    if block.first_producer_id < 0 or block.size <= 0:
        raise WireError(f"{w}: bad block {block}")
    return block


# metadata_poll


def enc_poll(version: int, max_wait_ms: int) -> dict[str, Any]:
    return {"version": version, "max_wait_ms": max_wait_ms}


def dec_poll(body: Any) -> tuple[int, int]:
    w = "metadata_poll"
    m = expect_map(body, w)
    version = expect_int(field(m, "version", w), f"{w}.version")
    wait = expect_int(field(m, "max_wait_ms", w), f"{w}.max_wait_ms")
    if wait < 0:
        raise WireError(f"{w}.max_wait_ms: must be >= 0, got {wait}")
    return version, wait


def enc_snapshot(s: MetadataSnapshot) -> dict[str, Any]:
    """A metadata_poll answer with news; without news it is ``{"version": v}``."""
    return {
        "version": s.version,
        # The listeners' names only when a broker has them (six items).
        "brokers": [
            [b.broker_id, b.az, b.host, b.port, b.kafka_port, *([b.kafka_listeners] if b.kafka_listeners else [])]
            for b in s.brokers
        ],
        "topics": [enc_topic(t) for t in s.topics],
        "deleted_topics": [tid.bytes for tid in sorted(s.deleted_topics)],
    }


def dec_poll_response(body: Any) -> MetadataSnapshot | None:
    """The new snapshot, or None when the answer is "unchanged"."""
    w = "metadata_poll response"
    m = expect_map(body, w)
    version = expect_int(field(m, "version", w), f"{w}.version")
    if "topics" not in m and "brokers" not in m:
        return None
    brokers = []
    for i, b in enumerate(expect_list(field(m, "brokers", w), f"{w}.brokers")):
        what = f"{w}.brokers[{i}]"
        # Five fields since the Kafka listener (its port last); four before.
        fields = expect_list(b, what)
        if len(fields) not in (4, 5, 6):
            raise WireError(f"{what}: expected 4 to 6 items, got {len(fields)}")
        bid, az, host, port = fields[:4]
        brokers.append(
            BrokerInfo(
                expect_int(bid, f"{what}.id"),
                expect_str(az, f"{what}.az"),
                expect_str(host, f"{what}.host"),
                expect_int(port, f"{what}.port"),
                expect_int(fields[4], f"{what}.kafka_port") if len(fields) >= 5 else 0,
                _kafka_listeners(fields[5], what) if len(fields) == 6 else "",
            )
        )
    topics = [dec_topic(t, f"{w}.topics[{i}]") for i, t in enumerate(expect_list(field(m, "topics", w), f"{w}.topics"))]
    deleted = set()
    for i, raw in enumerate(expect_list(m.get("deleted_topics", []), f"{w}.deleted_topics")):
        tid = expect_bytes(raw, f"{w}.deleted_topics[{i}]")
        if len(tid) != 16:
            raise WireError(f"{w}.deleted_topics[{i}]: a topic id is 16 bytes, got {len(tid)}")
        deleted.add(uuid.UUID(bytes=tid))
    if deleted & {t.topic_id for t in topics}:
        raise WireError(f"{w}: a topic both live and deleted")
    return MetadataSnapshot(version, brokers, topics, deleted_topics=frozenset(deleted))


# alter_partition


def enc_alter_partition(
    broker_id: int, broker_epoch: int, tp: TopicIdPartition, leader_epoch: int, partition_epoch: int, isr: Iterable[int]
) -> dict[str, Any]:
    return {
        "broker_id": broker_id,
        "broker_epoch": broker_epoch,
        "topic_id": tp.topic_id.bytes,
        "partition": tp.partition,
        "leader_epoch": leader_epoch,
        "partition_epoch": partition_epoch,
        "isr": list(isr),
    }


def dec_alter_partition(body: Any) -> tuple[int, int, TopicIdPartition, int, int, list[int]]:
    w = "alter_partition"
    m = expect_map(body, w)
    bid, epoch = dec_broker_epoch(m, w)
    raw = expect_bytes(field(m, "topic_id", w), f"{w}.topic_id")
    if len(raw) != 16:
        raise WireError(f"{w}.topic_id: expected 16 bytes, got {len(raw)}")
    part = expect_int(field(m, "partition", w), f"{w}.partition")
    if part < 0:
        raise WireError(f"{w}.partition: negative ({part})")
    isr = expect_list(field(m, "isr", w), f"{w}.isr")
    if len(isr) > BROKERS_MAX:
        raise WireError(f"{w}.isr: at most {BROKERS_MAX} broker ids, got {len(isr)}")
    return (
        bid,
        epoch,
        TopicIdPartition(uuid.UUID(bytes=raw), part),
        expect_int(field(m, "leader_epoch", w), f"{w}.leader_epoch"),
        expect_int(field(m, "partition_epoch", w), f"{w}.partition_epoch"),
        [expect_int(r, f"{w}.isr[{i}]") for i, r in enumerate(isr)],
    )


def enc_alter_partition_response(answer: PartitionInfo | Errors) -> dict[str, Any]:
    if isinstance(answer, Errors):
        return {"error": int(answer), "partition": None}
    return {"error": 0, "partition": enc_partition(answer)}


def dec_alter_partition_response(body: Any) -> PartitionInfo | Errors:
    w = "alter_partition response"
    m = expect_map(body, w)
    err = _dec_error(m, w)
    if err != Errors.NONE:
        return err
    return dec_partition(field(m, "partition", w), f"{w}.partition")


# create_topics


def enc_delete_topics(names: Iterable[str]) -> dict[str, Any]:
    return {"topics": list(names)}


def dec_delete_topics(body: Any) -> list[str]:
    w = "delete_topics"
    m = expect_map(body, w)
    names = [expect_str(n, f"{w}.topics[{i}]") for i, n in enumerate(expect_list(field(m, "topics", w), f"{w}.topics"))]
    if len(names) > TOPICS_PER_REQUEST_MAX:
        raise WireError(f"{w}.topics: at most {TOPICS_PER_REQUEST_MAX}, got {len(names)}")
    return names


def enc_delete_topics_response(out: Mapping[str, uuid.UUID | Errors]) -> dict[str, Any]:
    return {
        "topics": [[name, int(a), None] if isinstance(a, Errors) else [name, 0, a.bytes] for name, a in out.items()]
    }


def dec_delete_topics_response(body: Any) -> dict[str, uuid.UUID | Errors]:
    w = "delete_topics response"
    m = expect_map(body, w)
    out: dict[str, uuid.UUID | Errors] = {}
    for i, item in enumerate(expect_list(field(m, "topics", w), f"{w}.topics")):
        name, code, tid = expect_list(item, f"{w}.topics[{i}]", 3)
        name = expect_str(name, f"{w}.topics[{i}].name")
        code = expect_int(code, f"{w}.topics[{i}].error")
        if code == 0:
            raw = expect_bytes(tid, f"{w}.topics[{i}].topic_id")
            if len(raw) != 16:
                raise WireError(f"{w}.topics[{i}].topic_id: 16 bytes, got {len(raw)}")
            out[name] = uuid.UUID(bytes=raw)
        else:
            try:
                out[name] = Errors(code)
            except ValueError:
                out[name] = Errors.UNKNOWN_SERVER_ERROR
    return out


def enc_create_topics(
    topics: Mapping[str, tuple[int, int]],
    configs: Mapping[str, Mapping[str, str]] | None = None,
    assignments: list[Any] | None = None,
) -> dict[str, Any]:
    """``assignments``: the encoded manual assignments
    (:func:`partlog.controller.topic_create.enc_assignments`), for a
    controller of RPC version 3 only."""
    out: dict[str, Any] = {"topics": [[name, partitions, rf] for name, (partitions, rf) in topics.items()]}
    if configs:  # only when some topic has overrides: older controllers refuse the field
        out["configs"] = [[name, enc_configs(sorted(c.items()))] for name, c in configs.items() if c]
    if assignments:
        out["assignments"] = assignments
    return out


def dec_create_topics_configs(body: Any) -> dict[str, tuple[tuple[str, str], ...]]:
    """The config overrides a create_topics asks, by topic name."""
    w = "create_topics"
    out = {}
    for i, item in enumerate(expect_list(expect_map(body, w).get("configs", []), f"{w}.configs")):
        name, configs = expect_list(item, f"{w}.configs[{i}]", 2)
        out[expect_str(name, f"{w}.configs[{i}].name")] = dec_configs(configs, f"{w}.configs[{i}].configs")
    return out


def dec_create_topics(body: Any) -> list[tuple[str, int, int]]:
    w = "create_topics"
    items = expect_list(field(expect_map(body, w), "topics", w), f"{w}.topics")
    if len(items) > TOPICS_PER_REQUEST_MAX:
        raise WireError(f"{w}.topics: at most {TOPICS_PER_REQUEST_MAX} topics, got {len(items)}")
    out = []
    for i, it in enumerate(items):
        name, partitions, rf = expect_list(it, f"{w}.topics[{i}]", 3)
        out.append(
            (
                expect_str(name, f"{w}.topics[{i}].name"),
                expect_int(partitions, f"{w}.topics[{i}].partitions"),
                expect_int(rf, f"{w}.topics[{i}].replication_factor"),
            )
        )
    return out


def enc_create_topics_response(
    version: int, answers: Iterable[tuple[str, TopicInfo | Errors | Refused]], messages: bool = False
) -> dict[str, Any]:
    """``messages``: a refusal's message as a fourth item (a peer of RPC
    version 3; an older one decodes exactly three items)."""

    def row(name: str, a: TopicInfo | Errors | Refused) -> list[Any]:
        if isinstance(a, TopicInfo):
            return [name, 0, enc_topic(a)]
        err, why = (a.error, a.message[:_MESSAGE_CHARS_MAX]) if isinstance(a, Refused) else (a, None)
        return [name, int(err), None, why] if messages else [name, int(err), None]

    return {"version": version, "topics": [row(name, a) for name, a in answers]}


def dec_create_topics_response(body: Any) -> dict[str, TopicInfo | Errors | Refused]:
    w = "create_topics response"
    out: dict[str, TopicInfo | Errors | Refused] = {}
    for i, item in enumerate(expect_list(field(expect_map(body, w), "topics", w), f"{w}.topics")):
        what = f"{w}.topics[{i}]"
        items = expect_list(item, what)
        if len(items) not in (3, 4):
            raise WireError(f"{what}: expected 3 or 4 items, got {len(items)}")
        name, code, topic = items[:3]
        err = _dec_error({"error": code}, what)
        name = expect_str(name, f"{what}.name")
        if err == Errors.NONE:
            out[name] = dec_topic(topic, f"{what}.topic")
        elif len(items) == 4 and items[3] is not None:
            out[name] = Refused(err, expect_str(items[3], f"{what}.message")[:_MESSAGE_CHARS_MAX])
        else:
            out[name] = err
    return out


# alter_topic_configs


def enc_alter_topic_configs(
    changes: Mapping[str, tuple[bool, Sequence[ConfigOp]]], validate_only: bool
) -> dict[str, Any]:
    return {
        "topics": [[name, replace, [[o.op, o.name, o.value] for o in ops]] for name, (replace, ops) in changes.items()],
        "validate_only": validate_only,
    }


def dec_alter_topic_configs(body: Any) -> tuple[dict[str, tuple[bool, tuple[ConfigOp, ...]]], bool]:
    w = "alter_topic_configs"
    m = expect_map(body, w)
    items = expect_list(field(m, "topics", w), f"{w}.topics")
    if len(items) > TOPICS_PER_REQUEST_MAX:
        raise WireError(f"{w}.topics: at most {TOPICS_PER_REQUEST_MAX}, got {len(items)}")
    out: dict[str, tuple[bool, tuple[ConfigOp, ...]]] = {}
    for i, item in enumerate(items):
        what = f"{w}.topics[{i}]"
        name, replace, ops = expect_list(item, what, 3)
        if not isinstance(replace, bool):
            raise WireError(f"{what}.replace: not a bool")
        decoded = []
        for j, op in enumerate(expect_list(ops, f"{what}.ops")):
            code, key, value = expect_list(op, f"{what}.ops[{j}]", 3)
            code = expect_int(code, f"{what}.ops[{j}].op")
            if not 0 <= code <= 3 or (value is None) != (code == 1):
                raise WireError(f"{what}.ops[{j}]: op {code} with value {value!r:.40}")
            value = None if value is None else expect_str(value, f"{what}.ops[{j}].value")
            decoded.append(ConfigOp(code, expect_str(key, f"{what}.ops[{j}].name"), value))
        out[expect_str(name, f"{what}.name")] = (replace, tuple(decoded))
    return out, bool(m.get("validate_only", False))


def enc_alter_topic_configs_response(version: int, out: Mapping[str, tuple[Errors, str | None]]) -> dict[str, Any]:
    return {"version": version, "topics": [[name, int(err), msg] for name, (err, msg) in out.items()]}


def dec_alter_topic_configs_response(body: Any) -> tuple[int, dict[str, tuple[Errors, str | None]]]:
    w = "alter_topic_configs response"
    m = expect_map(body, w)
    out: dict[str, tuple[Errors, str | None]] = {}
    for i, item in enumerate(expect_list(field(m, "topics", w), f"{w}.topics")):
        name, code, msg = expect_list(item, f"{w}.topics[{i}]", 3)
        err = _dec_error({"error": code}, f"{w}.topics[{i}]")
        out[expect_str(name, f"{w}.topics[{i}].name")] = (err, None if msg is None else expect_str(msg, f"{w}.msg"))
    return expect_int(field(m, "version", w), f"{w}.version"), out
