"""The faults of a ``partlog cluster`` run, while the producers keep going:
a random broker killed and restarted every ``kill_broker_every_s``, and the
etcd faults (a follower, then the leader, killed and restarted; or every
member stopped for ``etcd_outage_s``) at fixed shares of the run, with the
produce pause each caused."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from partlog.tools.cluster_options import ClusterOptions
    from partlog.tools.local_cluster import LocalCluster

log = logging.getLogger(__name__)

# How long after an etcd fault the produce pause is looked for.
ETCD_FAULT_WINDOW_S = 10.0
# How long a killed etcd leader's successor may take to be elected.
ETCD_ELECTION_WAIT_S = 30.0


async def kill_loop(cluster: LocalCluster, opts: ClusterOptions, rng: random.Random, stop: asyncio.Event) -> None:
    """Kill one random broker every ``kill_broker_every_s`` and restart it
    after ``restart_after_s``, until ``stop`` is set.

    It ends between steps, never inside a kill or a restart: cancelled
    inside ``LocalCluster.kill``, a broker was left unlisted with its store
    still open, and restarting it on the same directory failed ("LMDB
    environment already open in this process")."""

    async def stopped_within(seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await stop.wait()
        return stop.is_set()

    while not await stopped_within(opts.kill_broker_every_s):
        victim = rng.choice(sorted(cluster.brokers))
        log.warning("killing broker %d", victim)
        await cluster.kill(victim)
        if await stopped_within(opts.restart_after_s):
            return  # the caller brings every broker back
        log.warning("restarting broker %d", victim)
        await cluster.start_broker(victim)


async def etcd_fault_loop(
    cluster: LocalCluster, opts: ClusterOptions, start: float, events: list[dict[str, Any]]
) -> None:
    """The etcd faults of ``opts``, at fixed shares of the run (see ClusterOptions)."""
    etcd = cluster.etcd
    assert etcd is not None
    d = opts.duration_s

    async def at(share: float) -> None:
        await asyncio.sleep(max(0.0, start + share * d - time.monotonic()))

    if opts.etcd_member_faults:
        await at(0.25)
        leader = await asyncio.to_thread(etcd.leader)
        follower = next(i for i in range(etcd.members) if i != leader)
        events.append({"fault": f"etcd follower m{follower} killed", "at_s": time.monotonic() - start})
        log.warning("killing etcd follower m%d", follower)
        await asyncio.to_thread(etcd.kill, follower)
        await at(0.40)
        await asyncio.to_thread(etcd.restart, follower)
        await at(0.55)
        leader = await asyncio.to_thread(etcd.leader)
        victim = 0 if leader is None else leader
        killed_at = time.monotonic()
        log.warning("killing etcd leader m%d", victim)
        await asyncio.to_thread(etcd.kill, victim)
        elected = None
        while elected is None and time.monotonic() - killed_at < ETCD_ELECTION_WAIT_S:
            await asyncio.sleep(0.05)
            elected = await asyncio.to_thread(etcd.leader)
        events.append({
            "fault": f"etcd leader m{victim} killed",
            "at_s": killed_at - start,
            "etcd_election_s": None if elected is None else time.monotonic() - killed_at,
        })  # fmt: skip
        await at(0.75)
        await asyncio.to_thread(etcd.restart, victim)
    if opts.etcd_outage_s:
        await at(0.30)
        events.append(
            {"fault": "every etcd member down", "at_s": time.monotonic() - start, "for_s": opts.etcd_outage_s}
        )
        log.warning("stopping every etcd member for %.1f s", opts.etcd_outage_s)
        await asyncio.to_thread(etcd.stop_all_members)
        await asyncio.sleep(opts.etcd_outage_s)
        await asyncio.to_thread(etcd.restart_all)


def fault_effects(events: list[dict[str, Any]], ack_times: list[float]) -> list[dict[str, Any]]:
    """Each fault with the acknowledgements in its window and the longest
    gap between two of them (the produce pause it caused, at most), beside
    the longest gap before the first fault (the same load without one: the
    baseline the pause is read against)."""
    acks = sorted(ack_times)
    first = min((ev["at_s"] for ev in events), default=0.0)
    calm = [t for t in acks if t < first]
    baseline = max((b - a for a, b in itertools.pairwise(calm)), default=0.0)
    out = []
    for ev in events:
        begin = ev["at_s"]
        end = begin + ev.get("for_s", 0.0) + ETCD_FAULT_WINDOW_S
        inside = [t for t in acks if begin <= t <= end]
        before = [t for t in acks if t < begin][-1:]
        points = before + inside
        gaps = [b - a for a, b in itertools.pairwise(points)]
        during = [t for t in inside if t <= begin + ev.get("for_s", 0.0)]
        out.append({
            **ev, "acks_in_window": len(inside), "acks_during": len(during),
            "produce_pause_s": max(gaps, default=0.0), "produce_pause_before_faults_s": baseline,
        })  # fmt: skip
    return out
