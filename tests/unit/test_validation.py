"""Bad input, corrupt entries, read-only stores and LMDB map growth.

Every bad batch is committed between good ones in the same call: it gets the
error design.md's Validation table names, the good ones are appended as if it
were not there, and nothing of the bad one is written (``check() == []``,
``file_usage`` counts only accepted batches, producer state untouched).
"""

from __future__ import annotations

import dataclasses
import json
import struct
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import lmdb
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from partlog import (
    CommitBatchRequest,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    Errors,
    FileUsage,
    FindBatchRequest,
    MetadataStore,
    StoreError,
    TopicConfig,
    TopicConfigError,
    TopicIdPartition,
)
from partlog.kafka.batch_header import HEADER_SIZE, BatchHeader
from partlog.store import ENTRY_SIZE
from partlog.wal.key import WalKeyError, make_wal_key, parse_wal_key
from tests.batches import build_batch, request, wal_key
from tests.clock import Clock
from tests.paths import REPO

T0 = 1_700_000_000_000
BIG = 1 << 30
MAX_MESSAGE_BYTES = 1000
BEFORE_MAX_MS = 60_000
AFTER_MAX_MS = 10_000
DEADLINE_MS = 5_000


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> Iterator[MetadataStore]:
    with MetadataStore.open(
        tmp_path / "s", sync=False, clock=clock, commit_deadline_ms=DEADLINE_MS, map_size_bytes=1 << 24
    ) as s:
        yield s
        assert s.check() == []


def make_topic(store: MetadataStore, partitions: int = 2, /, **configs: str | int) -> list[TopicIdPartition]:
    tid = uuid.uuid4()
    store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "t", partitions, configs)])
    return [TopicIdPartition(tid, p) for p in range(partitions)]


def with_header(req: CommitBatchRequest, **fields: int) -> CommitBatchRequest:
    """``req`` with header fields overwritten (and the request kept consistent where it copies them)."""
    hdr = bytearray(req.header)
    layout = {
        "batch_length": (8, ">i"),
        "magic": (16, ">b"),
        "attributes": (21, ">h"),
        "last_offset_delta": (23, ">i"),
        "base_timestamp": (27, ">q"),
        "max_timestamp": (35, ">q"),
        "producer_id": (43, ">q"),
        "producer_epoch": (51, ">h"),
        "base_sequence": (53, ">i"),
        "record_count": (57, ">i"),
    }
    for name, value in fields.items():
        pos, fmt = layout[name]
        struct.pack_into(fmt, hdr, pos, value)
    return CommitBatchRequest.from_header(req.request_id, req.topic_id_partition, req.byte_offset, bytes(hdr))


def transactional_batch() -> bytes:
    """A transactional batch without a producer id (transactional batches
    with one are accepted since transactions: tests/unit/test_txn_store.py)."""
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=True,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    b.append(0, timestamp=T0, key=None, value=b"x", headers=[])
    return bytes(b.build())


GOOD_PID = 77
# A bad batch is built from this one (producer 5, seq 0) unless the case says otherwise.
BASE_BAD = build_batch(1, producer_id=5, producer_epoch=0, base_sequence=0, timestamp_ms=T0)

# name -> (make the bad request from (tp, other, byte_offset, file_size), expected error)
Maker = Callable[[TopicIdPartition, TopicIdPartition, int, int], CommitBatchRequest]


def _req(batch: bytes = BASE_BAD) -> Maker:
    return lambda tp, other, off, fs: request(tp, batch, byte_offset=off)


def _replace(**changes: int | bytes) -> Maker:
    return lambda tp, other, off, fs: dataclasses.replace(request(tp, BASE_BAD, byte_offset=off), **changes)  # type: ignore[arg-type]


def _hdr(batch: bytes = BASE_BAD, **fields: int) -> Maker:
    return lambda tp, other, off, fs: with_header(request(tp, batch, byte_offset=off), **fields)


