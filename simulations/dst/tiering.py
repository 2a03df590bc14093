"""The invariants of tiered segments (``python -m simulations.dst fuzz
--tiering``, ``Shape.tiering``): the leaders' builder loops
(``partlog/broker/tiering.py``) upload segments and swap the references of
their batches; followers apply the swaps through their fetches.

Beside the run's other invariants (every acknowledged record read back,
now through segment references too; no WAL object deleted while a leader
or ISR member references it, a follower's WAL references that have not
swapped yet included; each store's file index a recount of its log), at
the end, once the faults stopped and the cluster settled
(:func:`check_tiered`):

* every segment row of every replica, live or crashed, names a ``.log``
  that exists, of the row's size (walmgr deletes a segment's object only
  through its gate, docs/design/tiered-gate.md: a deletion while a row or
  entry references it, while a broker's clock puts it within the swap
  deadline, or of an index whose ``.log`` exists is a violation,
  :func:`simulations.dst.invariants.check_delete`);
* every entry of a live replica that references a segment finds there,
  at its position, the batch the entry describes: its stored header
  (base offset and leader epoch as stored, the rest as the producer sent
  it), and a batch length that fills the entry's size;
* every ISR member holds its leader's rows below the leader's HWM, except
  where a former leader's row is in the way: a follower applies the rows
  that start past its last one (``tiered_through``), so a row it got from
  a former leader that the current one never had (docs/design/tiered.md,
  "Left open") hides the current leader's rows that start at or before
  its end.  Precisely: with ``t`` the largest end of the member's rows the
  leader does not have (-1 for none), every leader row that starts past
  ``t``, ends below the HWM and at or past both log starts is the
  member's.  The member's fetches bring them within a few seconds of the
  end (retried for ``ROWS_WAIT_S``).

Tiered keys are not orphans for :func:`simulations.dst.invariants.check_orphans_deleted`
(walmgr does not delete them); an uploaded segment whose swap never
committed stays in the store.
"""

from __future__ import annotations

import asyncio

from partlog.controller.cluster_meta import PartitionInfo
from partlog.kafka.records import TopicIdPartition
from partlog.store import MetadataStore, StoreError
from partlog.store.layout import Segment
from partlog.tiered.remote_storage import LOG_SUFFIX, TIERED_PREFIX_DEFAULT
from simulations.dst.cluster import Cluster
from simulations.dst.journal import Journal

# How long the ISR members' fetches get to bring their leader's last rows.
ROWS_WAIT_S = 10.0
_PREFIX = TIERED_PREFIX_DEFAULT + "/"


def _rows(store: MetadataStore, tp: TopicIdPartition) -> list[Segment]:
    try:
        return store.segments(tp)
    except (KeyError, StoreError):
        return []


def check_rows_uploaded(
    objects: dict[str, tuple[bytes, float]], bid: int, store: MetadataStore, tp: TopicIdPartition, journal: Journal
) -> int:
    """Every row of ``store`` names an uploaded ``.log`` of its size; the rows."""
    rows = _rows(store, tp)
    for r in rows:
        got = objects.get(r.object_key)
        if not r.object_key.startswith(_PREFIX) or not r.object_key.endswith(LOG_SUFFIX):
            journal.violated(f"broker {bid} {tp}: segment [{r.start_offset}, {r.end_offset}] names {r.object_key}")
        elif got is None or len(got[0]) != r.size:
            size = "missing" if got is None else f"{len(got[0])} bytes"
            journal.violated(
                f"broker {bid} {tp}: segment [{r.start_offset}, {r.end_offset}] {r.object_key} of {r.size} bytes "
                f"is {size} in the object store"
            )
    return len(rows)


