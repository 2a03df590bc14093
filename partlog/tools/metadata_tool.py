"""``partlog metadata``: what the metadata logs say about topics and WAL
objects (the metadata tool KIP-1163 asks for).

Sources, all opened read-only, so the tool runs beside live brokers and a
live walmgr (LMDB readers take no writer lock; the registry's read-only open
takes no ``flock``):

* the brokers' :class:`~partlog.store.MetadataStore` directories:
  ``<data-dir>/brokers/<id>/meta`` (``partlog cluster``/``partlog broker``
  layout) or any list of store directories (``--broker-dir``);
* walmgr's registry (``<data-dir>/walmgr`` when present, or ``--registry``),
  for the objects that still exist and which partitions their footers name.

Every partition is counted once: its numbers come from ONE replica, the one
with the highest log end offset (ties: higher high watermark, then higher
log start, then the first store given), never summed over replicas.  Logs are
streamed with :meth:`MetadataStore.read_log` in pages of
:data:`PAGE_ENTRIES` entries (one short read transaction each), up to the log
end offset read with the partition's state, so memory grows with the number
of distinct objects, not of entries.  The high watermark is the persisted
one: a running broker keeps its current HWM in memory and persists it with
the partition's next write (docs/design/replication.md, "HWM persistence"), so it may lag.

Per topic (:func:`topics_report`):

* ``live_bytes``: bytes of the batches still in the topic's logs;
* ``objects_total_bytes``: total file size of the distinct WAL objects those
  batches are in (an object shared with other topics counts whole);
* ``deleted_part_bytes``: total size of the objects that still exist (walmgr
  state tracked, candidate or planned), whose footer names a partition of
  the topic, and that the topic's logs no longer reference: its batches went
  (retention, DeleteRecords) while the object lives on, typically because
  other topics still reference it.  An object nobody references any more
  (waiting for walmgr to delete it) or an uncommitted orphan counts too.
  None without a registry.

Per object (:func:`object_report`): total size, the live batch bytes that
reference it (per partition, from the chosen replicas), and walmgr's state.
There is no index from object to partitions, so it streams the logs of the
stores whose file index has the key.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from partlog.kafka.records import TopicIdPartition
from partlog.store import MetadataStore, OffsetOutOfRangeError, ReplicatedEntry, StoreError
from partlog.wal.key import OBJECT_KEY_BYTES_MAX
from walmgr.model import ObjectRecord
from walmgr.registry import LIVE_STATES, Registry, RegistryError

# Entries per read_log page: one read transaction each.
PAGE_ENTRIES = 1024
# read_log's byte bound; pages are bounded by PAGE_ENTRIES instead.
_PAGE_BYTES = 1 << 62
EXIT_DATA = 1  # an unknown object key, a corrupt entry or record
EXIT_USAGE = 2  # a directory without stores, a store or registry that does not open


class MetadataToolError(Exception):
    """A clear, printable failure; ``exit_code`` is what the CLI returns."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True, slots=True)
class Replica:
    """One broker's store, opened read-only."""

    label: str  # "broker <id>" in the data-dir layout, else the store's path
    path: str
    store: MetadataStore


@dataclass(frozen=True, slots=True)
class PartitionView:
    """A partition as its most advanced replica has it."""

    tp: TopicIdPartition
    topic_name: str
    replica: Replica
    replicas: int  # how many of the stores hold the partition
    log_start_offset: int
    high_watermark: int
    log_end_offset: int


@dataclass(slots=True)
class Sources:
    replicas: list[Replica]
    registry: Registry | None
    registry_path: str | None
    # Replication factor per partition, from <data_dir>/controller when there
    # is one (a static cluster file's brokers have none to read).
    replication_factors: dict[TopicIdPartition, int] = field(default_factory=dict)
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> Sources:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def broker_store_dirs(data_dir: str) -> list[tuple[str, str]]:
    """(label, path) of every ``<data_dir>/brokers/<id>/meta`` store, by broker id."""
    if not os.path.isdir(data_dir):
        raise MetadataToolError(f"{data_dir}: no such directory")
    brokers = os.path.join(data_dir, "brokers")
    names = sorted(os.listdir(brokers)) if os.path.isdir(brokers) else []
    found = [
        (name, os.path.join(brokers, name, "meta"))
        for name in names
        if os.path.isfile(os.path.join(brokers, name, "meta", "data.mdb"))
    ]
    if not found:
        raise MetadataToolError(
            f"{data_dir}: no broker metadata stores here (expected {os.path.join(brokers, '<id>', 'meta')}); "
            "give the data directory of partlog cluster/broker, or --broker-dir PATH for each store"
        )
    found.sort(key=lambda nf: (0, int(nf[0]), "") if nf[0].isdigit() else (1, 0, nf[0]))
    return [(f"broker {name}", path) for name, path in found]


