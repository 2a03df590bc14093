"""The WAL segment format: layout, footer reads, and bad input."""

from __future__ import annotations

import json
import struct
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from partlog.kafka.records import TopicIdPartition
from partlog.tools.cli import main as partlog_main
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.segment import (
    FOOTER_READ_BYTES,
    TRAILER_BYTES,
    WalFormatError,
    WalSegmentBuilder,
    check_segment,
    iter_batches,
    parse_footer,
    read_footer,
)
from tests.batches import build_batch

T0 = 1_700_000_000_000
TOPICS = [uuid.UUID(int=i + 1) for i in range(3)]
KEY = "wal/00/1700000000000-1-abc.wal"


class CountingStore(LocalDirStore):
    """A real local store that counts GETs."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, fsync=False)
        self.gets: list[tuple[str, int, int]] = []

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        self.gets.append(("range", offset, length))
        return super().get_range(key, offset, length)

    def get_suffix(self, key: str, length: int) -> tuple[bytes, int]:
        self.gets.append(("suffix", -1, length))
        return super().get_suffix(key, length)


def _segment(adds: list[tuple[TopicIdPartition, bytes]], broker_id: int = 7) -> tuple[WalSegmentBuilder, bytes]:
    b = WalSegmentBuilder(broker_id, T0)
    for tp, batch in adds:
        b.add(tp, batch)
    return b, b.build().data


adds_strategy = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(1, 4), st.integers(0, 300)), min_size=1, max_size=25
)


@settings(max_examples=60, deadline=None)
@given(adds=adds_strategy)
def test_layout_roundtrip(adds: list[tuple[int, int, int, int]]) -> None:
    items = [
        (TopicIdPartition(TOPICS[t], p), build_batch(n, value_bytes=v, timestamp_ms=T0 + i))
        for i, (t, p, n, v) in enumerate(adds)
    ]
    builder = WalSegmentBuilder(3, T0)
    indices = [builder.add(tp, batch) for tp, batch in items]
    assert indices == list(range(len(items)))
    seg = builder.build()
    data = seg.data
    assert data[0] == 0 and data[-4:] == b"PLWF"
    footer = check_segment(data, key=KEY)
    assert footer == seg.footer and (footer.broker_id, footer.created_ms) == (3, T0)
    # Every batch is where its coordinate says, unchanged.
    for coord, (tp, batch) in zip(seg.coordinates, items, strict=True):
        assert coord.topic_id_partition == tp
        assert data[coord.byte_offset : coord.byte_offset + coord.size] == batch
    # Per partition: contiguous, in arrival order, partitions in order of first arrival.
    first_seen = list(dict.fromkeys(tp for tp, _ in items))
    assert [r.topic_id_partition for r in footer.partitions] == first_seen
    for r in footer.partitions:
        mine = [batch for tp, batch in items if tp == r.topic_id_partition]
        assert data[r.byte_offset : r.byte_offset + r.size] == b"".join(mine)
        assert r.batch_count == len(mine)
        got = [b for _, b in iter_batches(data[r.byte_offset : r.byte_offset + r.size], key=KEY, object_offset=0)]
        assert got == mine
    # Readers of a batch need only its range: kafka-python parses it as is.
    c = seg.coordinates[-1]
    assert DefaultRecordBatch(data[c.byte_offset : c.byte_offset + c.size]).validate_crc()


def test_read_footer_is_one_suffix_get(tmp_path: Path) -> None:
    store = CountingStore(tmp_path)
    _, data = _segment([(TopicIdPartition(TOPICS[0], p), build_batch(2)) for p in range(50)])
    store.put(KEY, data)
    footer, size = read_footer(store, KEY)
    assert size == len(data) and len(footer.partitions) == 50
    assert store.gets == [("suffix", -1, FOOTER_READ_BYTES)]


def test_large_footer_takes_a_second_get(tmp_path: Path) -> None:
    store = CountingStore(tmp_path)
    batch = build_batch(1, value_bytes=0)
    # ~40 footer bytes a partition: 3000 partitions outgrow the 64 KiB suffix.
    _, data = _segment([(TopicIdPartition(TOPICS[p % 3], p), batch) for p in range(3000)])
    store.put(KEY, data)
    footer, size = read_footer(store, KEY)
    assert len(footer.partitions) == 3000 and size == len(data)
    assert [g[0] for g in store.gets] == ["suffix", "range"]


def test_builder_refuses_misframed_batch() -> None:
    b = WalSegmentBuilder(1, T0)
    batch = build_batch(1)
    with pytest.raises(ValueError, match="length field"):
        b.add(TopicIdPartition(TOPICS[0], 0), batch + b"x")
    with pytest.raises(ValueError, match="shorter than a v2 header"):
        b.add(TopicIdPartition(TOPICS[0], 0), batch[:30])
    assert b.batch_count == 0


# --------------------------------------------------------------- bad input


def _good() -> bytes:
    return _segment(
        [(TopicIdPartition(TOPICS[0], 0), build_batch(3)), (TopicIdPartition(TOPICS[1], 1), build_batch(1))]
    )[1]


def _corrupt(data: bytes, at: int, value: bytes) -> bytes:
    return data[:at] + value + data[at + len(value) :]


def test_truncated_object() -> None:
    data = _good()
    with pytest.raises(WalFormatError, match=f"{KEY} at byte 0: object is 5 bytes") as ei:
        parse_footer(data[:5], 5, key=KEY)
    assert ei.value.key == KEY and ei.value.offset == 0
    # Cut at the end: the trailer is gone, what is left is not a trailer.
    cut = data[:-7]
    with pytest.raises(WalFormatError, match="trailer magic"):
        check_segment(cut, key=KEY)


def test_bad_trailer_magic() -> None:
    data = _corrupt(_good(), len(_good()) - 4, b"XXXX")
    with pytest.raises(WalFormatError) as ei:
        check_segment(data, key=KEY)
    assert ei.value.offset == len(data) - 4 and "trailer magic" in str(ei.value)


def test_footer_length_too_large() -> None:
    data = _good()
    bad = _corrupt(data, len(data) - TRAILER_BYTES, struct.pack(">I", len(data)))
    with pytest.raises(WalFormatError, match="does not fit"):
        check_segment(bad, key=KEY)


def test_footer_crc_mismatch() -> None:
    data = _good()
    (footer_len,) = struct.unpack_from(">I", data, len(data) - TRAILER_BYTES)
    footer_at = len(data) - TRAILER_BYTES - footer_len
    bad = _corrupt(data, footer_at + 3, bytes([data[footer_at + 3] ^ 0xFF]))
    with pytest.raises(WalFormatError, match="footer CRC-32C") as ei:
        check_segment(bad, key=KEY)
    assert ei.value.offset == footer_at


def test_batch_crc_mismatch_names_the_batch() -> None:
    data = _good()
    first = build_batch(3)
    at = 1 + len(first) + 40  # inside the second batch's CRC-covered bytes
    bad = _corrupt(data, at, bytes([data[at] ^ 0x01]))
    with pytest.raises(WalFormatError, match="batch CRC-32C") as ei:
        check_segment(bad, key=KEY)
    assert ei.value.offset == 1 + len(first)


def test_version_byte() -> None:
    with pytest.raises(WalFormatError, match="format version 1"):
        check_segment(b"\x01" + _good()[1:], key=KEY)


def test_garbage_footer_is_format_error() -> None:
    from partlog.kafka.crc32c import crc32c

    junk = b"\xc1\xc1\xc1"  # 0xc1 is never valid msgpack
    data = b"\x00" + junk + struct.pack(">II4s", len(junk), crc32c(junk), b"PLWF")
    with pytest.raises(WalFormatError, match="not valid msgpack"):
        check_segment(data, key=KEY)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200), suffix=st.integers(1, 300))
def test_arbitrary_bytes_never_crash(data: bytes, suffix: int) -> None:
    """Any object: a WalFormatError or a footer, never another exception."""
    for blob in (data, data + b"PLWF", _good()[: len(data)] + data):
        try:
            got = parse_footer(blob[-suffix:], len(blob), key=KEY)
            if not isinstance(got, int):
                check_segment(blob, key=KEY)
        except WalFormatError:
            pass


# ---------------------------------------------------------------------- CLI


def test_wal_dump_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "seg.wal"
    path.write_bytes(_good())
    assert partlog_main(["wal", "dump", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["broker_id"] == 7 and doc["size"] == len(_good())
    assert [(p["partition"], p["batch_count"]) for p in doc["partitions"]] == [(0, 1), (1, 1)]
    assert partlog_main(["wal", "dump", str(path), "--verify"]) == 0
    assert "verified" in capsys.readouterr().out
    # Through a store URL, by key.
    store = LocalDirStore(tmp_path / "objects")
    store.put(KEY, _good())
    assert partlog_main(["wal", "dump", KEY, "--store", f"file://{tmp_path / 'objects'}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["partitions"][1]["topic_id"] == str(TOPICS[1])


def test_wal_dump_cli_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.wal"
    path.write_bytes(_good()[:-1])
    assert partlog_main(["wal", "dump", str(path)]) == 1
    assert "bad.wal at byte" in capsys.readouterr().err
    assert partlog_main(["wal", "dump", str(tmp_path / "missing.wal")]) == 2
    assert "no such file" in capsys.readouterr().err
