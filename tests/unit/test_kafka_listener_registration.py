"""A broker's named Kafka listeners travel with its registration: the
controller's RPC, its state directory, etcd, and metadata_poll snapshots;
a broker registered without names keeps the old encodings."""

from __future__ import annotations

import pytest

from partlog.controller.cluster_meta import BrokerInfo, kafka_listener_ports
from partlog.controller.etcd_layout import dec_broker, enc_broker
from partlog.controller.model import BrokerRegistration, MetadataSnapshot
from partlog.controller.state_store import _dec_broker, _enc_broker
from partlog.controller.wire import dec_poll_response, dec_register, enc_register, enc_snapshot
from partlog.rpc.wire import WireError

NAMED = BrokerInfo(3, "az1", "127.0.0.1", 9000, 9093, "SASL_SSL:9093,PLAINTEXT:9092")
OLD = BrokerInfo(4, "az1", "127.0.0.1", 9001, 9094)


@pytest.mark.parametrize("b", [NAMED, OLD])
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