def open_sources(
    *, data_dir: str | None = None, broker_dirs: Sequence[str] = (), registry: str | None = None
) -> Sources:
    """Open the stores (``data_dir``'s brokers, or ``broker_dirs``) and the
    registry (``registry``, else ``<data_dir>/walmgr`` if it holds one), all
    read-only.  :class:`MetadataToolError` (exit 2) names what does not open."""
    if (data_dir is None) == (not broker_dirs):
        raise MetadataToolError("give either a data directory or broker store directories")
    targets = broker_store_dirs(data_dir) if data_dir is not None else [(p, p) for p in broker_dirs]
    src = Sources([], None, None)
    try:
        seen: set[str] = set()
        for label, path in targets:
            real = os.path.realpath(path)
            if real in seen:
                continue  # LMDB must not open one environment twice in a process
            seen.add(real)
            if not os.path.isdir(path):
                raise MetadataToolError(f"{path}: no such directory (expected a broker's metadata store)")
            try:
                store = MetadataStore.open(path, readonly=True)
            except StoreError as e:
                raise MetadataToolError(str(e)) from e
            src._stack.callback(store.close)
            src.replicas.append(Replica(label, path, store))
        if data_dir is not None and os.path.isdir(os.path.join(data_dir, "controller")):
            from partlog.controller.state_store import ControllerStateError, read_replicas

            try:
                replicas = read_replicas(os.path.join(data_dir, "controller"))
            except ControllerStateError as e:
                raise MetadataToolError(str(e)) from e
            src.replication_factors = {tp: len(r) for tp, r in replicas.items()}
        reg_path = registry
        if reg_path is None and data_dir is not None:
            candidate = os.path.join(data_dir, "walmgr")
            if os.path.isfile(os.path.join(candidate, "data.mdb")):
                reg_path = candidate
        if reg_path is not None:
            try:
                reg = Registry(reg_path, readonly=True)
            except RegistryError as e:
                raise MetadataToolError(str(e)) from e
            src._stack.callback(reg.close)
            src.registry, src.registry_path = reg, reg.path
    except BaseException:
        src.close()
        raise
    return src


def choose_partitions(replicas: Sequence[Replica]) -> list[PartitionView]:
    """Every partition of the stores, from its most advanced replica, by
    topic name, topic id and partition."""
    names: dict[uuid.UUID, str] = {}
    candidates: dict[TopicIdPartition, list[tuple[tuple[int, int, int], Replica]]] = {}
    try:
        for r in replicas:
            for tid, (name, _) in r.store.topics().items():
                names.setdefault(tid, name)
            for tp in r.store.partitions():
                try:
                    st = r.store.partition_state(tp)
                except KeyError:
                    continue  # deleted since partitions() answered
                rank = (st["log_end_offset"], st["high_watermark"], st["log_start_offset"])
                candidates.setdefault(tp, []).append((rank, r))
    except StoreError as e:
        raise MetadataToolError(str(e), EXIT_DATA) from e
    views = []
    for tp, found in candidates.items():
        # max() keeps the first of equal ranks: the first store given.
        (leo, hwm, lso), best = max(found, key=lambda c: c[0])
        views.append(PartitionView(tp, names.get(tp.topic_id, ""), best, len(found), lso, hwm, leo))
    views.sort(key=lambda v: (v.topic_name, str(v.tp.topic_id), v.tp.partition))
    return views


def iter_log(view: PartitionView, page_entries: int | None = None) -> Iterator[ReplicatedEntry]:
    """The entries of the chosen replica's log from its log start up to the
    log end offset of ``view``, streamed in pages of ``page_entries``
    (default :data:`PAGE_ENTRIES`).  A store that moves
    meanwhile (retention raising the log start, a truncation, a deleted
    topic) is followed, not an error."""
    store, tp = view.replica.store, view.tp
    page_entries = page_entries or PAGE_ENTRIES
    offset = view.log_start_offset
    while offset < view.log_end_offset:
        try:
            page = store.read_log(tp, offset, _PAGE_BYTES, page_entries)
        except OffsetOutOfRangeError as oor:
            if offset < oor.log_start_offset:
                offset = oor.log_start_offset  # retention or DeleteRecords ran meanwhile
                continue
            return  # truncated below offset meanwhile
        except KeyError:
            return  # the topic was deleted meanwhile
        except StoreError as err:
            raise MetadataToolError(str(err), EXIT_DATA) from err
        if not page.entries:
            return
        for entry in page.entries:
            if entry.base_offset >= view.log_end_offset:
                return
            yield entry
        offset = page.entries[-1].last_offset + 1


