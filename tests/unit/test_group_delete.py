"""DeleteGroups on the group coordinator (fake broker): Kafka's per-group
codes, tombstones a new coordinator's load honours, and the protocol type
an emptied group keeps."""

from __future__ import annotations

import asyncio
from typing import Any

from partlog.kafka.errors import Errors
from partlog.kafka_front.group_coordinator import GroupCoordinator
from partlog.kafka_front.group_delete import delete_groups
from tests.group_helpers import assert_a_load_rebuilds, live_coordinator


async def _join_static(live: GroupCoordinator, group: str) -> dict[str, Any]:
    return await live.join(
        group,
        "",
        client_id="c",
        client_host="h",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        protocol_type="consumer",
        protocols=[("range", b"")],
        group_instance_id="i1",
        require_known_member_id=True,
    )


def test_delete_groups_answers_kafkas_codes_and_its_tombstones_survive_a_load() -> None:
    async def main() -> None:
        async with live_coordinator(2) as (broker, live, _tp):
            for part in live._parts.values():
                part.groups.initial_rebalance_delay_ms = 0  # the fake clock does not move
            assert await live.commit_offsets("g", "", -1, {("data", 0): (5, -1, None), ("data", 1): (7, -1, "m")})
            assert (await delete_groups(live, ["g", "g"])) == {"g": Errors.NONE}
            assert (await live.fetch_offsets("g", None)) == (Errors.NONE, {})
            assert all(gid != "g" for gid, _, _ in live.groups_here())
            await assert_a_load_rebuilds(broker, live)  # the reload drops them too
            assert (await delete_groups(live, ["g", ""])) == {
                "g": Errors.GROUP_ID_NOT_FOUND,
                "": Errors.GROUP_ID_NOT_FOUND,
            }
            # A group with a member is NON_EMPTY_GROUP; once it leaves, the
            # group keeps its protocol type and deletes.
            joined = await _join_static(live, "g")
            assert joined["error_code"] == 0
            assert (await delete_groups(live, ["g"])) == {"g": Errors.NON_EMPTY_GROUP}
            assert (await live.leave("g", [""], ["i1"])) == (Errors.NONE, [Errors.NONE])
            assert ("g", "consumer", "Empty") in live.groups_here()
            assert (await live.describe("g"))["protocol_type"] == "consumer"
            assert (await delete_groups(live, ["g"])) == {"g": Errors.NONE}
            assert (await live.describe("g"))["group_state"] == "Dead"

    asyncio.run(main())


def test_an_emptied_group_with_offsets_is_listed_with_its_protocol_type() -> None:
    async def main() -> None:
        async with live_coordinator(1) as (_broker, live, _tp):
            for part in live._parts.values():
                part.groups.initial_rebalance_delay_ms = 0  # the fake clock does not move
            member = (await _join_static(live, "g"))["member_id"]
            assert (await live.commit_offsets("g", member, 1, {("data", 0): (3, -1, None)}, "i1")) == {
                ("data", 0): Errors.REBALANCE_IN_PROGRESS
            }
            assert (await live.sync("g", member, 1, {member: b"x"}, "i1"))["error_code"] == 0
            assert (await live.commit_offsets("g", member, 1, {("data", 0): (3, -1, None)}, "i1")) == {
                ("data", 0): Errors.NONE
            }
            assert (await live.commit_offsets("g", "stale", 1, {("data", 0): (3, -1, None)}, "i1")) == {
                ("data", 0): Errors.FENCED_INSTANCE_ID
            }
            fenced = await live.commit_txn_offsets("g", 7, 0, "stale", 1, "i1", {("data", 0): (4, -1, None)})
            assert fenced == {("data", 0): Errors.FENCED_INSTANCE_ID}
            assert (await live.leave("g", [member], ["i1"]))[1] == [Errors.NONE]
            [part] = live._parts.values()
            part.groups.tick(10**15)  # the emptied group is forgotten; its offsets stay
            assert part.groups.group("g") is None
            assert ("g", "consumer", "Empty") in live.groups_here()
            assert (await live.describe("g"))["protocol_type"] == "consumer"

    asyncio.run(main())