BAD_CASES: dict[str, tuple[Maker, Errors]] = {
    # CORRUPT_MESSAGE: the header is not a v2 header of this batch.
    "magic 1": (_hdr(magic=1), Errors.CORRUPT_MESSAGE),
    "magic 0": (_hdr(magic=0), Errors.CORRUPT_MESSAGE),
    "magic 3": (_hdr(magic=3), Errors.CORRUPT_MESSAGE),
    "header 60 bytes": (_replace(header=BASE_BAD[:60]), Errors.CORRUPT_MESSAGE),
    "header 0 bytes": (_replace(header=b""), Errors.CORRUPT_MESSAGE),
    "header 62 bytes": (_replace(header=BASE_BAD[:62]), Errors.CORRUPT_MESSAGE),
    "size + 1": (_replace(size=len(BASE_BAD) + 1), Errors.CORRUPT_MESSAGE),
    "size - 1": (_replace(size=len(BASE_BAD) - 1), Errors.CORRUPT_MESSAGE),
    "batch length below header": (_hdr(batch_length=HEADER_SIZE - 13), Errors.CORRUPT_MESSAGE),
    "batch length negative": (_hdr(batch_length=-5), Errors.CORRUPT_MESSAGE),
    # INVALID_REQUEST: the request disagrees with the header or the file.
    "last < base": (_replace(last_offset=-1), Errors.INVALID_REQUEST),
    "last beyond header": (_replace(last_offset=3), Errors.INVALID_REQUEST),
    "producer id differs": (_replace(producer_id=6), Errors.INVALID_REQUEST),
    "producer id -1 in request": (_replace(producer_id=-1), Errors.INVALID_REQUEST),
    "producer epoch differs": (_replace(producer_epoch=1), Errors.INVALID_REQUEST),
    "base sequence differs": (_replace(base_sequence=1), Errors.INVALID_REQUEST),
    "byte range past file end": (
        lambda tp, other, off, fs: request(tp, BASE_BAD, byte_offset=fs - len(BASE_BAD) + 1),
        Errors.INVALID_REQUEST,
    ),
    "byte offset past file end": (
        lambda tp, other, off, fs: request(tp, BASE_BAD, byte_offset=fs + 10),
        Errors.INVALID_REQUEST,
    ),
    "negative byte offset": (lambda tp, other, off, fs: request(tp, BASE_BAD, byte_offset=-1), Errors.INVALID_REQUEST),
    # MESSAGE_TOO_LARGE: max.message.bytes of the topic.
    "larger than max.message.bytes": (
        _req(build_batch(1, value_bytes=MAX_MESSAGE_BYTES, timestamp_ms=T0)),
        Errors.MESSAGE_TOO_LARGE,
    ),
    # INVALID_RECORD: a batch Kafka's LogValidator refuses.
    "record count > delta + 1": (_hdr(record_count=2), Errors.INVALID_RECORD),
    "record count 0": (_hdr(record_count=0), Errors.INVALID_RECORD),
    "delta -1 count 0": (_hdr(last_offset_delta=-1, record_count=0), Errors.INVALID_RECORD),
    "transactional without producer id": (_req(transactional_batch()), Errors.INVALID_RECORD),
    "control": (_hdr(attributes=0x20), Errors.INVALID_RECORD),
    "transactional control": (_hdr(attributes=0x30), Errors.INVALID_RECORD),
    "producer id -2": (_hdr(producer_id=-2), Errors.INVALID_RECORD),
    "negative epoch with producer id": (_hdr(producer_epoch=-1), Errors.INVALID_RECORD),
    "negative sequence with producer id": (_hdr(base_sequence=-1), Errors.INVALID_RECORD),
    # UNKNOWN_TOPIC_OR_PARTITION
    "unknown partition": (
        lambda tp, other, off, fs: request(TopicIdPartition(tp.topic_id, 99), BASE_BAD, byte_offset=off),
        Errors.UNKNOWN_TOPIC_OR_PARTITION,
    ),
    "unknown topic": (
        lambda tp, other, off, fs: request(TopicIdPartition(uuid.uuid4(), 0), BASE_BAD, byte_offset=off),
        Errors.UNKNOWN_TOPIC_OR_PARTITION,
    ),
    # INVALID_TIMESTAMP: CreateTime outside message.timestamp.before/after.max.ms.
    "timestamp too old": (_req(build_batch(1, producer_id=5, producer_epoch=0, base_sequence=0,
                                           timestamp_ms=T0 - BEFORE_MAX_MS - 1)), Errors.INVALID_TIMESTAMP),
    "timestamp too new": (_req(build_batch(1, producer_id=5, producer_epoch=0, base_sequence=0,
                                           timestamp_ms=T0 + AFTER_MAX_MS + 1)), Errors.INVALID_TIMESTAMP),
    "max timestamp too new": (_req(build_batch(3, producer_id=5, producer_epoch=0, base_sequence=0,
                                               timestamp_ms=T0 + AFTER_MAX_MS - 1)), Errors.INVALID_TIMESTAMP),
    "base timestamp too old": (_hdr(base_timestamp=T0 - BEFORE_MAX_MS - 1), Errors.INVALID_TIMESTAMP),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_CASES))
