"""What walmgr knows about one WAL object, and the states it moves through.

::

    tracked ──(older than the age gate)──> candidate ──(every leader: no reference)──> planned ──> deleted
       ^                                      │
       └──────(referenced, or any doubt)──────┘

    invalid: a key under the prefix that is not a WAL key, or an object that
             is not a valid segment; reported, never deleted.
    gone:    a tracked object a full scan no longer finds (deleted by
             somebody else); kept for the record.

Records are immutable; the registry stores them as msgpack maps.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from partlog.kafka.records import TopicIdPartition


class State(StrEnum):
    TRACKED = "tracked"
    CANDIDATE = "candidate"
    PLANNED = "planned"
    DELETED = "deleted"
    INVALID = "invalid"
    GONE = "gone"


class Source(StrEnum):
    NOTIFICATION = "notification"  # a broker said it uploaded the object
    SCAN = "scan"  # a bucket listing found it


@dataclass(frozen=True, slots=True)
class ObjectRecord:
    key: str
    size: int
    created_ms: int  # from the key: what the commit deadline is measured from
    broker_id: int
    partitions: tuple[TopicIdPartition, ...]  # from the footer (or the notification)
    source: Source
    state: State
    first_seen_ms: int
    last_checked_ms: int = -1
    # Why the object is invalid, or the last reason it was kept.
    note: str = ""
    deleted_ms: int = -1
    # The cluster the footer names (None: not read yet, e.g. a notification,
    # or a footer without one).  walmgr deletes only objects of its own cluster.
    cluster_id: uuid.UUID | None = None

    def with_state(self, state: State, *, note: str | None = None, **changes: Any) -> ObjectRecord:
        return replace(self, state=state, note=self.note if note is None else note, **changes)

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "size": self.size,
            "created_ms": self.created_ms,
            "broker": self.broker_id,
            "parts": [[tp.topic_id.bytes, tp.partition] for tp in self.partitions],
            "source": self.source.value,
            "state": self.state.value,
            "first_seen_ms": self.first_seen_ms,
            "last_checked_ms": self.last_checked_ms,
            "note": self.note,
            "deleted_ms": self.deleted_ms,
        }
        if self.cluster_id is not None:
            doc["cluster"] = self.cluster_id.bytes
        return doc

    @classmethod
    def from_doc(cls, key: str, doc: dict[str, Any]) -> ObjectRecord:
        return cls(
            key,
            int(doc["size"]),
            int(doc["created_ms"]),
            int(doc["broker"]),
            tuple(TopicIdPartition(uuid.UUID(bytes=bytes(t)), int(p)) for t, p in doc["parts"]),
            Source(doc["source"]),
            State(doc["state"]),
            int(doc["first_seen_ms"]),
            int(doc["last_checked_ms"]),
            str(doc["note"]),
            int(doc["deleted_ms"]),
            uuid.UUID(bytes=bytes(doc["cluster"])) if doc.get("cluster") is not None else None,
        )

    def to_json(self) -> dict[str, Any]:
        """The shape ``walmgr scan --json`` and ``inspect`` print."""
        return {
            "key": self.key,
            "size": self.size,
            "created_ms": self.created_ms,
            "broker": self.broker_id,
            "partitions": [f"{tp.topic_id}-{tp.partition}" for tp in self.partitions],
            "source": self.source.value,
            "status": self.state.value,
            "first_seen_ms": self.first_seen_ms,
            "last_checked_ms": self.last_checked_ms,
            "note": self.note,
            "deleted_ms": self.deleted_ms,
            "cluster_id": None if self.cluster_id is None else str(self.cluster_id),
        }
