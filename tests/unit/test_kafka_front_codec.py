"""The Kafka front end's codec, sans-IO: requests parsed and refused, every
served version's error answer, frames read by size and api key (the
listener on loopback is in tests/integration/test_kafka_front.py)."""

from __future__ import annotations

import io
import struct
from typing import Any

import pytest
from kio.serial import entity_reader, entity_writer

from partlog.kafka_front.apis import SUPPORTED_VERSIONS
from partlog.kafka_front.codec import FrameError, FrameReader, build, error_body, parse_request, response_class
from partlog.kafka_front.handler import client_az
from tests.kafka_helpers import raw_request


def load_response_schema(api_key: int, version: int) -> Any:
    return response_class(api_key, version)


def test_client_az_is_read_from_the_client_id() -> None:
    assert client_az("diskless_az=az2") == "az2"
    assert client_az("app-1,diskless_az=use1-az3") == "use1-az3"
    assert client_az("mydiskless_az=az2") is None
    assert client_az(None) is None
    assert client_az("diskless_az=") is None


@pytest.mark.parametrize("api_key", sorted(SUPPORTED_VERSIONS))
def test_every_served_version_has_an_error_answer_that_kio_reads_back(api_key: int) -> None:
    lo, hi = SUPPORTED_VERSIONS[api_key]
    for version in range(lo, hi + 1):
        cls = response_class(api_key, version)
        body = error_body(cls, 35)
        out = io.BytesIO()
        entity_writer(cls)(out, body)
        back, used = entity_reader(cls)(out.getvalue(), 0)
        assert used == len(out.getvalue())
        assert back == body


def test_build_drops_fields_a_version_lacks_and_keeps_defaults() -> None:
    data = {
        "throttle_time": 5,
        "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": "az1"}],
        "cluster_id": "c",
        "controller_id": 1,
        "topics": [],
    }
    v0 = build(load_response_schema(3, 0), data)
    assert not hasattr(v0, "cluster_id")
    v12 = build(load_response_schema(3, 12), data)
    assert v12.cluster_id == "c" and v12.brokers[0].rack == "az1"


def test_frame_reader_refuses_sizes_out_of_bounds_before_buffering() -> None:
    r = FrameReader(request_bytes_max=100)
    r.feed(struct.pack(">i", 101))
    with pytest.raises(FrameError, match=r"socket\.request\.max\.bytes"):
        r.next_frame()
    r = FrameReader(request_bytes_max=100)
    r.feed(struct.pack(">i", -5))
    with pytest.raises(FrameError):
        r.next_frame()


def test_an_api_versions_request_of_an_unknown_version_is_answered_in_v0() -> None:
    frame = raw_request(18, 99, 7, b"")[4:]
    req = parse_request(frame, SUPPORTED_VERSIONS)
    assert req.unsupported is not None and req.correlation_id == 7


def test_a_failed_commit_rpc_reaches_kafka_clients_as_a_retriable_timeout() -> None:
    # Regression: NETWORK_EXCEPTION (13) in a produce answer is fatal to
    # librdkafka's idempotent producer; the failover test lost 42 deliveries.
    from partlog.kafka.errors import Errors
    from partlog.kafka_front.handler import kafka_error as _kafka_error

    assert _kafka_error(Errors.NETWORK_EXCEPTION) == Errors.REQUEST_TIMED_OUT
    assert _kafka_error(Errors.COMMIT_DEADLINE_EXCEEDED) == Errors.REQUEST_TIMED_OUT
    assert _kafka_error(Errors.NOT_LEADER_OR_FOLLOWER) == Errors.NOT_LEADER_OR_FOLLOWER


def test_frame_reader_knows_the_api_key_from_the_sixth_byte() -> None:
    # Regression: the key was read with the version (8 bytes), and a request
    # whose first 6 bytes arrived alone raised out of the read loop.
    r = FrameReader()
    r.feed(struct.pack(">ih", 100, 3))
    assert r.frame_size() == 100 and r.api_key() == 3
    r = FrameReader()
    r.feed(b"\x00\x00\x00")
    assert r.frame_size() is None and r.api_key() is None