def test_bad_batch_fails_alone(store: MetadataStore, case: str) -> None:
    make, expected = BAD_CASES[case]
    tp, other = make_topic(
        store,
        2,
        **{
            "max.message.bytes": MAX_MESSAGE_BYTES,
            "message.timestamp.before.max.ms": BEFORE_MAX_MS,
            "message.timestamp.after.max.ms": AFTER_MAX_MS,
        },
    )
    g1 = build_batch(2, producer_id=GOOD_PID, producer_epoch=0, base_sequence=0, timestamp_ms=T0)
    g2 = build_batch(3, producer_id=GOOD_PID, producer_epoch=0, base_sequence=2, timestamp_ms=T0)
    g3 = build_batch(1, timestamp_ms=T0)
    bad_len = 2000
    file_size = len(g1) + bad_len + len(g2) + len(g3)
    bad = make(tp, other, len(g1), file_size)
    reqs = [
        request(tp, g1, byte_offset=0),
        bad,
        request(tp, g2, byte_offset=len(g1) + bad_len),
        request(other, g3, byte_offset=len(g1) + bad_len + len(g2)),
    ]
    key = wal_key(T0)
    resps = store.commit_file(key, 1, file_size, reqs)
    assert [(r.errors, r.assigned_base_offset, r.is_duplicate) for r in resps] == [
        (Errors.NONE, 0, False),
        (expected, -1, False),
        (Errors.NONE, 2, False),
        (Errors.NONE, 0, False),
    ]
    assert resps[1].request is bad
    assert store.check() == []
    assert store.file_usage() == {key: FileUsage(3, len(g1) + len(g2) + len(g3))}
    assert store.partition_state(tp)["log_end_offset"] == 5
    [r] = store.find_batches([FindBatchRequest(tp, 0, BIG)], BIG)
    assert [(b.metadata.base_offset, b.metadata.producer_id) for b in r.batches] == [(0, GOOD_PID), (2, GOOD_PID)]
    # The bad batch left no producer state: producer 5 starts fresh (not a duplicate).
    fresh = build_batch(1, producer_id=5, producer_epoch=0, base_sequence=0, timestamp_ms=T0)
    [r5] = store.commit_file(wal_key(T0), 1, len(fresh), [request(tp, fresh, byte_offset=0)])
    assert (r5.errors, r5.assigned_base_offset, r5.is_duplicate) == (Errors.NONE, 5, False)


def test_all_bad_call_writes_nothing(store: MetadataStore) -> None:
    tp, _ = make_topic(store, **{"max.message.bytes": MAX_MESSAGE_BYTES})
    b = build_batch(1, timestamp_ms=T0)
    key = wal_key(T0)
    reqs = [dataclasses.replace(request(tp, b), size=len(b) + 1), request(TopicIdPartition(tp.topic_id, 7), b)]
    resps = store.commit_file(key, 1, 10_000, reqs)
    assert [r.errors for r in resps] == [Errors.CORRUPT_MESSAGE, Errors.UNKNOWN_TOPIC_OR_PARTITION]
    assert store.file_usage() == {}
    assert store.referenced_files([key]) == set()
    assert store.partition_state(tp)["log_end_offset"] == 0
    assert store.commit_file(key, 1, 10_000, []) == []
    assert store.file_usage() == {}


def test_boundaries_accepted(store: MetadataStore, clock: Clock) -> None:
    """Exactly at each limit is still valid."""
    tp, _ = make_topic(
        store,
        **{"message.timestamp.before.max.ms": BEFORE_MAX_MS, "message.timestamp.after.max.ms": AFTER_MAX_MS},
    )
    big = build_batch(1, value_bytes=500, timestamp_ms=T0)
    store.alter_topic_configs(tp.topic_id, {"max.message.bytes": len(big)})
    old = build_batch(1, timestamp_ms=T0 - BEFORE_MAX_MS)
    new = build_batch(2, timestamp_ms=T0 + AFTER_MAX_MS - 1)  # max exactly now + after
    items = [big, old, new]
    file_size = sum(len(b) for b in items)
    reqs = []
    off = 0
    for b in items:
        reqs.append(request(tp, b, byte_offset=off))
        off += len(b)
    assert reqs[-1].byte_offset + reqs[-1].size == file_size  # the last batch ends exactly at the file end
    resps = store.commit_file(wal_key(T0), 1, file_size, reqs)
    assert [(r.errors, r.assigned_base_offset) for r in resps] == [(Errors.NONE, 0), (Errors.NONE, 1), (Errors.NONE, 2)]
    store.alter_topic_configs(tp.topic_id, {"max.message.bytes": len(big) - 1})
    [r] = store.commit_file(wal_key(T0), 1, len(big), [request(tp, big, byte_offset=0)])
    assert r.errors == Errors.MESSAGE_TOO_LARGE


def test_log_append_time_topic_skips_timestamp_checks(store: MetadataStore) -> None:
    configs: dict[str, str | int] = {
        "message.timestamp.type": "LogAppendTime",
        "message.timestamp.before.max.ms": 0,
        "message.timestamp.after.max.ms": 0,
    }
    tp, _ = make_topic(store, **configs)
    a, b = build_batch(1, timestamp_ms=0), build_batch(1, timestamp_ms=T0 * 2)
    resps = store.commit_file(
        wal_key(T0), 1, len(a) + len(b), [request(tp, a, byte_offset=0), request(tp, b, byte_offset=len(a))]
    )
    assert [(r.errors, r.log_append_time) for r in resps] == [(Errors.NONE, T0), (Errors.NONE, T0)]


def test_no_timestamp_batches_are_not_timestamp_checked(store: MetadataStore) -> None:
    tp, _ = make_topic(store, **{"message.timestamp.before.max.ms": BEFORE_MAX_MS})
    b = build_batch(1, timestamp_ms=-1)
    [r] = store.commit_file(wal_key(T0), 1, len(b), [request(tp, b, byte_offset=0)])
    assert r.errors == Errors.NONE