def check_segment_reads(
    objects: dict[str, tuple[bytes, float]], bid: int, store: MetadataStore, tp: TopicIdPartition, journal: Journal
) -> int:
    """Each entry of ``store`` that references a segment finds its batch
    at its position there (its stored header, a length filling its size);
    the entries checked."""
    try:
        start = store.log_start_offset(tp)
        entries = store.read_log(tp, start, 1 << 40).entries
    except (KeyError, StoreError):
        return 0
    checked = 0
    for e in entries:
        if not e.object_key.startswith(_PREFIX):
            continue
        checked += 1
        data = objects.get(e.object_key, (b"", 0.0))[0][e.byte_offset : e.byte_offset + e.size]
        length = int.from_bytes(data[8:12], "big", signed=True) + 12 if len(data) >= 12 else -1
        if data[: len(e.header)] != e.header or length != e.size or len(data) != e.size:
            journal.violated(
                f"broker {bid} {tp} offset {e.base_offset}: its batch is not at {e.object_key}:{e.byte_offset} "
                f"({e.size} bytes; found {len(data)} bytes, a batch of {length})"
            )
    return checked


def missing_rows(leader: list[Segment], hwm: int, member: list[Segment], log_start: int) -> list[tuple[int, int]]:
    """The leader's rows an ISR member should hold and does not (module doc)."""
    mine = {(r.start_offset, r.end_offset, r.object_key) for r in member}
    theirs = {(r.start_offset, r.end_offset, r.object_key) for r in leader}
    t = max((r.end_offset for r in member if (r.start_offset, r.end_offset, r.object_key) not in theirs), default=-1)
    return [
        (r.start_offset, r.end_offset)
        for r in leader
        if r.start_offset > t
        and r.end_offset < hwm
        and r.end_offset >= log_start
        and (r.start_offset, r.end_offset, r.object_key) not in mine
    ]


async def check_tiered(cluster: Cluster, journal: Journal) -> dict[str, int]:
    """The end's checks (module doc); counts for the run's summary."""
    objects = cluster.objects.objects
    partitions = [*cluster.partitions, *cluster.extra_partitions]
    rows = entries = 0
    for bid, store, _crashed in cluster.stores():
        for tp in partitions:
            rows += check_rows_uploaded(objects, bid, store, tp, journal)
    for bid, broker in sorted(cluster.brokers.items()):
        if not broker.store._closed:
            for tp in partitions:
                entries += check_segment_reads(objects, bid, broker.store, tp, journal)
    deadline = cluster.loop.time() + ROWS_WAIT_S
    while True:
        behind = _rows_behind(cluster, partitions)
        if not behind or cluster.loop.time() >= deadline:
            break
        await asyncio.sleep(0.5)
    for what in behind[:3]:
        journal.violated(f"{what} ({ROWS_WAIT_S:.0f} s after the end)")
    return {"segment rows held": rows, "entries read through segments": entries}


def _rows_behind(cluster: Cluster, partitions: list[TopicIdPartition]) -> list[str]:
    """Per partition and live ISR member, the leader's rows it lacks."""
    controller = cluster.controller
    if controller is None or controller._controller is None:
        return []
    info: dict[TopicIdPartition, PartitionInfo] = {}
    for t in controller.controller.snapshot().topics:
        for p, decided in enumerate(t.partitions):
            info[TopicIdPartition(t.topic_id, p)] = decided
    out = []
    for tp in partitions:
        i = info.get(tp)
        leader = cluster.brokers.get(i.leader) if i is not None else None
        if i is None or leader is None or leader.store._closed or not leader.replicas.is_leader(tp):
            continue
        try:
            hwm = leader.store.high_watermark(tp)
            lead_start = leader.store.log_start_offset(tp)
        except (KeyError, StoreError):
            continue
        lead_rows = _rows(leader.store, tp)
        for m in i.isr:
            member = cluster.brokers.get(m)
            if m == i.leader or member is None or member.store._closed:
                continue
            try:
                start = max(lead_start, member.store.log_start_offset(tp))
            except (KeyError, StoreError):
                continue
            lacks = missing_rows(lead_rows, hwm, _rows(member.store, tp), start)
            if lacks:
                out.append(f"{tp}: ISR member {m} lacks leader {i.leader}'s segment rows {lacks[:4]} (HWM {hwm})")
    return out