def _live_records(registry: Registry) -> Iterator[ObjectRecord]:
    try:
        yield from registry.records(LIVE_STATES)
    except RegistryError as e:
        raise MetadataToolError(str(e), EXIT_DATA) from e


@dataclass(slots=True)
class _TopicAcc:
    name: str
    topic_id: uuid.UUID
    partitions: list[dict[str, Any]] = field(default_factory=list)
    objects: dict[str, int] = field(default_factory=dict)  # key -> file size
    live_batches: int = 0
    live_bytes: int = 0


def topics_report(src: Sources) -> dict[str, Any]:
    """Per topic: partitions' offsets, live bytes, referenced objects' total
    size and the deleted-part bytes (module doc); a JSON-ready dict."""
    topics: dict[uuid.UUID, _TopicAcc] = {}
    for v in choose_partitions(src.replicas):
        acc = topics.get(v.tp.topic_id)
        if acc is None:
            acc = topics[v.tp.topic_id] = _TopicAcc(v.topic_name, v.tp.topic_id)
        batches = nbytes = 0
        for e in iter_log(v):
            batches += 1
            nbytes += e.size
            if e.object_key:  # "" is a marker stored inline: no object
                acc.objects[e.object_key] = e.file_size
        acc.live_batches += batches
        acc.live_bytes += nbytes
        acc.partitions.append(
            {
                "partition": v.tp.partition,
                "log_start_offset": v.log_start_offset,
                "high_watermark": v.high_watermark,
                "log_end_offset": v.log_end_offset,
                "live_batches": batches,
                "live_bytes": nbytes,
                # The topic's replication factor (from the controller; None
                # without one) and how many of the stores read hold the partition.
                "replication_factor": src.replication_factors.get(v.tp),
                "stores": v.replicas,
                "source": v.replica.label,
            }
        )
    deleted: dict[uuid.UUID, dict[str, int]] | None = None
    if src.registry is not None:
        deleted = {tid: {} for tid in topics}
        for rec in _live_records(src.registry):
            for tid in {tp.topic_id for tp in rec.partitions}:
                acc = topics.get(tid)
                if acc is not None and rec.key not in acc.objects:
                    deleted[tid][rec.key] = rec.size  # a dict: a record streamed twice counts once
    out = []
    for tid, acc in topics.items():
        gone = None if deleted is None else deleted[tid]
        out.append(
            {
                "name": acc.name,
                "topic_id": str(tid),
                "partitions": acc.partitions,
                "live_batches": acc.live_batches,
                "live_bytes": acc.live_bytes,
                "objects": len(acc.objects),
                "objects_total_bytes": sum(acc.objects.values()),
                "deleted_part_objects": None if gone is None else len(gone),
                "deleted_part_bytes": None if gone is None else sum(gone.values()),
            }
        )
    return {
        "stores": [{"label": r.label, "path": r.path} for r in src.replicas],
        "registry": src.registry_path,
        "topics": out,
    }