def test_producer_set_log_append_time_bit_refused(store: MetadataStore) -> None:
    tp, _ = make_topic(store, **{"message.timestamp.type": "LogAppendTime"})
    bad = with_header(request(tp, build_batch(1, timestamp_ms=T0)), attributes=0x08)
    [r] = store.commit_file(wal_key(T0), 1, 1000, [bad])
    assert r.errors == Errors.INVALID_TIMESTAMP


def test_producer_set_log_append_time_bit_on_create_time_topic(store: MetadataStore) -> None:
    tp, _ = make_topic(store)
    bad = with_header(request(tp, build_batch(1, timestamp_ms=T0)), attributes=0x08)
    [r] = store.commit_file(wal_key(T0), 1, 1000, [bad])
    assert r.errors == Errors.NONE and r.log_append_time == -1
    [f] = store.find_batches([FindBatchRequest(tp, 0, BIG)], BIG)
    md = f.batches[0].metadata
    assert md.timestamp_type == 0 and not md.header[22] & 0x08
    assert BatchHeader.parse(md.header).timestamp_type == 0


@pytest.mark.parametrize(
    "change", [{"last_sequence": 9}, {"batch_max_timestamp": T0 + 5}, {"message_timestamp_type": 1}]
)
def test_other_request_fields_disagreeing_with_header(store: MetadataStore, change: dict[str, int]) -> None:
    tp, _ = make_topic(store)
    bad = dataclasses.replace(request(tp, BASE_BAD), **change)  # type: ignore[arg-type]
    [r] = store.commit_file(wal_key(T0), 1, 1000, [bad])
    assert r.errors == Errors.INVALID_REQUEST


# ------------------------------------------------------------ object keys


@pytest.mark.parametrize(
    "key",
    [
        "1700000000000-1-abc.wal",  # no shard
        "wal/zz/1700000000000-1-abc.wal",  # bad shard
        "wal/A1/1700000000000-1-abc.wal",  # bad shard (upper case)
        "wal/ab/segment.wal",  # bad file name
        "wal/ab/1700000000000-1-abc.tmp",  # bad file name
        "wal/ab/17000000000-1-abc.wal",  # created_ms not 13 digits
        "wal/../ab/1700000000000-1-abc.wal",  # '..' component
        "../ab/1700000000000-1-abc.wal",  # '..' component
        "wal//ab/1700000000000-1-abc.wal",  # empty component
        "",
    ],
)
def test_malformed_object_key_fails_every_batch(store: MetadataStore, key: str) -> None:
    tp, other = make_topic(store)
    b = build_batch(1, timestamp_ms=T0)
    reqs = [
        request(tp, b, byte_offset=0),
        request(other, b, byte_offset=len(b)),
        request(TopicIdPartition(uuid.uuid4(), 0), b),
    ]
    resps = store.commit_file(key, 1, 10_000, reqs)
    assert [(r.errors, r.assigned_base_offset) for r in resps] == [(Errors.INVALID_REQUEST, -1)] * 3
    assert store.file_usage() == {}
    assert store.referenced_files([key]) == set()
    assert store.partition_state(tp)["log_end_offset"] == 0


def test_long_valid_object_key_does_not_fail_the_store(store: MetadataStore) -> None:
    # Regression: a key of 512-1024 bytes (valid for S3) once passed the key
    # check and fail-stopped the store on LMDB's 511-byte key limit.
    tp, _ = make_topic(store)
    long_key = str(make_wal_key("p" * 480, T0, 1, "ab"))
    assert len(long_key.encode()) <= 511
    longer_key = "p" * 520 + long_key[480:]
    assert 511 < len(longer_key.encode()) <= 1024
    with pytest.raises(WalKeyError, match="longer than 511 bytes"):
        parse_wal_key(longer_key)
    b = build_batch(1, timestamp_ms=T0)
    try:
        [r] = store.commit_file(long_key, 1, len(b), [request(tp, b, byte_offset=0)])
        assert r.errors == Errors.NONE
        assert store.referenced_files([long_key, longer_key]) == {long_key}
        [r] = store.commit_file(longer_key, 1, len(b), [request(tp, b, byte_offset=0)])
        assert r.errors == Errors.INVALID_REQUEST
    finally:
        # Whatever the answer, the store must keep serving other commits.
        [r2] = store.commit_file(wal_key(T0), 1, len(b), [request(tp, b, byte_offset=0)])
        assert r2.errors == Errors.NONE


def test_referenced_files_of_empty_key(store: MetadataStore) -> None:
    assert store.referenced_files(["", "wal/ab/1700000000000-1-abc.wal"]) == set()


def test_referenced_files_of_unknown_keys(store: MetadataStore) -> None:
    keys = ["x" * 600, "not a key", "wal/ab/1700000000000-1-abc.wal", "é/ab"]
    assert store.referenced_files(keys) == set()
    assert store.referenced_files([]) == set()


