"""The consumer-group APIs of the Kafka front end: FindCoordinator,
JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
ListGroups, DescribeGroups, DeleteGroups and KIP-848's
ConsumerGroupHeartbeat and ConsumerGroupDescribe, mapped onto this broker's
:class:`partlog.kafka_front.group_coordinator.GroupCoordinator`
(FindCoordinator of key type 1, transactions, onto its
:class:`partlog.kafka_front.txn_coordinator.TxnCoordinator`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from partlog.acl import AclOperation, ResourceType
from partlog.kafka.errors import Errors
from partlog.kafka_front.authz import OPERATIONS_NOT_ASKED, denied
from partlog.kafka_front.consumer_assignor import Assignment
from partlog.kafka_front.consumer_group import ConsumerGroup, HeartbeatIn, check_fetch
from partlog.kafka_front.group_coordinator import GroupCoordinator
from partlog.kafka_front.group_delete import delete_groups
from partlog.kafka_front.handler import ApiHandlers, Session, duration_ms
from partlog.kafka_front.offset_delete import delete_offsets
from partlog.kafka_front.port import BrokerPort
from partlog.kafka_front.txn_coordinator import TxnCoordinator
from partlog.limits import PARTITIONS_PER_CLUSTER_MAX

# FindCoordinator's key types (Kafka's CoordinatorType).
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


class GroupApis(ApiHandlers):
    def __init__(self, broker: BrokerPort, groups: GroupCoordinator, txns: TxnCoordinator) -> None:
        super().__init__(broker)
        self.groups = groups
        self.txns = txns

    async def find_coordinator(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        keys = list(body.coordinator_keys) if req.api_version >= 4 else [body.key]
        key_type = int(getattr(body, "key_type", 0))
        found = []
        for key in keys:
            node: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1, "error_message": None}
            if key_type == KEY_TYPE_GROUP and not self.authz.group(session, AclOperation.DESCRIBE, key):
                found.append({**node, "error_code": int(Errors.GROUP_AUTHORIZATION_FAILED)})
                continue
            if key_type == KEY_TYPE_TRANSACTION and not self.authz.txn_id(session, AclOperation.DESCRIBE, key):
                found.append({**node, "error_code": int(Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)})
                continue
            # As Kafka's getCoordinator: any key, the empty one too, has a
            # coordinator (the requests to it then refuse an empty id).
            if key_type == KEY_TYPE_GROUP:
                error, broker_id = await self.groups.find_coordinator(key)
            elif key_type == KEY_TYPE_TRANSACTION:
                error, broker_id = await self.txns.find_coordinator(key)
            else:
                found.append({**node, "error_code": int(Errors.INVALID_REQUEST),
                              "error_message": f"unknown key type {key_type}"})  # fmt: skip
                continue
            info = self.broker.metadata.broker(broker_id) if error == Errors.NONE else None
            host, port = info.kafka_address_of(session.listener) if info is not None else ("", 0)
            if info is None or not port:
                found.append({**node, "error_code": int(Errors.COORDINATOR_NOT_AVAILABLE)})
            else:
                found.append({**node, "error_code": 0, "node_id": broker_id, "host": host, "port": port})
        if req.api_version >= 4:
            return {"throttle_time": 0, "coordinators": found}
        return {"throttle_time": 0, **{k: v for k, v in found[0].items() if k != "key"}}

    async def join_group(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        if not self.authz.group(session, AclOperation.READ, body.group_id):
            return denied(req, Errors.GROUP_AUTHORIZATION_FAILED)
        session_timeout_ms = duration_ms(body.session_timeout)
        rebalance = getattr(body, "rebalance_timeout", None)
        return await self.groups.join(
            body.group_id,
            body.member_id,
            client_id=req.client_id or "",
            client_host=session.peer.rsplit(":", 1)[0],
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=duration_ms(rebalance) if rebalance is not None else session_timeout_ms,
            protocol_type=body.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
            group_instance_id=getattr(body, "group_instance_id", None),
            require_known_member_id=req.api_version >= 4,
            supports_skip_assignment=req.api_version >= 9,
        )

    async def sync_group(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        if not self.authz.group(session, AclOperation.READ, body.group_id):
            return denied(req, Errors.GROUP_AUTHORIZATION_FAILED)
        assignments = {a.member_id: bytes(a.assignment) for a in body.assignments}
        instance = getattr(body, "group_instance_id", None)
        return await self.groups.sync(body.group_id, body.member_id, int(body.generation_id), assignments, instance)

    async def heartbeat(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        if not self.authz.group(session, AclOperation.READ, body.group_id):
            return denied(req, Errors.GROUP_AUTHORIZATION_FAILED)
        instance = getattr(body, "group_instance_id", None)
        error = await self.groups.heartbeat(body.group_id, body.member_id, int(body.generation_id), instance)
        return {"throttle_time": 0, "error_code": int(error)}

    async def leave_group(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        if not self.authz.group(session, AclOperation.READ, body.group_id):
            return denied(req, Errors.GROUP_AUTHORIZATION_FAILED)
        if req.api_version >= 3:
            ids = [m.member_id for m in body.members]
            instances = [m.group_instance_id for m in body.members]
            error, each = await self.groups.leave(body.group_id, ids, instances)
            if error != Errors.NONE:
                # As Kafka's error response: the request's error, no members.
                return {"throttle_time": 0, "error_code": int(error), "members": []}
            return {"throttle_time": 0, "error_code": 0, "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "error_code": int(e)}
                for m, e in zip(body.members, each, strict=True)
            ]}  # fmt: skip
        error, results = await self.groups.leave(body.group_id, [body.member_id])
        return {"throttle_time": 0, "error_code": int(error if error != Errors.NONE else results[0]), "members": []}

    async def offset_commit(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        generation = int(getattr(body, "generation_id_or_member_epoch", getattr(body, "generation_id", -1)))
        wanted: dict[tuple[str, int], tuple[int, int, str | None]] = {}
        # As Kafka: READ on the group, else every partition is refused; READ on each topic.
        group_ok = self.authz.group(session, AclOperation.READ, body.group_id)
        answers: dict[tuple[str, int], Errors] = {}
        for t in body.topics:
            topic_ok = group_ok and self.authz.topic(session, AclOperation.READ, t.name)
            refusal = Errors.TOPIC_AUTHORIZATION_FAILED if group_ok else Errors.GROUP_AUTHORIZATION_FAILED
            for p in t.partitions:
                if not topic_ok:
                    answers[(t.name, int(p.partition_index))] = refusal
                    continue
                wanted[(t.name, int(p.partition_index))] = (
                    int(p.committed_offset),
                    int(getattr(p, "committed_leader_epoch", -1)),
                    p.committed_metadata,
                )
        if wanted or not answers:
            instance = getattr(body, "group_instance_id", None)
            answers.update(await self.groups.commit_offsets(body.group_id, body.member_id or "", generation, wanted,
                                                            instance, api_version=req.api_version))  # fmt: skip
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (name, p), e in answers.items():
            by_topic.setdefault(name, []).append({"partition_index": p, "error_code": int(e)})
        return {"throttle_time": 0, "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}

    async def offset_fetch(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        require_stable = bool(getattr(body, "require_stable", False))
        if req.api_version >= 8:
            # v8+: several groups; v9: a KIP-848 member's id and epoch.
            groups = []
            for g in body.groups:
                wanted = None if g.topics is None else [(t.name, int(p)) for t in g.topics for p in t.partition_indexes]
                member = (getattr(g, "member_id", None), int(getattr(g, "member_epoch", -1)))
                error, topics = await self._fetch_group(g.group_id, wanted, require_stable, session, member)
                groups.append({"group_id": g.group_id, "topics": topics, "error_code": int(error)})
            return {"throttle_time": 0, "groups": groups}
        wanted = None
        if body.topics is not None:
            wanted = [(t.name, int(p)) for t in body.topics for p in t.partition_indexes]
        error, topics = await self._fetch_group(body.group_id, wanted, require_stable, session)
        if error != Errors.NONE and req.api_version < 2 and wanted is not None:
            # v0-v1 have no top-level error: each partition carries it.
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for name, p in wanted:
                by_topic.setdefault(name, []).append({"partition_index": p, "committed_offset": -1, "metadata": "",
                                                      "error_code": int(error)})  # fmt: skip
            topics = [{"name": n, "partitions": ps} for n, ps in by_topic.items()]
        return {"throttle_time": 0, "topics": topics, "error_code": int(error)}

    async def _fetch_group(
        self,
        group_id: str,
        wanted: list[tuple[str, int]] | None,
        require_stable: bool,
        session: Session,
        member: tuple[str | None, int] = (None, -1),
    ) -> tuple[Errors, list[dict[str, Any]]]:
        """One group's committed offsets as the answer's topics, and its error."""
        if not self.authz.group(session, AclOperation.DESCRIBE, group_id):
            return Errors.GROUP_AUTHORIZATION_FAILED, []
        if member != (None, -1):
            _, g = await self.groups.consumer_group(group_id)
            if g is not None and (refused := check_fetch(g, *member)) != Errors.NONE:
                return refused, []
        error, found = await self.groups.fetch_offsets(group_id, wanted, require_stable)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        described: dict[str, bool] = {}
        for (name, p), c in found.items():
            if name not in described:
                described[name] = self.authz.topic(session, AclOperation.DESCRIBE, name)
            if not described[name]:
                # As Kafka: named, refused; asked for all, left out.
                if wanted is not None:
                    by_topic.setdefault(name, []).append({"partition_index": p, "committed_offset": -1,
                        "committed_leader_epoch": -1, "metadata": "",
                        "error_code": int(Errors.TOPIC_AUTHORIZATION_FAILED)})  # fmt: skip
                continue
            row: dict[str, Any] = {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                                   "metadata": "", "error_code": 0}  # fmt: skip
            if isinstance(c, Errors):
                row["error_code"] = int(c)
            elif c is not None:
                row.update(committed_offset=c.offset, committed_leader_epoch=c.leader_epoch, metadata=c.metadata)
            by_topic.setdefault(name, []).append(row)
        return error, [{"name": n, "partitions": ps} for n, ps in by_topic.items()]

    async def list_groups(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        states = {s.lower() for s in getattr(body, "states_filter", ())}
        # v5 (KIP-848): each group's type, "classic" or "consumer", and a filter on it.
        types = {t.lower() for t in getattr(body, "types_filter", ())}
        modern = self.groups.consumer_groups_here()
        # As Kafka: DESCRIBE on the cluster lists all, else those the principal may describe.
        every = self.authz.cluster(session, AclOperation.DESCRIBE)
        groups = []
        for g, pt, st in self.groups.groups_here():
            gt = "consumer" if g in modern else "classic"
            if (states and st.lower() not in states) or (types and gt not in types):
                continue
            if every or self.authz.group(session, AclOperation.DESCRIBE, g):
                groups.append({"group_id": g, "protocol_type": pt, "group_state": st, "group_type": gt})
        return {"throttle_time": 0, "error_code": 0, "groups": groups}

    async def describe_groups(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        groups = []
        modern = self.groups.consumer_groups_here() if req.api_version >= 6 else set()
        for g in body.groups:
            if self.authz.group(session, AclOperation.DESCRIBE, g):
                d = await self.groups.describe(g)
                if req.api_version >= 6 and d["error_code"] == 0 and d["group_state"] == "Dead":
                    # v6 (KIP-1043): no such group, or no classic group, is an error.
                    why = "is not a classic group" if g in modern else "not found"
                    d = {**d, "error_code": int(Errors.GROUP_ID_NOT_FOUND), "error_message": f"Group {g} {why}."}
                elif d["error_code"] == 0 and getattr(body, "include_authorized_operations", False):
                    d = {**d, "authorized_operations": self.authz.authorized_operations(session, ResourceType.GROUP, g)}
                groups.append(d)
            else:
                groups.append({"error_code": int(Errors.GROUP_AUTHORIZATION_FAILED), "group_id": g, "group_state": "",
                               "protocol_type": "", "protocol_data": "", "members": []})  # fmt: skip
        return {"throttle_time": 0, "groups": groups}

    async def consumer_group_heartbeat(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        """KIP-848's ConsumerGroupHeartbeat, with Kafka's ACL checks: READ on
        the group, DESCRIBE on every subscribed topic named."""
        answer: dict[str, Any] = {"throttle_time": 0, "error_code": 0, "error_message": None,
                                  "member_id": body.member_id, "member_epoch": -1,
                                  "heartbeat_interval": 0, "assignment": None}  # fmt: skip
        if not self.authz.group(session, AclOperation.READ, body.group_id):
            return {**answer, "error_code": int(Errors.GROUP_AUTHORIZATION_FAILED)}
        names = body.subscribed_topic_names
        if names and not all(self.authz.topic(session, AclOperation.DESCRIBE, n) for n in names):
            return {**answer, "error_code": int(Errors.TOPIC_AUTHORIZATION_FAILED)}
        owned = None
        if body.topic_partitions is not None:
            owned = frozenset((t.topic_id, int(p)) for t in body.topic_partitions if t.topic_id is not None
                              for p in t.partitions)  # fmt: skip
        rebalance = duration_ms(body.rebalance_timeout)
        hb = HeartbeatIn(
            body.group_id, body.member_id, int(body.member_epoch), body.instance_id, body.rack_id, rebalance,
            tuple(names) if names is not None else None, getattr(body, "subscribed_topic_regex", None),
            body.server_assignor, owned, req.client_id or "", session.host,
        )  # fmt: skip
        out = await self.groups.consumer_heartbeat(hb, self.broker.topic_index, req.api_version)
        if out.error != Errors.NONE:
            return {**answer, "error_code": int(out.error), "error_message": out.message}
        given = None if out.assignment is None else {"topic_partitions": _by_topic(out.assignment)}
        return {**answer, "member_id": out.member_id, "member_epoch": out.member_epoch,
                "heartbeat_interval": out.heartbeat_interval_ms, "assignment": given}  # fmt: skip

    async def consumer_group_describe(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        """KIP-848's ConsumerGroupDescribe: DESCRIBE on each group, and on
        every topic its members subscribe to or are assigned (Kafka 4)."""
        groups = []
        names = {tid: name for name, (tid, _) in self.broker.topic_index.items()}
        for gid in body.group_ids:
            base: dict[str, Any] = {"group_id": gid, "error_message": None, "group_state": "", "group_epoch": -1,
                                    "assignment_epoch": -1, "assignor_name": "", "members": [],
                                    "authorized_operations": OPERATIONS_NOT_ASKED}  # fmt: skip
            if not self.authz.group(session, AclOperation.DESCRIBE, gid):
                groups.append({**base, "error_code": int(Errors.GROUP_AUTHORIZATION_FAILED)})
                continue
            error, g = await self.groups.consumer_group(gid)
            if g is None:
                found = f"Group {gid} not found." if error == Errors.GROUP_ID_NOT_FOUND else None
                groups.append({**base, "error_code": int(error), "error_message": found})
                continue
            topics = {n for m in g.members.values() for n in m.subscribed}
            topics |= {names.get(tid, "") for m in g.members.values() for tid, _ in m.assigned} - {""}
            if not all(self.authz.topic(session, AclOperation.DESCRIBE, n) for n in topics):
                groups.append({**base, "error_code": int(Errors.TOPIC_AUTHORIZATION_FAILED)})
                continue
            if body.include_authorized_operations:
                base["authorized_operations"] = self.authz.authorized_operations(session, ResourceType.GROUP, gid)
            groups.append({**base, "error_code": 0, **_described(g, names)})
        return {"throttle_time": 0, "groups": groups}

    async def delete_groups(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        # As Kafka: DELETE on each group, else GROUP_AUTHORIZATION_FAILED for it.
        names = list(dict.fromkeys(body.groups_names))
        allowed = [g for g in names if self.authz.group(session, AclOperation.DELETE, g)]
        done = await delete_groups(self.groups, allowed)
        results = [{"group_id": g, "error_code": int(done.get(g, Errors.GROUP_AUTHORIZATION_FAILED))} for g in names]
        return {"throttle_time": 0, "results": results}

    async def offset_delete(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        """OffsetDelete (KIP-496), Kafka's handleOffsetDeleteRequest: DELETE
        on the group (else the whole answer GROUP_AUTHORIZATION_FAILED); per
        topic READ (else TOPIC_AUTHORIZATION_FAILED), known, each partition
        in range (else UNKNOWN_TOPIC_OR_PARTITION); the rest to the coordinator."""
        answer: dict[str, Any] = {"throttle_time": 0, "error_code": 0, "topics": []}
        if not self.authz.group(session, AclOperation.DELETE, body.group_id):
            return {**answer, "error_code": int(Errors.GROUP_AUTHORIZATION_FAILED)}
        if sum(len(t.partitions) for t in body.topics) > PARTITIONS_PER_CLUSTER_MAX:
            return {**answer, "error_code": int(Errors.INVALID_REQUEST)}  # more than any cluster holds
        index = self.broker.topic_index
        rows: dict[str, list[dict[str, int]]] = {}
        asked: list[tuple[str, list[int]]] = []
        for t in body.topics:
            ps = [int(p.partition_index) for p in t.partitions]
            known = index.get(t.name)
            if not self.authz.topic(session, AclOperation.READ, t.name):
                refused = {p: Errors.TOPIC_AUTHORIZATION_FAILED for p in ps}
            else:
                count = known[1] if known is not None else 0
                refused = {p: Errors.UNKNOWN_TOPIC_OR_PARTITION for p in ps if not 0 <= p < count}
                if len(refused) < len(ps):
                    asked.append((t.name, [p for p in ps if p not in refused]))
            rows.setdefault(t.name, []).extend({"partition_index": p, "error_code": int(e)} for p, e in refused.items())
        error, done = await delete_offsets(self.groups, body.group_id, asked) if asked else (Errors.NONE, {})
        if error != Errors.NONE:
            return {**answer, "error_code": int(error)}
        for name, answered in done.items():
            rows[name].extend({"partition_index": p, "error_code": int(e)} for p, e in answered)
        return {**answer, "topics": [{"name": n, "partitions": ps} for n, ps in rows.items()]}


def _by_topic(assignment: Assignment, names: Mapping[Any, str] | None = None) -> list[dict[str, Any]]:
    """An assignment as the wire's topic_partitions, sorted."""
    by: dict[Any, list[int]] = {}
    for tid, p in sorted(assignment):
        by.setdefault(tid, []).append(p)
    if names is None:
        return [{"topic_id": tid, "partitions": ps} for tid, ps in by.items()]
    return [{"topic_id": tid, "topic_name": names.get(tid, ""), "partitions": ps} for tid, ps in by.items()]


def _described(g: ConsumerGroup, names: Mapping[Any, str]) -> dict[str, Any]:
    members = []
    for m in g.members.values():
        target = g.target.get(m.member_id, frozenset())
        members.append({"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                        "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                        "subscribed_topic_names": sorted(m.subscribed), "subscribed_topic_regex": None,
                        "assignment": {"topic_partitions": _by_topic(m.assigned, names)},
                        "target_assignment": {"topic_partitions": _by_topic(target, names)},
                        "member_type": 1})  # fmt: skip
    return {"group_state": g.state, "group_epoch": g.group_epoch, "assignment_epoch": g.assignment_epoch,
            "assignor_name": g.assignor, "members": members}  # fmt: skip


__all__ = ["GroupApis"]
