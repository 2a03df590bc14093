"""The KIP-848 consumer-group core against a small reference model of its
clients (hypothesis stateful): members join, heartbeat what they own, leave,
time passes.  Invariants: no partition owned by two members at once (owned:
what a member's client holds, the assignment it last acknowledged), epochs
never go back, and once every member has heartbeated a few rounds with
nothing changing, every subscribed partition is owned exactly once."""

from __future__ import annotations

import uuid

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from partlog.kafka.errors import Errors
from partlog.kafka_front.consumer_assignor import ASSIGNORS, Assignment
from partlog.kafka_front.consumer_group import (
    SESSION_TIMEOUT_MS_DEFAULT,
    ConsumerGroups,
    HeartbeatIn,
    MemberState,
)

TOPICS = {"a": (uuid.UUID(int=1), 3), "b": (uuid.UUID(int=2), 2), "c": (uuid.UUID(int=3), 1)}
MEMBERS = ("m0", "m1", "m2", "m3")
GROUP = "g"


class Client:
    def __init__(self, subscribed: frozenset[str], instance_id: str | None = None) -> None:
        self.subscribed = subscribed
        self.instance_id = instance_id
        self.epoch = 0
        self.owned: Assignment = frozenset()


class ConsumerGroupModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.core = ConsumerGroups(new_uuid=uuid.uuid4)
        self.now = 0
        self.clients: dict[str, Client] = {}
        self.last_group_epoch = 0

    def _beat(self, mid: str, *, lost: bool = False, **kw: object) -> None:
        c = self.clients[mid]
        owned = frozenset() if c.epoch == 0 else c.owned
        req = HeartbeatIn(GROUP, mid, c.epoch, owned=owned, subscribed_topic_names=tuple(sorted(c.subscribed)),
                          rebalance_timeout_ms=SESSION_TIMEOUT_MS_DEFAULT, instance_id=c.instance_id,
                          **kw)  # type: ignore[arg-type]  # fmt: skip
        out = self.core.heartbeat(req, TOPICS, self.now)
        if lost:
            return  # the answer never reached the client
        if out.error == Errors.FENCED_MEMBER_EPOCH and c.epoch > 0:
            # As a client: it gives up everything and joins again.
            c.owned, c.epoch = frozenset(), 0
            return self._beat(mid)
        assert out.error == Errors.NONE, out
        assert out.member_epoch >= c.epoch, "a member epoch went back"
        c.epoch = out.member_epoch
        if out.assignment is not None:
            # The client gives up what it lost at once, and takes what it got.
            c.owned = out.assignment

    @rule(mid=st.sampled_from(MEMBERS), subs=st.sets(st.sampled_from(sorted(TOPICS)), min_size=1),
          assignor=st.sampled_from((None, *ASSIGNORS)))  # fmt: skip
    def join(self, mid: str, subs: set[str], assignor: str | None) -> None:
        old = self.clients.get(mid)
        self.clients[mid] = Client(frozenset(subs), old.instance_id if old is not None else None)
        self._beat(mid, server_assignor=assignor)

    def _free_ids(self) -> list[str]:
        """Member ids not in use whose instance id is not in use either."""
        used = {c.instance_id for c in self.clients.values()}
        return [m for m in MEMBERS if m not in self.clients and f"i-{m}" not in used]

    @precondition(lambda self: self._free_ids())
    @rule(data=st.data(), subs=st.sets(st.sampled_from(sorted(TOPICS)), min_size=1))
    def join_static(self, data: st.DataObject, subs: set[str]) -> None:
        mid = data.draw(st.sampled_from(self._free_ids()))
        self.clients[mid] = Client(frozenset(subs), f"i-{mid}")
        self._beat(mid)

    @precondition(lambda self: any(c.instance_id for c in self.clients.values()))
    @rule(data=st.data())
    def static_member_restarts(self, data: st.DataObject) -> None:
        """A static member leaves (-2), its process drops what it held, and
        comes back under a new member id: same instance, same assignment."""
        mid = data.draw(st.sampled_from(sorted(m for m, c in self.clients.items() if c.instance_id)))
        c = self.clients.pop(mid)
        out = self.core.heartbeat(HeartbeatIn(GROUP, mid, -2, instance_id=c.instance_id), TOPICS, self.now)
        assert (out.error, out.member_epoch) == (Errors.NONE, -2)
        new_mid = f"{mid}'"
        if new_mid in self.clients or len(new_mid) > 6:
            new_mid = mid  # keep the ids few
        self.clients[new_mid] = Client(c.subscribed, c.instance_id)
        self._beat(new_mid)

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def an_answer_is_lost(self, data: st.DataObject) -> None:
        self._beat(data.draw(st.sampled_from(sorted(self.clients))), lost=True)

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        self._beat(data.draw(st.sampled_from(sorted(self.clients))))

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), subs=st.sets(st.sampled_from(sorted(TOPICS)), min_size=1))
    def resubscribe(self, data: st.DataObject, subs: set[str]) -> None:
        mid = data.draw(st.sampled_from(sorted(self.clients)))
        self.clients[mid].subscribed = frozenset(subs)
        self._beat(mid)

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        mid = data.draw(st.sampled_from(sorted(self.clients)))
        c = self.clients[mid]
        out = self.core.heartbeat(HeartbeatIn(GROUP, mid, -1, instance_id=c.instance_id), TOPICS, self.now)
        assert out.error == Errors.NONE and out.member_epoch == -1
        del self.clients[mid]

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def stale_heartbeat_is_fenced(self, data: st.DataObject) -> None:
        mid = data.draw(st.sampled_from(sorted(self.clients)))
        c = self.clients[mid]
        g = self.core.group(GROUP)
        assert g is not None
        ahead = g.members[mid].member_epoch + 1  # ahead of the coordinator
        req = HeartbeatIn(GROUP, mid, ahead, owned=c.owned, instance_id=c.instance_id)
        out = self.core.heartbeat(req, TOPICS, self.now)
        assert out.error == Errors.FENCED_MEMBER_EPOCH

    @rule()
    def everyone_times_out(self) -> None:
        self.now += SESSION_TIMEOUT_MS_DEFAULT + 1
        self.core.tick(self.now)
        g = self.core.group(GROUP)
        assert g is None or not g.members
        self.clients.clear()

    @rule()
    def time_passes(self) -> None:
        self.now += 1_000
        self.core.tick(self.now)

    @precondition(lambda self: self.clients)
    @rule()
    def settle(self) -> None:
        for _ in range(2 * len(self.clients) + 2):
            for mid in sorted(self.clients):
                self._beat(mid)
        g = self.core.group(GROUP)
        assert g is not None
        assert all(m.state is MemberState.STABLE and m.member_epoch == g.assignment_epoch
                   for m in g.members.values())  # fmt: skip
        wanted = {(TOPICS[t][0], p) for c in self.clients.values() for t in c.subscribed for p in range(TOPICS[t][1])}
        owned = [tp for c in self.clients.values() for tp in c.owned]
        assert sorted(owned) == sorted(wanted)
        assert g.state == "Stable"

    @invariant()
    def no_partition_owned_twice(self) -> None:
        owned = [tp for c in self.clients.values() for tp in c.owned]
        assert len(owned) == len(set(owned)), "a partition owned by two members"
        g = self.core.group(GROUP)
        if g is not None:
            held = [tp for m in g.members.values() for tp in m.assigned | m.revoking]
            assert len(held) == len(set(held))
            assert set(g.owners) == set(held)

    @invariant()
    def the_group_epoch_never_goes_back(self) -> None:
        g = self.core.group(GROUP)
        if g is not None:
            assert g.group_epoch >= self.last_group_epoch
            assert g.assignment_epoch <= g.group_epoch
            self.last_group_epoch = g.group_epoch


ConsumerGroupModel.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestConsumerGroupModel = ConsumerGroupModel.TestCase