@pytest.mark.parametrize("file_size", [0, -1])
def test_non_positive_file_size_fails_every_batch(store: MetadataStore, file_size: int) -> None:
    tp, _ = make_topic(store)
    b = build_batch(1, timestamp_ms=T0)
    resps = store.commit_file(wal_key(T0), 1, file_size, [request(tp, b, byte_offset=0)] * 2)
    assert [r.errors for r in resps] == [Errors.INVALID_REQUEST] * 2
    assert store.file_usage() == {}


def test_commit_deadline(store: MetadataStore, clock: Clock) -> None:
    tp, other = make_topic(store)
    b = build_batch(1, timestamp_ms=T0)
    reqs = [request(tp, b, byte_offset=0), request(other, b, byte_offset=len(b))]
    clock.now = T0 + DEADLINE_MS + 1
    late = wal_key(T0)
    resps = store.commit_file(late, 1, 2 * len(b), reqs)
    assert [(r.errors, r.assigned_base_offset) for r in resps] == [(Errors.COMMIT_DEADLINE_EXCEEDED, -1)] * 2
    assert Errors.COMMIT_DEADLINE_EXCEEDED.value == 10_000 and Errors.COMMIT_DEADLINE_EXCEEDED.retriable
    assert store.referenced_files([late]) == set()
    assert store.file_usage() == {}
    # Exactly at the deadline: still accepted.
    clock.now = T0 + DEADLINE_MS
    on_time = wal_key(T0)
    resps = store.commit_file(on_time, 1, 2 * len(b), reqs)
    assert [(r.errors, r.assigned_base_offset) for r in resps] == [(Errors.NONE, 0), (Errors.NONE, 0)]
    assert store.referenced_files([late, on_time]) == {on_time}
    # An object already referenced gains no new reference after its deadline either.
    clock.now = T0 + DEADLINE_MS + 1
    resps = store.commit_file(on_time, 1, 2 * len(b), reqs)
    assert [r.errors for r in resps] == [Errors.COMMIT_DEADLINE_EXCEEDED] * 2
    assert store.file_usage() == {on_time: FileUsage(2, 2 * len(b))}


# ---------------------------------------------------------------- configs


@pytest.mark.parametrize(
    ("configs", "named"),
    [
        ({"retention.msx": 1}, "retention.msx"),
        ({"cleanup.policy": "compacted"}, "cleanup.policy"),
        ({"retention.ms": "abc"}, "retention.ms"),
        ({"retention.ms": -2}, "retention.ms"),
        ({"retention.bytes": -5}, "retention.bytes"),
        ({"retention.bytes": "1.5"}, "retention.bytes"),
        ({"max.message.bytes": -1}, "max.message.bytes"),
        ({"message.timestamp.before.max.ms": -1}, "message.timestamp.before.max.ms"),
        ({"message.timestamp.after.max.ms": "soon"}, "message.timestamp.after.max.ms"),
        ({"message.timestamp.type": "BrokerTime"}, "message.timestamp.type"),
        ({"message.timestamp.type": 1}, "message.timestamp.type"),
        ({"remote.storage.enable": "yes"}, "remote.storage.enable"),
        ({"remote.storage.enable": 1}, "remote.storage.enable"),
        ({"segment.bytes": (1 << 20) - 1}, "segment.bytes"),  # Kafka 4.0's minimum is 1 MiB
        ({"segment.bytes": 1 << 31}, "segment.bytes"),  # an INT config
        ({"segment.ms": 0}, "segment.ms"),
        ({"segment.index.bytes": 23}, "segment.index.bytes"),  # two time-index entries at least
        ({"segment.index.bytes": (64 << 20) + 1}, "segment.index.bytes"),  # read whole: bounded
        ({"index.interval.bytes": -1}, "index.interval.bytes"),
    ],
)
def test_invalid_topic_configs(store: MetadataStore, configs: dict[str, str | int], named: str) -> None:
    with pytest.raises(TopicConfigError, match=named.replace(".", r"\.")):
        TopicConfig().with_configs(configs)
    tid = uuid.uuid4()
    with pytest.raises(TopicConfigError, match=named.replace(".", r"\.")):
        store.create_topic_and_partitions(
            [
                CreateTopicAndPartitionsRequest(uuid.uuid4(), "ok", 1),
                CreateTopicAndPartitionsRequest(tid, "bad", 1, configs),
            ]
        )
    assert store.partitions() == []  # the valid request in the same call was not applied either
    [tp, _] = make_topic(store, **{"retention.ms": 1234})
    with pytest.raises(TopicConfigError, match=named.replace(".", r"\.")):
        store.alter_topic_configs(tp.topic_id, {"retention.bytes": 99, **configs})
    cfg = store.topic_config(tp.topic_id)
    assert (cfg.retention_ms, cfg.retention_bytes) == (1234, -1)