def object_report(src: Sources, key: str) -> dict[str, Any]:
    """One WAL object: total size, the live batch bytes referencing it (each
    partition once, from its most advanced replica), the partitions, walmgr's
    state.  :class:`MetadataToolError` (exit 1) when neither a store nor the
    registry knows ``key``."""
    valid = 0 < len(key.encode()) <= OBJECT_KEY_BYTES_MAX
    try:
        holders = [r for r in src.replicas if valid and r.store.referenced_files([key])]
    except StoreError as err:
        raise MetadataToolError(str(err), EXIT_DATA) from err
    record: ObjectRecord | None = None
    if src.registry is not None and valid:
        try:
            record = src.registry.get(key)
        except RegistryError as err:
            raise MetadataToolError(str(err), EXIT_DATA) from err
    if not holders and record is None:
        why = "the walmgr registry has no record of it" if src.registry is not None else "no walmgr registry to ask"
        raise MetadataToolError(f"unknown object {key!r}: no broker store references it and {why}", EXIT_DATA)
    holder_paths = {r.path for r in holders}
    total: int | None = None
    parts = []
    views = choose_partitions(src.replicas)
    for v in views:
        if v.replica.path not in holder_paths:
            continue  # its file index has no such key: the partition cannot reference it
        batches = nbytes = 0
        for e in iter_log(v):
            if e.object_key == key:
                batches += 1
                nbytes += e.size
                total = e.file_size
        if batches:
            parts.append(
                {
                    "topic": v.topic_name,
                    "topic_id": str(v.tp.topic_id),
                    "partition": v.tp.partition,
                    "batches": batches,
                    "bytes": nbytes,
                    "source": v.replica.label,
                }
            )
    if total is None and holders:
        # Only replicas behind the most advanced ones still reference it:
        # their logs have the file size.
        total = _file_size_in(holders, views, key)
    total_from: str | None = "store" if total is not None else None
    if total is None and record is not None:
        total, total_from = record.size, "registry"
    return {
        "key": key,
        "total_bytes": total,
        "total_bytes_from": total_from,
        "used_bytes": sum(p["bytes"] for p in parts),
        "used_batches": sum(p["batches"] for p in parts),
        "partitions": parts,
        "stores_referencing": [r.label for r in holders],
        "walmgr_state": None if record is None else record.state.value,
        "registry": src.registry_path,
    }


def _file_size_in(holders: Sequence[Replica], views: Sequence[PartitionView], key: str) -> int | None:
    for r in holders:
        for tp in r.store.partitions():
            try:
                st = r.store.partition_state(tp)
            except KeyError:
                continue
            v = PartitionView(tp, "", r, 1, st["log_start_offset"], st["high_watermark"], st["log_end_offset"])
            for e in iter_log(v):
                if e.object_key == key:
                    return e.file_size
    return None


# ------------------------------------------------------------------ text


def print_topics(doc: dict[str, Any]) -> None:
    stores = ", ".join(s["label"] for s in doc["stores"])
    print(f"stores: {stores}")
    if doc["registry"] is None:
        print("walmgr registry: none found (deleted-part bytes unknown)")
    else:
        print(f"walmgr registry: {doc['registry']}")
    for t in doc["topics"]:
        deleted = (
            "unknown"
            if t["deleted_part_bytes"] is None
            else f"{t['deleted_part_bytes']:,} bytes in {t['deleted_part_objects']:,} objects"
        )
        print()
        print(f"topic {t['name']} ({t['topic_id']})")
        print(f"  live: {t['live_bytes']:,} bytes in {t['live_batches']:,} batches")
        print(f"  objects referenced: {t['objects']:,}, {t['objects_total_bytes']:,} bytes")
        print(f"  deleted parts still stored: {deleted}")
        print(
            f"  {'partition':>9} {'log_start':>12} {'hwm':>12} {'log_end':>12} {'batches':>9} {'live_bytes':>14}"
            f" {'rf':>3} {'stores':>6}  from"
        )
        for p in t["partitions"]:
            print(
                f"  {p['partition']:>9} {p['log_start_offset']:>12} {p['high_watermark']:>12} "
                f"{p['log_end_offset']:>12} {p['live_batches']:>9} {p['live_bytes']:>14,} "
                f"{p['replication_factor'] if p['replication_factor'] is not None else '-':>3} {p['stores']:>6}  "
                f"{p['source']}"
            )


def print_object(doc: dict[str, Any]) -> None:
    total = "unknown"
    if doc["total_bytes"] is not None:
        total = f"{doc['total_bytes']:,} bytes (from the {doc['total_bytes_from']})"
    state = "unknown (no walmgr registry)" if doc["registry"] is None else doc["walmgr_state"] or "no record"
    print(f"object {doc['key']}")
    print(f"  total size: {total}")
    print(f"  used: {doc['used_bytes']:,} bytes in {doc['used_batches']:,} live batches")
    print(f"  walmgr state: {state}")
    print(f"  in the file index of: {', '.join(doc['stores_referencing']) or 'no store'}")
    if doc["partitions"]:
        print(f"  {'topic':30} {'partition':>9} {'batches':>8} {'bytes':>12}  from")
        for p in doc["partitions"]:
            print(f"  {p['topic']:30} {p['partition']:>9} {p['batches']:>8} {p['bytes']:>12,}  {p['source']}")
