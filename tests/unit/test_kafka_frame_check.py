"""Lengths checked before kio's native reader (partlog.kafka_front.frame_check).

kio 0.6's Rust reader allocates what a request declares; a failed
allocation aborts the process.  A 27-byte FindCoordinator v4 declaring
2**32 keys took the broker down (found by the listener's hypothesis test in
CI).  Here: that request, run in a subprocess (without the check it
aborts the interpreter), is refused with a FrameError; hostile frames of
every served API are refused or parsed, never more; and every valid request
kio writes passes the check unchanged."""

from __future__ import annotations

import contextlib
import io
import struct
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.request_header.v2.header import RequestHeader as V2
from kio.serial import entity_writer

from partlog.kafka_front.apis import SUPPORTED_VERSIONS
from partlog.kafka_front.codec import FrameError, build, parse_request
from partlog.kafka_front.frame_check import LengthError, check_request

# FindCoordinator v4: header v2 (client id "t", no tags), key_type 0, then a
# compact array declaring 2**32 - 2 keys, and 8 bytes.
HOSTILE = struct.pack(">hhih", 10, 4, 1, 1) + b"t" + b"\x00" + b"\x00" + b"\xff\xff\xff\xff\x0f" + b"\x00" * 8


def test_a_request_declaring_billions_of_items_is_refused_not_allocated() -> None:
    code = (
        "from partlog.kafka_front.codec import parse_request, FrameError\n"
        "from partlog.kafka_front.apis import SUPPORTED_VERSIONS\n"
        f"frame = {HOSTILE!r}\n"
        "try:\n"
        "    parse_request(frame, SUPPORTED_VERSIONS)\n"
        "except FrameError as e:\n"
        "    print('refused:', e)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr[-500:]
    assert "refused:" in p.stdout and "4294967294 items" in p.stdout, p.stdout


@settings(max_examples=300, deadline=None)
@given(
    api_key=st.sampled_from(sorted(SUPPORTED_VERSIONS)),
    version=st.integers(0, 16),
    body=st.binary(max_size=120),
)
def test_hostile_bodies_are_refused_or_parsed(api_key: int, version: int, body: bytes) -> None:
    """Run in this process: a declared length that escaped the check would
    abort the test run, which is the failure this test exists to show."""
    frame = struct.pack(">hhih", api_key, version, 1, 1) + b"t" + b"\x00" + body
    with contextlib.suppress(FrameError):
        parse_request(frame, SUPPORTED_VERSIONS)


def _valid_frames() -> list[tuple[int, int, bytes]]:
    """One request per served API and version, with its defaults, as kio writes it."""
    out = []
    for api_key, (low, high) in sorted(SUPPORTED_VERSIONS.items()):
        for version in range(low, high + 1):
            schema = load_request_schema(api_key, version)
            if not schema.__flexible__:
                continue  # legacy headers: covered by the clients' tests
            try:
                body = build(schema, {})
            except TypeError:
                continue  # a field without a default
            buf = io.BytesIO()
            header = build(V2, {"request_api_key": api_key, "request_api_version": version, "correlation_id": 1,
                                "client_id": "t"})  # fmt: skip
            entity_writer(V2)(buf, header)
            entity_writer(schema)(buf, body)
            out.append((api_key, version, buf.getvalue()))
    return out


@pytest.mark.parametrize(("api_key", "version", "frame"), _valid_frames())
def test_every_valid_request_passes_the_check(api_key: int, version: int, frame: bytes) -> None:
    check_request(V2, load_request_schema(api_key, version), frame)
    req = parse_request(frame, SUPPORTED_VERSIONS)
    assert req.api_key == api_key and req.body is not None


def test_a_length_past_the_end_names_where() -> None:
    with pytest.raises(LengthError, match="4294967294 items at byte 18"):
        check_request(V2, load_request_schema(10, 4), HOSTILE)