def test_valid_topic_configs_round_trip(store: MetadataStore) -> None:
    configs: dict[str, str | int] = {
        "message.timestamp.type": "LogAppendTime",
        "retention.ms": "-1",
        "retention.bytes": 0,
        "max.message.bytes": 0,
        "message.timestamp.before.max.ms": 0,
        "message.timestamp.after.max.ms": "5",
        "remote.storage.enable": " True ",
        "segment.bytes": 1 << 20,
        "segment.ms": "1",
        "segment.index.bytes": 24,
        "index.interval.bytes": 0,
    }
    [tp, _] = make_topic(store, **configs)
    cfg = store.topic_config(tp.topic_id)
    assert cfg == TopicConfig().with_configs(configs)
    assert TopicConfig().with_configs(cfg.to_configs()) == cfg
    assert cfg.remote_storage_enable and cfg.to_configs()["remote.storage.enable"] == "true"
    assert TopicConfig().to_configs()["remote.storage.enable"] == "false"  # off by default
    with pytest.raises(KeyError):
        store.topic_config(uuid.uuid4())
    with pytest.raises(KeyError):
        store.alter_topic_configs(uuid.uuid4(), {"retention.ms": 1})


# ------------------------------------------------------------ corruption


def _part_id(env: lmdb.Environment, tp: TopicIdPartition) -> int:
    db_tp = env.open_db(b"tp", create=False)
    with env.begin() as txn:
        raw = txn.get(tp.topic_id.bytes + struct.pack(">I", tp.partition), db=db_tp)
    assert raw is not None
    return int(struct.unpack(">I", raw)[0])


