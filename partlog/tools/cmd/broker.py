"""``partlog broker``: one broker, with static metadata (a cluster file),
the embedded controller or etcd, until SIGTERM."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from partlog.kafka_front.listeners import registration_text
from partlog.limits import BROKER_ID_MAX, PORT_MAX
from partlog.produce.rotation import ROTATION_GRACE_MS_DEFAULT
from partlog.replication.config import REPLICA_ANSWER_AGE_MAX_MS_DEFAULT
from partlog.rpc.secret import read_secret_file
from partlog.store.release_grace import RELEASE_GRACE_MS_DEFAULT
from partlog.store.shutdown import read_boot_id
from partlog.tools.cmd.acls import add_authorizer_flags, authorizer_config
from partlog.tools.cmd.common import add_rpc_limits, add_tls, cluster_id_arg, host_port, rpc_limits, tls_contexts
from partlog.tools.cmd.flags import int_in, non_negative_int, positive_int
from partlog.tools.cmd.kafka_listeners import add_listener_args, listener_config
from partlog.txn.coordinator import TRANSACTION_MAX_TIMEOUT_MS_DEFAULT, TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT
from partlog.txn.log import TXN_STATE_PARTITIONS_DEFAULT
from partlog.util import gc_pauses

if TYPE_CHECKING:
    from partlog.tools.cmd.common import Subparsers


def add_parser(sub: Subparsers) -> None:
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
        metavar="etcd[+tls]://HOST:PORT[,...][/PREFIX][?QUERY]",
        help="take metadata from etcd instead (the first broker creates the cluster under PREFIX, default /partlog); "
        "QUERY: ca=, cert=, key=, server_name= (etcd+tls) and user= with password_file= or password_env= "
        "(see docs/design/etcd.md)",
    )
    br.add_argument("--az", default=None, help="this broker's AZ (with --controller or --metadata)")
    br.add_argument("--host", default="127.0.0.1", help="address to listen on (with --controller; default 127.0.0.1)")
    br.add_argument("--port", type=int_in(0, PORT_MAX), default=0, help="port to listen on (with --controller)")
    br.add_argument(
        "--kafka-port",
        type=int_in(0, PORT_MAX),
        default=None,
        help="Kafka protocol listener port, one PLAINTEXT listener on --host (with --controller; with --cluster "
        "the file's kafka_port); none by default. For TLS and SASL give --listeners instead",
    )
    add_listener_args(br)
    kg = br.add_argument_group("Kafka listener limits")
    kg.add_argument(
        "--message-max-bytes",
        type=positive_int,
        default=1_048_588,
        help="largest record batch (default 1048588, as Kafka)",
    )
    kg.add_argument(
        "--kafka-request-bytes-max",
        type=positive_int,
        default=100 * 1024 * 1024,
        help="largest request, Kafka's socket.request.max.bytes (default 104857600)",
    )
    kg.add_argument(
        "--kafka-connections-per-ip-max",
        type=positive_int,
        default=1_000,
        help="connections from one address (default 1000)",
    )
    kg.add_argument(
        "--kafka-connections-max-idle-ms",
        type=positive_int,
        default=600_000,
        help="close a connection idle this long (default 600000, as Kafka)",
    )
    kg.add_argument(
        "--rack-aware-replica-selector",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="send a consumer that names its AZ (client.rack) to the in-sync replica there with "
        "preferred_read_replica (KIP-392; Kafka's replica.selector.class=RackAwareReplicaSelector), "
        "as KIP-1163 asks of diskless topics (default: on; --no-... serves or forwards every fetch here)",
    )
    tg = br.add_argument_group("transactions (Kafka's transaction coordinator configs)")
    tg.add_argument(
        "--transaction-max-timeout-ms",
        type=positive_int,
        default=TRANSACTION_MAX_TIMEOUT_MS_DEFAULT,
        help="largest transaction.timeout.ms a producer may ask (transaction.max.timeout.ms; "
        f"default {TRANSACTION_MAX_TIMEOUT_MS_DEFAULT})",
    )
    tg.add_argument(
        "--transactional-id-expiration-ms",
        type=positive_int,
        default=TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT,
        help="forget a transactional id idle this long (transactional.id.expiration.ms; "
        f"default {TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT}, 7 days)",
    )
    tg.add_argument(
        "--transaction-state-partitions",
        type=positive_int,
        default=TXN_STATE_PARTITIONS_DEFAULT,
        help="partitions of __transaction_state when this broker creates it (transaction.state.log.num.partitions; "
        f"default {TXN_STATE_PARTITIONS_DEFAULT}; an existing topic keeps its own)",
    )
    add_authorizer_flags(
        br,
        "the other brokers, walmgr and partlog's clients connect as the principal of their --tls-cert-file "
        "(its subject mapped by --kafka-ssl-principal-mapping-rules), or as User:ANONYMOUS without TLS (the "
        "secret alone names nobody): make it a --super-users or grant it CLUSTER_ACTION with partlog acls",
    )
    br.add_argument("--id", type=int_in(0, BROKER_ID_MAX), required=True, help="this broker's id")
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
    add_tls(br)
    add_rpc_limits(br)
    br.add_argument(
        "--commit-interval-ms", type=positive_int, default=250, help="WAL buffer rotation interval (default 250)"
    )
    br.add_argument(
        "--rotation-grace-ms",
        type=non_negative_int,
        default=ROTATION_GRACE_MS_DEFAULT,
        metavar="MS",
        help="with no upload or commit in flight, close the open WAL file once it is this old (a client's "
        f"burst shares it), if --wal-puts-per-s-max allows; >= --commit-interval-ms: the interval-only rule "
        f"(default {ROTATION_GRACE_MS_DEFAULT})",
    )
    br.add_argument(
        "--wal-puts-per-s-max",
        type=positive_int,
        default=None,
        metavar="N",
        help="PUT budget: WAL files closed early (idle broker) per second at most; the commit interval and "
        "the size limit close files regardless, and count against it (default: one per commit interval, "
        "1000 / --commit-interval-ms rounded up, what the interval-only rule could spend)",
    )
    br.add_argument(
        "--metrics-port", type=int_in(0, PORT_MAX), default=0, help="Prometheus metrics on this port (0: off)"
    )
    br.add_argument(
        "--min-insync-replicas",
        type=positive_int,
        default=1,
        metavar="N",
        help="Kafka's min.insync.replicas: acks=all needs this many in-sync replicas, capped at the "
        "replication factor (default 1, as Kafka's)",
    )
    br.add_argument(
        "--release-grace-ms",
        type=non_negative_int,
        default=RELEASE_GRACE_MS_DEFAULT,
        metavar="MS",
        help="an object this broker stops referencing still counts as referenced to walmgr this long, "
        "and a replica applies no fetch answer older than half of it (min(20000, MS/2)); walmgr's "
        f"verdict_window_ms must stay under MS/2 (default {RELEASE_GRACE_MS_DEFAULT}; 0 turns it off: "
        "walmgr may then delete an object a follower is about to reference; docs/design/release-grace.md)",
    )
    br.add_argument(
        "--no-sync",
        action="store_true",
        help="do not fsync the metadata store: a power loss may undo the last commits, acknowledged ones "
        "included, so rely on replicas (min.insync.replicas >= 2; design.md, Durability)",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import os
    import signal
    from dataclasses import replace

    from partlog.broker.server import BrokerConfig
    from partlog.controller.cluster_meta import StaticMetadata, check_same_cluster
    from partlog.kafka_front.apis import FrontConfig
    from partlog.kafka_front.server import ListenerLimits
    from partlog.node import BrokerNode, NodeConfig
    from partlog.produce.pipeline import ProduceConfig
    from partlog.replication.config import ReplicationConfig
    from partlog.wal.store_url import open_store

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from partlog.controller.cluster_meta import BrokerInfo, MetadataSource

    if sum(x is not None for x in (args.cluster, args.controller, args.metadata)) != 1:
        print(
            "partlog broker: give exactly one of --cluster FILE, --controller HOST:PORT and --metadata etcd://...",
            file=sys.stderr,
        )
        return 2
    meta: MetadataSource | None = None
    specs, security = listener_config(args)  # ListenerConfigError: one line, exit 2
    if specs and args.kafka_port is not None:
        print("partlog broker: give --kafka-port or --listeners, not both", file=sys.stderr)
        return 2
    if specs:
        args.kafka_port = specs[0].port
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
        if len(specs) > 1 or any(s.listener_name or s.advertised_host for s in specs):
            print(f"partlog broker: {args.cluster}: one listener, named by its protocol and not advertised "
                  "elsewhere (the file names each broker's address)", file=sys.stderr)  # fmt: skip
            return 2
        me, meta = found, static
    else:
        flag = "--controller" if args.controller is not None else "--metadata"
        if args.az is None or not args.port:
            print(f"partlog broker: {flag} needs --az and --port", file=sys.stderr)
            return 2
        if args.kafka_port == 0 or any(s.port == 0 for s in specs):
            print(f"partlog broker: {flag} needs fixed Kafka listener ports (they are registered)", file=sys.stderr)
            return 2
        names = registration_text(specs) if specs else ""
        me = BrokerInfo(args.id, args.az, args.host, args.port, args.kafka_port or 0, names)
        try:
            if args.controller is not None:
                controller = host_port(args.controller)
            else:
                from partlog.controller.etcd_layout import parse_etcd_url

                etcd_target = parse_etcd_url(args.metadata)
        except ValueError as e:
            print(f"partlog broker: {flag}: {e}", file=sys.stderr)
            return 2
    secret = read_secret_file(args.secret_file)
    tls = tls_contexts(args)
    from partlog.wal.objectstore import ObjectStoreError

    try:
        store = open_store(args.store or "file://" + os.path.abspath(os.path.join(args.data_dir, "objects")))
        store.list_page("", max_keys=1)  # fail fast on a wrong store
    except (ObjectStoreError, ValueError) as e:
        print(f"partlog broker: {e}", file=sys.stderr)
        return 2
    try:
        replication = ReplicationConfig(
            min_insync_replicas=args.min_insync_replicas,
            release_grace_ms=args.release_grace_ms,
            replica_answer_age_max_ms=min(REPLICA_ANSWER_AGE_MAX_MS_DEFAULT, args.release_grace_ms // 2)
            or REPLICA_ANSWER_AGE_MAX_MS_DEFAULT,
        )
    except ValueError as e:
        print(f"partlog broker: --release-grace-ms {args.release_grace_ms}: {e}", file=sys.stderr)
        return 2
    config = BrokerConfig(
        args.id,
        me.az,
        os.path.join(args.data_dir, "brokers", str(args.id), "meta"),
        host=me.host,
        port=me.port,
        produce=ProduceConfig(
            commit_interval_ms=args.commit_interval_ms,
            rotation_grace_ms=args.rotation_grace_ms,
            wal_puts_per_s_max=args.wal_puts_per_s_max,
        ),
        sync=not args.no_sync,
        boot_id=read_boot_id(),
        replication=replication,
        secret=secret,
        server_ssl=tls.server if tls is not None else None,
        client_ssl=tls.client if tls is not None else None,
        metrics_port=args.metrics_port,
        walmgr_address=args.walmgr or "",
        rpc_limits=rpc_limits(args),
    )
    node_config = NodeConfig(
        config,
        kafka_port=me.kafka_port or None,
        kafka_listeners=specs,
        kafka_security=security,
        kafka=FrontConfig(
            message_max_bytes=args.message_max_bytes,
            transaction_max_timeout_ms=args.transaction_max_timeout_ms,
            transactional_id_expiration_ms=args.transactional_id_expiration_ms,
            transaction_state_log_num_partitions=args.transaction_state_partitions,
            authorizer=authorizer_config(args),
            rack_aware_replica_selector=args.rack_aware_replica_selector,
        ),
        kafka_limits=ListenerLimits(
            request_bytes_max=args.kafka_request_bytes_max,
            connections_per_ip_max=args.kafka_connections_per_ip_max,
            connections_max_idle_ms=args.kafka_connections_max_idle_ms,
        ),
    )
    expected_cluster = cluster_id_arg(args.cluster_id)
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
        config = node_config
        if controller_source is not None:
            # SCRAM users live in the controller or etcd (partlog users).
            from partlog.controller.etcd_scram import EtcdScramCredentials
            from partlog.controller.scram_client import ControllerScramCredentials

            creds: Any = (
                EtcdScramCredentials(controller_source.conn, controller_source.keys)
                if args.metadata is not None
                else ControllerScramCredentials(controller_source)
            )
            config = replace(config, kafka_security=replace(security, credentials=creds))
        broker = BrokerNode(config, source, store)
        if controller_source is not None:
            # KIP-966: reported with the registration (docs/design/elr.md).
            reporter = controller_source.session if args.metadata is not None else controller_source
            reporter.unclean_shutdown = broker.broker.store.unclean_shutdown
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
            if broker.kafka is not None and len(broker.kafka.specs) > 1:
                kafka = ", Kafka listeners " + ",".join(f"{n}:{p}" for n, p in broker.kafka.ports.items())
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

    # Long-running: keep full garbage collections off the event loop's back.
    gc_pauses.install(time.monotonic)  # the CLI reads the machine clock; never run in the simulation
    asyncio.run(serve())
    return 0
