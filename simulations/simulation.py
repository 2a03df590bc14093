"""One design of one scenario, simulated: build the cluster, run the clock,
summarize.

Randomness comes from named streams derived from the seed
(``random.Random(f"{seed}/{name}")``): producers draw their send times and
partitions from their own streams, so every design of a run sees the same
load, and adding a stream elsewhere does not shift them.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack

from partlog.kafka.records import CreateTopicAndPartitionsRequest
from partlog.store import MetadataStore
from simulations.batches import BatchTemplates
from simulations.broker_shell import SimBroker
from simulations.classic import ClassicLeader
from simulations.commit_server import CommitCostSampler, CommitServer
from simulations.context import SimContext
from simulations.controller import Controller, Failable, Stoppable, Viewer
from simulations.coordinator import SimCoordinator
from simulations.event_loop import EventLoop
from simulations.latency import LatencySampler
from simulations.metrics import DesignResult, Recorder, summarize
from simulations.network import Network
from simulations.producers import ProducerGroup
from simulations.record_producers import RecordProducer
from simulations.scenario import CommitCost, Design, Routing, Scenario
from simulations.topology import (
    COORDINATOR_ID,
    TOPIC_ID,
    TOPIC_NAME,
    broker_azs,
    initial_metadata,
    topic_partitions,
)

# Virtual time 0 as the real code sees it (2023-11-14): fixed, so object
# keys and offsets do not depend on when the simulation runs.
EPOCH_MS = 1_700_000_000_000
# Each simulated store's LMDB map; it grows by itself if a long run needs more.
STORE_MAP_BYTES = 64 << 20
# tmpfs when there is one: the stores run with sync=False, but page-cache
# writeback of a disk-backed file still costs.
_SHM_DIR = "/dev/shm"


def _temp_root() -> str | None:
    return _SHM_DIR if os.path.isdir(_SHM_DIR) and os.access(_SHM_DIR, os.W_OK) else None


def simulate(
    scenario: Scenario,
    design: Design,
    routing: Routing,
    seed: int,
    progress: Callable[[float], None] | None = None,
) -> DesignResult:
    """Run ``design`` (with ``routing`` for producers, partlog only) over
    the scenario's duration; ``progress(virtual_ms)`` about every simulated
    second."""
    wall_start = time.perf_counter()

    def stream(name: str) -> random.Random:
        return random.Random(f"{seed}/{name}")

    cluster = scenario.cluster
    azs = broker_azs(cluster)
    loop = EventLoop()
    ctx = SimContext(scenario, loop, Network(scenario.network, stream("network")), Recorder(), EPOCH_MS, azs)
    truth = initial_metadata(cluster, stream("assignment"))
    partitions = topic_partitions(cluster)
    templates = BatchTemplates(EPOCH_MS)
    apply_rng = stream("apply")
    servers: dict[int, CommitServer] = {}

    def commit_server(node_id: int, cost: CommitCost) -> CommitServer:
        server = CommitServer(loop, CommitCostSampler(cost, stream(f"commit-{node_id}")))
        servers[node_id] = server
        return server

    follower_apply = LatencySampler(scenario.commit.follower_apply, stream("follower-apply"))

    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="partlog-sim-", dir=_temp_root()))

        def open_store(name: str) -> MetadataStore:
            # No checkpoint thread: the simulation runs on one thread, and a
            # background thread would only compete with it for the GIL.
            s = MetadataStore.open(
                os.path.join(tmp, name),
                sync=False,
                clock=ctx.now_ms,
                map_size_bytes=STORE_MAP_BYTES,
                checkpoint_thread=False,
            )
            stack.callback(s.close)
            s.create_topic_and_partitions([CreateTopicAndPartitionsRequest(TOPIC_ID, TOPIC_NAME, cluster.partitions)])
            return s

        brokers: dict[int, Failable] = {}
        coordinator: SimCoordinator | None = None
        if design is Design.CLASSIC:
            producer_routing = Routing.LEADER_ONLY
            for b in azs:
                leader = ClassicLeader(
                    ctx, b, truth, LatencySampler(scenario.commit.leader.fixed, apply_rng), follower_apply
                )
                brokers[b] = leader
                ctx.produce_targets[b] = leader
        else:
            if design is Design.COORDINATOR:
                producer_routing = Routing.ANY_BROKER
                coordinator = SimCoordinator(
                    ctx,
                    cluster.coordinator_az,
                    open_store("coordinator"),
                    commit_server(COORDINATOR_ID, scenario.commit.coordinator),
                    follower_apply,
                )
                ctx.commit_targets[COORDINATOR_ID] = coordinator
            else:
                producer_routing = routing
            put = LatencySampler(scenario.object_store.put, stream("object-store"))
            for b in azs:
                sb = SimBroker(
                    ctx,
                    b,
                    scenario.buffer,
                    truth,
                    store=open_store(f"broker-{b}") if design is Design.PARTLOG else None,
                    commit_leader_of=(lambda tp: COORDINATOR_ID) if design is Design.COORDINATOR else None,
                    rng=stream(f"broker-{b}"),
                    put=put,
                    server=commit_server(b, scenario.commit.leader) if design is Design.PARTLOG else None,
                    follower_apply=follower_apply,
                )
                brokers[b] = sb
                ctx.produce_targets[b] = sb
                if design is Design.PARTLOG:
                    ctx.commit_targets[b] = sb

        groups: dict[str, list[ProducerGroup | RecordProducer]] = {}
        for i, spec in enumerate(scenario.producers):
            made: list[ProducerGroup | RecordProducer]
            if spec.records_per_s > 0:
                made = [
                    RecordProducer(
                        ctx, spec, producer_routing, truth, templates, partitions, stream(f"records-{i}-{k}")
                    )
                    for k in range(spec.count)
                ]
            else:
                made = [
                    ProducerGroup(
                        ctx,
                        spec,
                        producer_routing,
                        truth,
                        templates,
                        partitions,
                        send_rng=stream(f"producers-{i}"),
                        route_rng=stream(f"route-{i}"),
                        retry_rng=stream(f"retry-{i}"),
                    )
                ]
            groups.setdefault(spec.az, []).extend(made)
            for g in made:
                g.start()
        clients: dict[str, list[Viewer]] = {az: list(gs) for az, gs in groups.items()}
        stoppable: dict[str, list[Stoppable]] = {az: list(gs) for az, gs in groups.items()}
        controller = Controller(ctx, truth, brokers, clients, stoppable, coordinator, stream("controller"), servers)
        controller.schedule(scenario.events)

        loop.run_until(scenario.duration_s * 1000, progress)

        return summarize(
            scenario,
            design.value,
            producer_routing.value,
            ctx.recorder,
            azs,
            COORDINATOR_ID if coordinator is not None else None,
            controller.log,
            time.perf_counter() - wall_start,
            servers,
        )
