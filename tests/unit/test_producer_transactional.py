"""partlog.client.Producer's ``transactional=(producer id, epoch)``: the
caller's coordinator handed out the id and epoch, and every batch carries
them with the transactional bit (the simulation's transactional producers,
simulations/dst/txn.py, send through it)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from partlog.client import Producer
from partlog.kafka.batch_header import BatchHeader
from partlog.kafka.records import TopicIdPartition


def test_a_transactional_producers_batches_carry_its_id_epoch_and_the_transactional_bit() -> None:
    async def built() -> tuple[BatchHeader, BatchHeader]:
        tp = TopicIdPartition(uuid.UUID(int=1), 0)
        out = []
        for transactional in ((7, 3), None):
            p = Producer(("127.0.0.1", 1), transactional=transactional)
            p.send(tp, b"v")
            p._build(tp, p._parts[tp])
            out.append(BatchHeader.parse(p._parts[tp].ready[0].data))
        return out[0], out[1]

    txn, plain = asyncio.run(built())
    assert (txn.producer_id, txn.producer_epoch, txn.base_sequence, txn.is_transactional) == (7, 3, 0, True)
    assert not plain.is_transactional and plain.producer_id == -1


def test_a_transactional_producer_is_idempotent() -> None:
    with pytest.raises(ValueError, match="transactional"):
        Producer(("127.0.0.1", 1), idempotent=False, acks=1, transactional=(7, 3))