def _mutate_log_entry(path: Path, tp: TopicIdPartition, base_offset: int, mutate: Callable[[bytes], bytes]) -> None:
    """Apply ``mutate`` to the stored entry of the batch at ``base_offset``,
    inside the chunk (a run of fixed-size entries) that holds it."""
    env = lmdb.open(str(path), max_dbs=16, map_size=1 << 24)
    try:
        part_id = _part_id(env, tp)
        db_log = env.open_db(b"log", create=False)
        with env.begin(write=True) as txn:
            cur = txn.cursor(db=db_log)
            assert cur.set_range(struct.pack(">IQ", part_id, 0))
            for key, value in cur:
                assert key[:4] == struct.pack(">I", part_id), f"no entry at offset {base_offset}"
                for i in range(len(value) // ENTRY_SIZE):
                    entry = value[i * ENTRY_SIZE : (i + 1) * ENTRY_SIZE]
                    if struct.unpack_from(">q", entry)[0] == base_offset:
                        new = value[: i * ENTRY_SIZE] + mutate(bytes(entry)) + value[(i + 1) * ENTRY_SIZE :]
                        txn.put(key, new, db=db_log)
                        return
    finally:
        env.close()


def _flip(pos: int) -> Callable[[bytes], bytes]:
    def mutate(v: bytes) -> bytes:
        b = bytearray(v)
        b[pos] ^= 0x01
        return bytes(b)

    return mutate


@pytest.mark.parametrize(
    ("mutate", "what", "named"),
    [
        (_flip(30), "CRC", "offset 3"),
        (_flip(70), "CRC", "offset 3"),
        (_flip(115), "CRC", "offset 3"),
        # A value of the wrong length spoils its whole chunk (entries 0-8 here),
        # which the error names by its first offset.
        (lambda v: v[:-1], "bytes", "chunk at offset 0"),
    ],
    ids=["header", "tail", "crc", "truncated"],
)
def test_corrupt_entry(tmp_path: Path, mutate: Callable[[bytes], bytes], what: str, named: str) -> None:
    path = tmp_path / "s"
    clock = Clock(T0)
    with MetadataStore.open(path, sync=True, clock=clock, map_size_bytes=1 << 24) as store:
        bad, good = make_topic(store)
        b3 = build_batch(3, timestamp_ms=T0)
        reqs = [request(tp, b3, byte_offset=i * len(b3)) for i, tp in enumerate([bad, bad, bad, good, good])]
        store.commit_file(wal_key(T0), 1, 5 * len(b3), reqs)  # bad: 0-2, 3-5, 6-8
    _mutate_log_entry(path, bad, 3, mutate)
    with MetadataStore.open(path, sync=True, clock=clock, map_size_bytes=1 << 24) as store:
        rb, rg = store.find_batches([FindBatchRequest(bad, 0, BIG), FindBatchRequest(good, 0, BIG)], BIG)
        assert rb.errors == Errors.CORRUPT_MESSAGE and rb.batches == ()
        assert rb.error_message is not None
        assert str(bad) in rb.error_message and named in rb.error_message and what in rb.error_message
        assert (rb.log_start_offset, rb.high_watermark) == (0, 9)
        # Other partitions are still served (and the failed one used none of fetch_max_bytes).
        assert rg.errors == Errors.NONE and [b.metadata.base_offset for b in rg.batches] == [0, 3]
        [r] = store.find_batches([FindBatchRequest(bad, 4, BIG)], BIG)
        assert r.errors == Errors.CORRUPT_MESSAGE and named in (r.error_message or "")
        if what == "CRC":
            # Batches after the corrupt entry are still served.
            [r] = store.find_batches([FindBatchRequest(bad, 6, BIG)], BIG)
            assert r.errors == Errors.NONE and [b.metadata.base_offset for b in r.batches] == [6]
        # (check() also reports the file index as differing: it stops counting a
        # partition's entries at a corrupt one.)
        problems = store.check()
        assert any(str(bad) in p and named in p and what in p for p in problems), problems
        # Appends do not read old entries: the partition keeps taking commits.
        [c] = store.commit_file(wal_key(T0), 1, len(b3), [request(bad, b3, byte_offset=0)])
        assert (c.errors, c.assigned_base_offset) == (Errors.NONE, 9)
    with MetadataStore.open(path, readonly=True) as ro:
        [r] = ro.find_batches([FindBatchRequest(bad, 3, BIG)], BIG)
        assert r.errors == Errors.CORRUPT_MESSAGE
        assert any(str(bad) in p and named in p for p in ro.check())


# -------------------------------------------------------------- read-only


def test_readonly_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no metadata store"):
        MetadataStore.open(tmp_path / "nope", readonly=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError):
        MetadataStore.open(tmp_path / "empty", readonly=True)
    assert not (tmp_path / "nope").exists()


def test_readonly_on_foreign_lmdb(tmp_path: Path) -> None:
    env = lmdb.open(str(tmp_path / "other"), map_size=1 << 20)
    with env.begin(write=True) as txn:
        txn.put(b"k", b"v")
    env.close()
    with pytest.raises(StoreError, match="not a partlog metadata store"):
        MetadataStore.open(tmp_path / "other", readonly=True)


def test_writes_on_readonly_store_raise(tmp_path: Path) -> None:
    with MetadataStore.open(tmp_path / "s", sync=False, clock=Clock(T0)) as store:
        tp, _ = make_topic(store)
        b = build_batch(1, timestamp_ms=T0)
        store.commit_file(wal_key(T0), 1, len(b), [request(tp, b, byte_offset=0)])
    with MetadataStore.open(tmp_path / "s", readonly=True, clock=Clock(T0)) as ro:
        writes: list[Callable[[], object]] = [
            lambda: ro.commit_file(wal_key(T0), 1, len(b), [request(tp, b, byte_offset=0)]),
            lambda: ro.create_topic_and_partitions([CreateTopicAndPartitionsRequest(uuid.uuid4(), "x", 1)]),
            lambda: ro.alter_topic_configs(tp.topic_id, {"retention.ms": 1}),
            lambda: ro.delete_records([DeleteRecordsRequest(tp, -1)]),
            lambda: ro.delete_topics([tp.topic_id]),
            lambda: ro.set_leader_epoch(tp, 5),
            lambda: ro.enforce_retention(T0 + 10**12),
        ]
        for w in writes:
            with pytest.raises(StoreError, match="read-only"):
                w()
        assert ro.partition_state(tp)["log_end_offset"] == 1
        assert ro.check() == []
    # Closed stores refuse too.
    with pytest.raises(StoreError, match="closed"):
        ro.find_batches([FindBatchRequest(tp, 0, BIG)], BIG)


_READER = textwrap.dedent(
    """
    import json, sys, uuid
    from partlog import FindBatchRequest, MetadataStore, TopicIdPartition
    store = MetadataStore.open(sys.argv[1], readonly=True)
    tp = TopicIdPartition(uuid.UUID(sys.argv[2]), 0)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        [r] = store.find_batches([FindBatchRequest(tp, 0, 1 << 40)], 1 << 40)
        print(json.dumps({"hwm": r.high_watermark, "batches": len(r.batches), "problems": store.check()}), flush=True)
    store.close()
    """
)


@pytest.mark.timeout(120)
def test_readonly_store_in_another_process_sees_new_commits(tmp_path: Path) -> None:
    path = tmp_path / "s"
    # A small map so the writer grows it while the reader has it open.
    with MetadataStore.open(path, sync=True, map_size_bytes=1 << 16) as store:
        tp, _ = make_topic(store)
        b = build_batch(1, value_bytes=50)
        store.commit_file(wal_key(store._clock()), 1, len(b), [request(tp, b, byte_offset=0)])
        proc = subprocess.Popen(
            [sys.executable, "-c", _READER, str(path), str(tp.topic_id)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        try:
            assert proc.stdin is not None and proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"

            def ask() -> dict[str, object]:
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write("read\n")
                proc.stdin.flush()
                return dict(json.loads(proc.stdout.readline()))

            assert ask() == {"hwm": 1, "batches": 1, "problems": []}
            expected = 1
            for round_ in range(4):
                reqs = [request(tp, b, byte_offset=i * len(b)) for i in range(200)]
                store.commit_file(wal_key(store._clock()), 1, 200 * len(b), reqs)
                expected += 200
                if round_ % 2:
                    # Into LMDB now (the map grows under the reader); else
                    # the reader follows the journal.
                    store.flush()
                assert ask() == {"hwm": expected, "batches": expected, "problems": []}
            assert store.stats["map_resizes"] > 0
            proc.stdin.write("quit\n")
            proc.stdin.flush()
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# -------------------------------------------------------------- map growth


def test_smallest_map_that_opens(tmp_path: Path) -> None:
    with MetadataStore.open(tmp_path / "s", sync=False, map_size_bytes=1 << 16) as store:
        assert store.check() == []


def test_too_small_map_at_open(tmp_path: Path) -> None:
    # Regression: a 16 KiB map let lmdb.MapFullError escape from open().
    with pytest.raises(ValueError, match="map_size_bytes must be in"):
        MetadataStore.open(tmp_path / "s", sync=False, map_size_bytes=1 << 14)
    with MetadataStore.open(tmp_path / "s", sync=False, map_size_bytes=1 << 16) as store:
        make_topic(store)


@pytest.mark.timeout(120)
def test_map_growth_under_concurrency(tmp_path: Path) -> None:
    """Concurrent committers on a 64 KiB map: several doublings, no MapFullError
    reaches a caller.  (No concurrent reader threads here: see
    test_aborted_write_under_read_load_does_not_hang.)"""
    with MetadataStore.open(tmp_path / "s", sync=False, map_size_bytes=1 << 16) as store:
        # Exclusive writes grow the map too: many partitions in one transaction.
        tid = uuid.uuid4()
        store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "many", 400)])
        assert store.stats["map_resizes"] > 0
        tps = [TopicIdPartition(tid, p) for p in range(400)]
        failures: list[BaseException] = []

        def writer(w: int) -> None:
            try:
                b = build_batch(1, value_bytes=20)
                for call in range(15):
                    tps_of_call = [tps[(w * 97 + call * 40 + i) % 400] for i in range(40)]
                    reqs = [request(tp, b, byte_offset=i * len(b)) for i, tp in enumerate(tps_of_call)]
                    for r in store.commit_file(wal_key(store._clock()), w, 40 * len(b), reqs):
                        assert r.errors == Errors.NONE
            except BaseException as e:
                failures.append(e)

        writers = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
        for t in writers:
            t.start()
        for t in writers:
            t.join()
        assert failures == []
        # Commits reach LMDB by checkpoints (beside the committers, in their
        # own thread); the last ones now.
        store.flush()
        assert store.stats["map_resizes"] >= 3
        assert store._env.info()["map_size"] >= 1 << 19
        assert store.check() == []
        assert _live_in(store, tps) == 3 * 15 * 40
        for r in store.find_batches([FindBatchRequest(tp, 0, BIG) for tp in tps], BIG):
            assert r.errors == Errors.NONE and r.high_watermark == len(r.batches)
        # An exclusive write after growth.
        store.delete_records([DeleteRecordsRequest(tp, -1) for tp in tps[:200]])
        assert _live_in(store, tps[:200]) == 0
        kept = _live_in(store, tps)
        assert store.check() == []
    # Reopened with the original small size: LMDB keeps the grown file's size.
    with MetadataStore.open(tmp_path / "s", sync=False, map_size_bytes=1 << 16) as store:
        assert store.check() == []
        assert _live_in(store, tps) == kept
        b = build_batch(1)
        [cr] = store.commit_file(wal_key(store._clock()), 1, len(b), [request(tps[0], b, byte_offset=0)])
        assert cr.errors == Errors.NONE


