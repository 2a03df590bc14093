"""Transactional producers fenced, through the Kafka front end, with real clients:
the coordinator's side (FindCoordinator key type 1, InitProducerId with a
transactional id, fencing of an older producer by a newer one with the same
id).  Commit and abort end to end need the partition leaders' markers and
follow with them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from partlog.tools.local_cluster import TOPIC
from tests.kafka_helpers import ClusterThread

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    c = ClusterThread(str(tmp_path_factory.mktemp("txn")))
    try:
        yield c
    finally:
        c.close()


def test_librdkafka_a_second_producer_fences_the_first(cluster: ClusterThread) -> None:
    conf = {"bootstrap.servers": cluster.bootstrap, "transactional.id": "fence-rdkafka"}
    first = confluent_kafka.Producer(conf)
    first.init_transactions(30)
    second = confluent_kafka.Producer(conf)
    second.init_transactions(30)
    second.begin_transaction()
    second.abort_transaction(30)
    group = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "fence-rdkafka"})
    try:
        first.begin_transaction()
        with pytest.raises(confluent_kafka.KafkaException) as raised:
            first.send_offsets_to_transaction(
                [confluent_kafka.TopicPartition(TOPIC, 0, 5)], group.consumer_group_metadata(), 30
            )
        error = raised.value.args[0]
        assert error.fatal() and error.code() == confluent_kafka.KafkaError._FENCED, error
    finally:
        group.close()


def test_aiokafka_a_second_producer_fences_the_first(cluster: ClusterThread) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    fenced = pytest.importorskip("aiokafka.errors").ProducerFenced

    async def main() -> None:
        first = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id="fence-aio")
        second = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id="fence-aio")
        await first.start()
        try:
            await second.start()
            try:
                assert second._txn_manager.producer_id == first._txn_manager.producer_id
                assert second._txn_manager.producer_epoch == first._txn_manager.producer_epoch + 1
                await first.begin_transaction()
                with pytest.raises(fenced):
                    await first.send_offsets_to_transaction({aiokafka.TopicPartition(TOPIC, 0): 5}, "fence-aio")
            finally:
                await second.stop()
        finally:
            await first.stop()

    asyncio.run(main())
