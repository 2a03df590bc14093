"""A broker's named Kafka listeners travel with its registration: the
controller's RPC, its state directory, etcd, and metadata_poll snapshots;
a broker registered without names keeps the old encodings."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from partlog.controller.cluster_meta import (
    BrokerInfo,
    format_kafka_listeners,
    kafka_listener_addresses,
    kafka_listener_ports,
)
from partlog.controller.etcd_layout import dec_broker, enc_broker
from partlog.controller.model import BrokerRegistration, MetadataSnapshot
from partlog.controller.state_store import _dec_broker, _enc_broker
from partlog.controller.wire import dec_poll_response, dec_register, enc_register, enc_snapshot
from partlog.kafka_front.listeners import (
    ListenerConfigError,
    SecurityProtocol,
    parse_advertised,
    parse_listeners,
    parse_protocol_map,
    registration_text,
)
from partlog.rpc.wire import WireError

NAMED = BrokerInfo(3, "az1", "127.0.0.1", 9000, 9093, "SASL_SSL:9093,PLAINTEXT:9092")
OLD = BrokerInfo(4, "az1", "127.0.0.1", 9001, 9094)
HOSTS = BrokerInfo(5, "az1", "127.0.0.1", 9002, 9095, "INTERNAL:9095,EXTERNAL:kafka-5.example.com:19095,V6:[::1]:9096")


@pytest.mark.parametrize("b", [NAMED, OLD, HOSTS])
def test_round_trips(b: BrokerInfo) -> None:
    assert dec_register(enc_register(b)) == b
    assert dec_broker(b.broker_id, enc_broker(b, 7)) == (b, 7)
    reg = BrokerRegistration(b.broker_id, b.az, b.host, b.port, 5, False, b.kafka_port, b.kafka_listeners)
    assert _dec_broker(b.broker_id, _enc_broker(reg)) == reg
    assert reg.info() == b
    snap = dec_poll_response(enc_snapshot(MetadataSnapshot(1, [b], [])))
    assert snap is not None and snap.brokers == [b]


def test_old_encodings_are_unchanged_and_ports_are_by_listener() -> None:
    assert "kafka_listeners" not in enc_register(OLD)
    assert len(enc_snapshot(MetadataSnapshot(1, [OLD], []))["brokers"][0]) == 5
    assert NAMED.kafka_port_of("PLAINTEXT") == 9092 and NAMED.kafka_port_of("SSL") == 0
    assert OLD.kafka_port_of("SASL_SSL") == 9094
    assert kafka_listener_ports("SSL:1") == {"SSL": 1}
    for bad in ("SSL", "SSL:0", "SSL:1,SSL:2", "a b:1"):
        with pytest.raises(ValueError):
            kafka_listener_ports(bad)
    with pytest.raises(WireError):
        dec_register({**enc_register(OLD), "kafka_listeners": "nope"})


def test_listeners_have_their_own_advertised_addresses() -> None:
    assert HOSTS.kafka_address_of("INTERNAL") == ("127.0.0.1", 9095)
    assert HOSTS.kafka_address_of("EXTERNAL") == ("kafka-5.example.com", 19095)
    assert HOSTS.kafka_address_of("V6") == ("::1", 9096)
    assert HOSTS.kafka_address_of("SSL") == ("127.0.0.1", 0)
    for bad in ("A:h:0", "A:h h:1", "A:::1:2", "A:h:1,A:1", "1A:1", "A:[zz]:1", "A:" + "h" * 1000 + ":1"):
        with pytest.raises(ValueError):
            kafka_listener_addresses(bad)


_NAMES = st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,10}\Z")
_HOSTS = st.one_of(st.from_regex(r"\A[a-z0-9][a-z0-9.-]{0,20}\Z"), st.just("::1"), st.just("10.0.0.1"))


@given(st.dictionaries(_NAMES, st.tuples(_HOSTS, st.integers(1, 65_535)), min_size=1, max_size=5))
def test_registration_text_round_trips(listeners: dict[str, tuple[str, int]]) -> None:
    text = format_kafka_listeners([(n, h, p) for n, (h, p) in listeners.items()])
    assert kafka_listener_addresses(text) == listeners


@given(st.text(max_size=60))
def test_hostile_registration_text_is_refused_or_parsed_whole(text: str) -> None:
    try:
        parsed = kafka_listener_addresses(text)
    except ValueError:
        return
    assert all(0 < port <= 65_535 for _, port in parsed.values())


def test_named_listeners_map_to_protocols_and_advertise() -> None:
    pmap = parse_protocol_map("INTERNAL:SASL_SSL, external:plaintext")
    assert pmap == {"INTERNAL": SecurityProtocol.SASL_SSL, "EXTERNAL": SecurityProtocol.PLAINTEXT}
    specs = parse_listeners("INTERNAL://127.0.0.1:9093,EXTERNAL://127.0.0.1:9092", pmap)
    assert [(s.name, s.protocol) for s in specs] == [
        ("INTERNAL", SecurityProtocol.SASL_SSL),
        ("EXTERNAL", SecurityProtocol.PLAINTEXT),
    ]
    told = parse_advertised("EXTERNAL://kafka.example.com:19092", specs)
    assert registration_text(told) == "INTERNAL:127.0.0.1:9093,EXTERNAL:kafka.example.com:19092"
    assert registration_text(specs, {"INTERNAL": 1, "EXTERNAL": 2}) == "INTERNAL:127.0.0.1:1,EXTERNAL:127.0.0.1:2"
    # A map given replaces the default one, as Kafka's.
    with pytest.raises(ListenerConfigError):
        parse_listeners("PLAINTEXT://127.0.0.1:1", pmap)
    for bad_map in ("A", "A:NOPE", "A:SSL,A:SSL", "1:SSL"):
        with pytest.raises(ListenerConfigError):
            parse_protocol_map(bad_map)
    for bad in ("NOPE://h:1", "EXTERNAL://h:0", "EXTERNAL://h:1,EXTERNAL://h:2", "EXTERNAL://:1"):
        with pytest.raises(ListenerConfigError):
            parse_advertised(bad, specs)


@pytest.mark.parametrize("text", ["A:h\n:1", "A\n:1", "A:h\n:1,B:2", "A\n:h:1", "A:[::1]\n:1"])
def test_a_trailing_newline_is_no_part_of_a_name_or_host(text: str) -> None:
    # A registration read from etcd or the controller is hostile text: a
    # name or host must be its characters whole (re's "$" also matches
    # before a final newline, which would then be advertised to clients).
    with pytest.raises(ValueError):
        kafka_listener_addresses(text)


@given(st.text(alphabet="AZh:[]1.\n_,", max_size=30))
@example("A:h\n:1")
def test_parsed_names_and_hosts_hold_only_their_characters(text: str) -> None:
    try:
        parsed = kafka_listener_addresses(text)
    except ValueError:
        return
    for name, (host, _port) in parsed.items():
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name), name
        assert host is None or re.fullmatch(r"[0-9a-fA-F:.]+|[A-Za-z0-9._-]+", host), host
