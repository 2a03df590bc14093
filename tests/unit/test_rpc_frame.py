"""Inter-broker RPC framing, sans-IO: frames, envelopes and bodies decoded and
refused without a socket (the server and client over loopback TCP are in
tests/integration/test_rpc.py)."""

from __future__ import annotations

import asyncio
import itertools
import struct
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.rpc.frame import (
    RPC_VERSION,
    Frame,
    FrameDecoder,
    FrameError,
    FrameTooLargeError,
    InvalidBody,
    Kind,
    decode_payload,
    encode_frame,
)
from partlog.rpc.schema import DecodeLimits


def payload(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


def framed(obj: Any) -> bytes:
    data = payload(obj)
    return struct.pack(">I", len(data)) + data


_ints = st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1)


_bodies = st.recursive(
    st.none() | st.booleans() | _ints | st.binary(max_size=64) | st.text(max_size=32) | st.floats(allow_nan=False),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8) | st.binary(max_size=8), inner, max_size=5)
    ),
    max_leaves=20,
)


_frames = st.one_of(
    st.tuples(
        st.sampled_from([Kind.REQUEST, Kind.RESPONSE]), st.integers(0, (1 << 64) - 1), st.text(max_size=20), _bodies
    ),
    st.tuples(
        st.just(Kind.ERROR), st.integers(0, 1 << 32), st.text(max_size=20), st.tuples(_ints, st.text()).map(list)
    ),
)


@pytest.mark.timeout(30)
@settings(max_examples=200, deadline=None)
@given(frames=st.lists(_frames, max_size=12), cuts=st.lists(st.integers(min_value=0), max_size=20))
def test_decoder_reassembles_frames_across_any_chunking(
    frames: list[tuple[Kind, int, str, Any]], cuts: list[int]
) -> None:
    stream = b"".join(encode_frame(*f) for f in frames)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    decoder = FrameDecoder()
    got: list[Frame] = []
    for a, b in itertools.pairwise(points):
        got.extend(decoder.feed(stream[a:b]))
    assert [(f.kind, f.request_id, f.method, f.body) for f in got] == [tuple(f) for f in frames]
    assert all(f.version == RPC_VERSION for f in got)
    assert decoder.buffered_bytes == 0


@pytest.mark.timeout(10)
def test_decoder_coalesced_frames_in_one_chunk() -> None:
    data = b"".join(encode_frame(Kind.REQUEST, i, "m", [i, b"x" * i]) for i in range(1, 300))
    frames = FrameDecoder().feed(data)
    assert [f.body for f in frames] == [[i, b"x" * i] for i in range(1, 300)]


@pytest.mark.timeout(10)
def test_oversized_length_prefix_rejected_before_payload() -> None:
    decoder = FrameDecoder(1024)
    assert decoder.feed(struct.pack(">I", 1024)[:2]) == []
    with pytest.raises(FrameTooLargeError) as e:
        # Only the prefix arrived: the decoder refuses without waiting for 1025 bytes.
        decoder.feed(struct.pack(">I", 1025)[2:])
    assert e.value.frame_bytes == 1025 and e.value.frame_bytes_max == 1024
    assert "1025" in str(e.value) and "1024" in str(e.value)
    assert decoder.buffered_bytes == 0
    with pytest.raises(FrameError, match="already failed"):
        decoder.feed(b"")
    # A frame of exactly the limit is fine.
    ok = FrameDecoder(len(payload([1, 0, 1, "m", b"x" * 100])))
    assert ok.feed(framed([1, 0, 1, "m", b"x" * 100]))[0].body == b"x" * 100