_ABORT_UNDER_READ_LOAD = textwrap.dedent(
    """
    import sys, tempfile, threading, uuid
    from partlog import (CreateTopicAndPartitionsRequest, FindBatchRequest, MetadataStore, TopicConfigError,
                         TopicIdPartition)
    from tests.batches import build_batch, request, wal_key

    store = MetadataStore.open(tempfile.mkdtemp(), sync=False, map_size_bytes=1 << 16)
    tid = uuid.uuid4()
    store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "t", 50)])
    tps = [TopicIdPartition(tid, p) for p in range(50)]
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            store.find_batches([FindBatchRequest(tp, 0, 1 << 20) for tp in tps[:4]], 1 << 20)

    for _ in range(2):
        threading.Thread(target=reader, daemon=True).start()
    # 1. An exclusive write that fails validation inside its transaction.
    try:
        store.alter_topic_configs(tid, {"retention.ms": "soon"})
    except TopicConfigError:
        pass
    print("aborted exclusive write", flush=True)
    # 2. Commits that outgrow the map (MapFullError -> abort -> grow -> retry).
    b = build_batch(1, value_bytes=20)
    for i in range(20):
        reqs = [request(tp, b, byte_offset=j * len(b)) for j, tp in enumerate(tps)]
        store.commit_file(wal_key(store._clock()), 1, len(tps) * len(b), reqs)
    assert store.stats["map_resizes"] > 0
    print("grown", store.stats, flush=True)
    stop.set()
    """
)


@pytest.mark.timeout(60)
def test_aborted_write_under_read_load_does_not_hang() -> None:
    # In a subprocess: a hung thread cannot be stopped, a process can.  A run
    # that works takes well under a second; 10 s only detects a hang.
    proc = subprocess.Popen(
        [sys.executable, "-c", _ABORT_UNDER_READ_LOAD], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        out, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"hung; output so far: {out.decode()!r}")
    assert proc.returncode == 0, out.decode()


def _live_in(store: MetadataStore, tps: list[TopicIdPartition]) -> int:
    return sum(store.partition_state(tp)["live_batches"] for tp in tps)
