"""``partlog cluster``: a local multi-AZ cluster that produces, consumes
back and verifies (``partlog.tools.cluster_run``), or serves Kafka clients."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from partlog.tools.cmd.acls import add_authorizer_flags, authorizer_config
from partlog.tools.cmd.common import progress_printer
from partlog.tools.cmd.flags import non_negative_float, non_negative_int, positive_float, positive_int
from partlog.tools.cmd.kafka_listeners import add_security_args
from partlog.util import gc_pauses

if TYPE_CHECKING:
    from partlog.kafka_front.listeners import ListenerSecurity
    from partlog.tools.cmd.common import Subparsers


def add_parser(sub: Subparsers) -> None:
    cl = sub.add_parser(
        "cluster",
        help="run a local multi-AZ cluster, produce, consume back and verify",
        description="Starts an embedded controller (or etcd: --metadata) and brokers on 127.0.0.1 "
        "(default 3 AZs x 2), creates a topic "
        "with --replication-factor replicas per partition (one per AZ), runs producers in every AZ (idempotent, "
        "acks=all, routed to their AZ's representative) for --duration seconds, optionally killing and restarting "
        "random brokers, consumes everything back and verifies every acknowledged record exactly once and in order. "
        "Exits 1 if any record is lost, duplicated or reordered.",
    )
    cl.add_argument("--azs", type=positive_int, default=3, help="availability zones (default 3)")
    cl.add_argument("--brokers-per-az", type=positive_int, default=2, help="brokers per AZ (default 2)")
    cl.add_argument("--partitions", type=positive_int, default=12, help="partitions of the test topic (default 12)")
    cl.add_argument(
        "--num-partitions",
        type=positive_int,
        default=1,
        help="partitions of a topic the brokers auto-create (Kafka's num.partitions; default 1)",
    )
    cl.add_argument(
        "--broker-session-timeout-ms",
        type=positive_int,
        default=None,
        # The default is cluster_options.DEMO_BROKER_SESSION_TIMEOUT_MS (a
        # unit test keeps this text true); that module loads slowly.
        help="fence a broker that has not heartbeated (or whose etcd lease lapsed) for this many ms "
        "(Kafka's broker.session.timeout.ms; default 3,000)",
    )
    cl.add_argument(
        "--no-auto-create",
        action="store_true",
        help="answer Metadata for an unknown topic with UNKNOWN_TOPIC_OR_PARTITION instead of creating it "
        "(Kafka's auto.create.topics.enable=false)",
    )
    cl.add_argument(
        "--replication-factor",
        type=positive_int,
        default=3,
        help="replicas per partition, placed one per AZ while it is <= --azs (default 3; capped at the brokers)",
    )
    cl.add_argument("--producers-per-az", type=positive_int, default=2, help="producers per AZ (default 2)")
    cl.add_argument("--rate", type=positive_int, default=500, help="records/s per producer (default 500)")
    cl.add_argument("--message-bytes", type=positive_int, default=100, help="record value size (default 100)")
    cl.add_argument("--duration", type=positive_float, default=10.0, help="seconds of producing (default 10)")
    cl.add_argument("--data-dir", default=None, help="brokers' stores and the local object store (default: temp)")
    cl.add_argument("--store", default=None, help="object store URL instead of <data-dir>/objects: s3://bucket")
    cl.add_argument("--endpoint", default=None, help="S3 endpoint URL for --store s3://...")
    cl.add_argument(
        "--commit-interval-ms", type=positive_int, default=250, help="WAL buffer rotation interval (default 250)"
    )
    cl.add_argument(
        "--no-sync",
        action="store_true",
        help="do not fsync the metadata stores (a power loss may undo acknowledged commits; see design.md)",
    )
    cl.add_argument(
        "--kill-broker-every",
        type=non_negative_float,
        default=0.0,
        metavar="SECONDS",
        help="stop a random broker abruptly every SECONDS, restart it --restart-after seconds later (default: never)",
    )
    cl.add_argument(
        "--orphan-rate",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="drop the commits of this share of WAL files after upload, making orphans for walmgr (default 0)",
    )
    cl.add_argument("--no-walmgr", action="store_true", help="do not run a walmgr beside the brokers")
    cl.add_argument(
        "--tiering-segment-ms",
        type=non_negative_int,
        default=0,
        metavar="MS",
        help="tiered segments: set remote.storage.enable on the topic with segment.ms MS, so leaders move committed "
        "batches out of the WAL files; the report adds the object census (live WAL objects, the oldest one's age, "
        "segments) and its verdicts (default 0: off)",
    )
    cl.add_argument(
        "--tiering-segment-bytes",
        type=positive_int,
        default=1 << 20,
        metavar="BYTES",
        help="segment.bytes with --tiering-segment-ms (default 1048576, Kafka's least)",
    )
    cl.add_argument(
        "--metadata",
        default="",
        metavar="etcd|etcd[+tls]://HOST:PORT[,...][/PREFIX][?QUERY]",
        help="cluster metadata on etcd instead of the embedded controller: 'etcd' starts a 3-member etcd on "
        "127.0.0.1 (Debian's etcd-server must be installed), a URL uses that etcd under PREFIX/cluster-<id>",
    )
    cl.add_argument(
        "--etcd-member-faults",
        action="store_true",
        help="with --metadata etcd: kill an etcd follower at 25%% of the run (back at 40%%), then the etcd leader "
        "at 55%% (back at 75%%); the report gives the produce pause each caused",
    )
    cl.add_argument(
        "--etcd-outage-s",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="with --metadata etcd: stop every etcd member for this long from 30%% of the run (default 0: none)",
    )
    cl.add_argument(
        "--serve",
        action="store_true",
        help="run no load of its own: serve Kafka clients at the printed bootstrap servers until SIGTERM or Ctrl-C",
    )
    cl.add_argument(
        "--restart-after",
        type=non_negative_float,
        default=1.0,
        metavar="SECONDS",
        help="restart delay of a killed broker (default 1)",
    )
    add_authorizer_flags(
        cl,
        "this cluster's RPC has neither TLS nor a secret, so its brokers, walmgr and load clients are all "
        "User:ANONYMOUS there, and its brokers allow User:ANONYMOUS every RPC method by themselves (never on the "
        "Kafka listeners, whose anonymous clients stay under the ACLs); a Kafka admin client of --super-users "
        "manages the ACLs (CreateAcls)",
    )
    g = cl.add_argument_group("Kafka listeners (each broker gets one per protocol, on a free port)")
    g.add_argument(
        "--kafka-protocols",
        default="PLAINTEXT",
        metavar="PROTOCOL[,...]",
        help="the security protocols of every broker's Kafka listeners: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL "
        "(default PLAINTEXT); the first one's addresses are printed as 'bootstrap:', each one's as "
        "'bootstrap PROTOCOL:'. Make SASL users with a Kafka admin client's AlterUserScramCredentials (on a "
        "PLAINTEXT listener, say PLAINTEXT,SASL_PLAINTEXT), kept by the controller or etcd",
    )
    add_security_args(g)
    cl.add_argument("--seed", type=int, default=0, help="seed for partition choice (default 0)")
    cl.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from partlog.tools import cluster_run
    from partlog.tools.cluster_options import ClusterOptions
    from partlog.tools.cluster_report import print_report

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    store_url = None
    if args.store:
        store_url = args.store
        if args.endpoint:
            sep = "&" if "?" in store_url else "?"
            store_url = f"{store_url}{sep}endpoint={args.endpoint}"
    session = (
        {} if args.broker_session_timeout_ms is None else {"broker_session_timeout_ms": args.broker_session_timeout_ms}
    )
    try:
        protocols, security = _kafka_listeners(args)
        opts = ClusterOptions(
            azs=args.azs,
            brokers_per_az=args.brokers_per_az,
            partitions=args.partitions,
            producers_per_az=args.producers_per_az,
            rate_per_producer=args.rate,
            message_bytes=args.message_bytes,
            duration_s=args.duration,
            data_dir=args.data_dir,
            store_url=store_url,
            commit_interval_ms=args.commit_interval_ms,
            sync=not args.no_sync,
            seed=args.seed,
            replication_factor=args.replication_factor,
            kill_broker_every_s=args.kill_broker_every,
            restart_after_s=args.restart_after,
            walmgr=not args.no_walmgr,
            orphan_rate=args.orphan_rate,
            metadata=args.metadata,
            etcd_member_faults=args.etcd_member_faults,
            etcd_outage_s=args.etcd_outage_s,
            authorizer=authorizer_config(args),
            tiering_segment_ms=args.tiering_segment_ms,
            tiering_segment_bytes=args.tiering_segment_bytes,
            num_partitions=args.num_partitions,
            auto_create_topics=not args.no_auto_create,
            kafka_protocol=protocols,
            kafka_security=security,
            **session,
        )
    except ValueError as e:
        print(f"partlog cluster: {e}", file=sys.stderr)
        return 2

    progress = progress_printer(args)
    from partlog.wal.objectstore import ObjectStoreError

    def ready(bootstrap: str, rpc: str, listeners: dict[str, str]) -> None:
        # On stdout for scripts (stderr with --json, whose stdout is one
        # JSON object): the Kafka listeners accept from now on.  The RPC
        # addresses are for partlog's own client.
        out = sys.stderr if args.json else sys.stdout
        print(f"bootstrap: {bootstrap}", file=out, flush=True)
        for protocol, servers in listeners.items():
            print(f"bootstrap {protocol}: {servers}", file=out, flush=True)
        print(f"rpc: {rpc}", file=out, flush=True)

    async def main() -> dict[str, Any]:
        stop: asyncio.Event | None = None
        if args.serve:
            import signal

            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
        return await cluster_run.run(opts, progress, ready=ready, serve_until=stop)

    # Long-running: keep full garbage collections off the event loop's back.
    gc_pauses.install(time.monotonic)  # the CLI reads the machine clock; never run in the simulation
    try:
        result = asyncio.run(main())
    except (ObjectStoreError, ValueError, RuntimeError, OSError) as e:
        print(f"partlog cluster: {e}", file=sys.stderr)
        return 2
    if args.serve:
        print("partlog cluster: stopped", file=sys.stderr)
        return 0
    if args.json:
        print(json.dumps(result))
    else:
        print_report(result)
    ok = result["records_lost"] == 0 and result["records_duplicated"] == 0 and result["order_violations"] == 0
    return 0 if ok else 1


def _kafka_listeners(args: argparse.Namespace) -> tuple[str, ListenerSecurity]:
    """--kafka-protocols, checked (ValueError: one line), and the listeners'
    security from its flags."""
    from partlog.kafka_front.listeners import ListenerConfigError, ListenerSpec, SecurityProtocol
    from partlog.tools.cmd.kafka_listeners import security_config

    names = [p.strip().upper() for p in args.kafka_protocols.split(",")]
    known = ", ".join(p.value for p in SecurityProtocol)
    specs: list[ListenerSpec] = []
    for name in names:
        try:
            protocol = SecurityProtocol(name)
        except ValueError:
            raise ValueError(f"--kafka-protocols: {name!r} is not a security protocol (one of {known})") from None
        if any(s.protocol is protocol for s in specs):
            raise ValueError(f"--kafka-protocols: {name} is named twice")
        specs.append(ListenerSpec(protocol, "127.0.0.1", 0))
    try:
        security = security_config(args)
        security.check(tuple(specs))
    except ListenerConfigError as e:
        raise ValueError(str(e)) from None
    return ",".join(names), security