@pytest.mark.timeout(10)
def test_encoder_refuses_frames_over_the_limit() -> None:
    with pytest.raises(FrameTooLargeError):
        encode_frame(Kind.REQUEST, 1, "m", b"x" * 2000, frame_bytes_max=1000)


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "does not start with an envelope"),
        (b"\xc1", "not a msgpack envelope"),  # the one byte msgpack never uses
        (b"\x91\xa2\xff\xfe", "an array of 1"),
        (payload({"version": 1}), "not a msgpack envelope"),
        (payload([1, 0, 1, "m"]), "an array of 4"),
        (payload([1, 0, 1, "m", None, None]), "an array of 6"),
        (payload(["1", 0, 1, "m", None]), "version"),
        (payload([True, 0, 1, "m", None]), "version"),
        (payload([1, 3, 1, "m", None]), "kind"),
        (payload([1, "0", 1, "m", None]), "kind"),
        (payload([1, 0, -1, "m", None]), "request_id"),
        (payload([1, 0, 1.5, "m", None]), "request_id"),
        (payload([1, 0, 1, b"m", None]), "method"),
        (payload([1, 0, 1, "m" * 1000, None]), "method"),
        (payload([1, 0, 1, ["m"], None]), "method"),  # a container where the method goes
        (payload([1, 2, 1, "m", "boom"]), "error's body"),
        (payload([1, 2, 1, "m", ["1", "boom"]]), "error's body"),
    ],
)
def test_malformed_envelopes_raise_frame_error(data: bytes, problem: str) -> None:
    """A bad envelope loses the stream: the connection closes."""
    with pytest.raises(FrameError, match=problem) as e:
        decode_payload(data)
    assert not isinstance(e.value, FrameTooLargeError)
    with pytest.raises(FrameError):
        FrameDecoder().feed(struct.pack(">I", len(data)) + data)


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (payload([1, 0, 1, "m", b"x"])[:-1], "not valid msgpack"),  # truncated
        (payload([1, 0, 1, "m", None]) + b"\x00", "not valid msgpack"),  # trailing bytes
        (payload([1, 0, 1, "m", {1: 2}]), "not valid msgpack"),  # int map keys refused
        (payload([1, 0, 1, "m", None])[:-1] + b"\xa2\xff\xfe", "not valid msgpack"),  # a str, not UTF-8
    ],
)
def test_malformed_bodies_fail_only_their_request(data: bytes, problem: str) -> None:
    """The envelope is fine, so the stream is still in sync: the body is an
    InvalidBody (the server answers BAD_REQUEST for that request only)."""
    frame = decode_payload(data)
    assert frame.request_id == 1 and frame.method == "m"
    assert isinstance(frame.body, InvalidBody) and problem in frame.body.reason


def test_body_limits_stop_a_msgpack_bomb_while_it_decodes() -> None:
    """Regression (issue 13, item 5): an array header claiming millions of
    elements followed by 0x90 bytes (empty arrays) cost ~600 MB in a 7.6 MiB
    frame.  Under a method's limits it stops after a budget of objects."""
    n = 2_000_000
    bomb = b"\xdd" + struct.pack(">I", n) + b"\x90" * n  # array32 of n empty arrays
    data = payload([1, 0, 1, "m", None])[:-1] + bomb
    limits = DecodeLimits(array_len_max=n, map_len_max=0, str_bytes_max=0, bin_bytes_max=0, elements_max=1000)
    frame = decode_payload(data, lambda kind, method: limits)
    assert isinstance(frame.body, InvalidBody) and "more than 1000 objects" in frame.body.reason
    # A legal body of the same method decodes.
    ok = decode_payload(payload([1, 0, 1, "m", [[] for _ in range(100)]]), lambda kind, method: limits)
    assert ok.body == [[]] * 100
    # Array and string headers above the schema's largest are refused before anything is built.
    small = DecodeLimits(array_len_max=10, map_len_max=1, str_bytes_max=5, bin_bytes_max=5, elements_max=100)
    for body in ([0] * 11, "x" * 6, b"x" * 6, {"a": 1, "b": 2}):
        frame = decode_payload(payload([1, 0, 1, "m", body]), lambda kind, method: small)
        assert isinstance(frame.body, InvalidBody), body


def test_a_deferred_answer_never_started_is_closed_without_a_warning() -> None:
    """Regression: a connection closing right after a handler returned a
    Deferred cancelled the answering task before its first step, leaving the
    answer coroutine unawaited ("coroutine '_encoded' was never awaited" in
    test_failover).  The server now closes such an answer."""
    import gc
    import inspect
    import warnings

    from partlog.rpc.server import close_unstarted

    async def answer() -> int:
        return 1

    async def main() -> None:
        never = answer()
        task = asyncio.create_task(asyncio.sleep(0))
        task.cancel()
        task.add_done_callback(lambda _t: close_unstarted(never))
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)  # done callbacks run
        assert inspect.getcoroutinestate(never) == inspect.CORO_CLOSED

        done = answer()
        assert await done == 1
        close_unstarted(done)  # finished: left alone
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        close_unstarted(fut)  # not a coroutine: left alone
        assert not fut.done()
        fut.cancel()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(main())
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]
