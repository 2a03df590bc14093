"""``partlog status``: the cluster's health at a glance (issue 32,
docs/design/status.md).  Reads the metadata once (the embedded controller
or etcd, as the other admin commands), connects to each alive broker's RPC
and Kafka ports, reads walmgr's registry or metrics when named, and prints
one table (:mod:`partlog.tools.cluster_status`) or its JSON.  The exit
status is the health: 0 healthy, 1 unhealthy, 2 metadata unreachable."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import logging
import sys
import time
from typing import TYPE_CHECKING, Any

from partlog.tools.cluster_status import (
    EXIT_UNREACHABLE,
    LIST_MAX_DEFAULT,
    MIN_INSYNC_REPLICAS_DEFAULT,
    PROBE_OK,
    PROBE_REFUSED,
    PROBE_TIMEOUT,
    PROBE_UNREACHABLE,
    ControllerStatus,
    kafka_address,
    render_table,
    summarize,
    to_json,
    unreachable_json,
)
from partlog.tools.cmd.common import add_metadata_target, admin_metadata, host_port, tls_contexts
from partlog.tools.cmd.flags import TIMEOUT_MS_MAX, int_in, positive_int, positive_int_at_most

if TYPE_CHECKING:
    from partlog.controller.cluster_meta import BrokerInfo
    from partlog.tools.cmd.common import Subparsers
    from partlog.tools.walmgr_status import WalmgrStatus

# A broker's port is asked at most this long by default: a status must come
# back in seconds even with several brokers down (they are asked at once).
PROBE_TIMEOUT_MS_DEFAULT = 1_000
# Connections being opened at once: a large cluster's probes must not run
# the process out of file descriptors (the default soft limit is 1,024).
PROBES_IN_FLIGHT_MAX = 64
# The metadata's answer: shorter than the topics tool's 30 s, since a status
# that hangs is no status.
METADATA_TIMEOUT_MS_DEFAULT = 5_000
# --walmgr sources: a registry and a metrics endpoint, or a few walmgrs.
WALMGR_SOURCES_MAX = 8
# Partitions listed per kind: the table stays readable, the JSON bounded.
LIST_MAX_MAX = 10_000

_DESCRIPTION = """\
Prints the cluster's health at a glance, as one table (or --json, the same
content with stable keys): the controller (kind, address, metadata version,
cluster id, whether it answered; on etcd the broker acting as controller),
each broker (AZ, address, alive or fenced, partitions led and followed,
whether its RPC and Kafka ports accept a connection within
--probe-timeout-ms), the partitions (in all, under-replicated: ISR smaller
than replicas, offline: no leader, under min ISR: ISR below
--min-insync-replicas), reassignments in progress, and walmgr's last cycle
(--walmgr; "unknown" without it).  -v lists the first --list-max partitions
of each kind.

Exit status: 0 healthy; 1 unhealthy (a fenced broker, a port that does not
answer, a partition offline, under-replicated or under min ISR, a --walmgr
that cannot be read or belongs to another cluster); 2 the metadata did not
answer within --timeout-ms (or a bad flag)."""


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "status",
        help="the cluster's health at a glance: brokers, partitions, reassignments, walmgr",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_metadata_target(
        p,
        timeout_ms=METADATA_TIMEOUT_MS_DEFAULT,
        timeout_help="exit 2 if the metadata does not answer within this",
    )
    p.add_argument(
        "--probe-timeout-ms",
        type=positive_int_at_most(TIMEOUT_MS_MAX),
        default=PROBE_TIMEOUT_MS_DEFAULT,
        help=f"how long a broker's port may take to accept a connection (default {PROBE_TIMEOUT_MS_DEFAULT})",
    )
    p.add_argument("--no-probe", action="store_true", help="do not connect to the brokers' ports")
    p.add_argument(
        "--walmgr",
        action="append",
        default=[],
        metavar="URL|PATH",
        help="walmgr's metrics endpoint (http://HOST:PORT/, its metrics_port) or its registry directory "
        f"(or a walmgr config file naming it); repeatable, at most {WALMGR_SOURCES_MAX}",
    )
    p.add_argument(
        "--min-insync-replicas",
        type=positive_int,
        default=MIN_INSYNC_REPLICAS_DEFAULT,
        help="the brokers' min.insync.replicas, which the metadata does not hold "
        f"(default {MIN_INSYNC_REPLICAS_DEFAULT}, Kafka's)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="list the partitions of each kind")
    p.add_argument(
        "--list-max",
        type=int_in(0, LIST_MAX_MAX),
        default=LIST_MAX_DEFAULT,
        help=f"partitions listed per kind, with -v and in --json (default {LIST_MAX_DEFAULT})",
    )
    p.add_argument("--json", action="store_true", help="print JSON (the same content, stable keys)")


def run(args: argparse.Namespace) -> int:
    from partlog.rpc.secret import read_secret_file

    if (args.controller is None) == (args.metadata is None):
        print("partlog status: give exactly one of --controller HOST:PORT and --metadata etcd://...", file=sys.stderr)
        return 2
    if len(args.walmgr) > WALMGR_SOURCES_MAX:
        print(f"partlog status: at most {WALMGR_SOURCES_MAX} --walmgr", file=sys.stderr)
        return 2
    host, port, etcd_target = "", 0, None
    try:
        if args.controller is not None:
            host, port = host_port(args.controller)
            where = f"{host}:{port}"
        else:
            from partlog.controller.etcd_layout import parse_etcd_url

            etcd_target = parse_etcd_url(args.metadata)
            where = etcd_target.url()
    except ValueError as e:
        print(f"partlog status: {'--controller' if args.controller else '--metadata'}: {e}", file=sys.stderr)
        return 2
    secret = read_secret_file(args.secret_file)
    tls = tls_contexts(args)
    # One-shot: the final error sums up the retries, which are not logged one by one.
    logging.getLogger("partlog.controller.client").setLevel(logging.ERROR)
    logging.getLogger("partlog.controller.etcd_meta").setLevel(logging.ERROR)
    kind = "embedded" if args.controller is not None else "etcd"

    async def status() -> int:
        from partlog.controller.client import ControllerUnavailableError
        from partlog.controller.cluster_meta import MetadataError

        client = admin_metadata(args, etcd_target, host, port, secret, tls)
        try:
            try:
                await client.start(timeout_ms=args.timeout_ms)
            except (MetadataError, ControllerUnavailableError) as e:
                return _unreachable(args, ControllerStatus(kind, where, False, error=" ".join(str(e).split())))
            controller, registered = _view(client, kind, where)
            topics = client.topics()
        finally:
            await client.stop()
        alive = [b for b, ok in registered if ok]
        probes, walmgr = await asyncio.gather(_probe_all(alive, args), _walmgr(args.walmgr, args.probe_timeout_ms))
        s = summarize(
            controller,
            registered,
            topics,
            probes,
            walmgr,
            min_insync_replicas=args.min_insync_replicas,
            list_max=args.list_max,
            now_ms=int(time.time() * 1000),
        )
        print(json.dumps(to_json(s), sort_keys=True) if args.json else render_table(s, verbose=args.verbose))
        return s.exit_status

    return asyncio.run(status())


def _unreachable(args: argparse.Namespace, controller: ControllerStatus) -> int:
    print(f"partlog status: {controller.error}", file=sys.stderr)
    if args.json:
        print(json.dumps(unreachable_json(controller), sort_keys=True))
    return EXIT_UNREACHABLE


def _view(client: Any, kind: str, where: str) -> tuple[ControllerStatus, list[tuple[BrokerInfo, bool]]]:
    """The controller's status and every broker the view knows, with
    whether it is alive.  The embedded controller's snapshot holds the alive
    brokers only; etcd's view also holds registered brokers the acting
    controller has not accepted (fenced until it does), and names the
    acting controller by its election key's lease."""
    cluster_id = None if client.cluster_id is None else str(client.cluster_id)
    if kind == "embedded":
        return ControllerStatus(kind, where, True, client.version, cluster_id), [(b, True) for b in client.brokers()]
    view = client.view
    registered = [(rb.info, view.accepted(bid)) for bid, rb in sorted(view.brokers.items())]
    acting = None
    key = view.leader_candidate()
    if key is not None:
        with contextlib.suppress(ValueError):
            lease = int(key[len(view.keys.election) :], 16)
            acting = next((bid for bid, rb in view.brokers.items() if rb.lease == lease), None)
    return ControllerStatus(kind, where, True, view.revision, cluster_id, acting), registered


async def _probe(address: tuple[str, int] | None, timeout_ms: int) -> str | None:
    """Whether ``address`` accepts a TCP connection within ``timeout_ms``."""
    if address is None or not address[1]:
        return None
    try:
        async with asyncio.timeout(timeout_ms / 1000):
            _, writer = await asyncio.open_connection(*address)
    except TimeoutError:
        return PROBE_TIMEOUT
    except OSError as e:
        return PROBE_REFUSED if e.errno == errno.ECONNREFUSED else PROBE_UNREACHABLE
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return PROBE_OK


async def _probe_all(alive: list[BrokerInfo], args: argparse.Namespace) -> dict[int, tuple[str | None, str | None]]:
    if args.no_probe:
        return {}
    t = args.probe_timeout_ms
    in_flight = asyncio.Semaphore(PROBES_IN_FLIGHT_MAX // 2)  # two connections per broker

    async def both(b: BrokerInfo) -> tuple[str | None, str | None]:
        async with in_flight:
            rpc, kafka = await asyncio.gather(_probe((b.host, b.port), t), _probe(kafka_address(b), t))
        return rpc, kafka

    outcomes = await asyncio.gather(*(both(b) for b in alive))
    return {b.broker_id: o for b, o in zip(alive, outcomes, strict=True)}


async def _walmgr(sources: list[str], timeout_ms: int) -> list[WalmgrStatus]:
    from partlog.tools.walmgr_status import fetch_metrics, is_metrics_url, read_registry

    def read(where: str) -> WalmgrStatus:
        if is_metrics_url(where):
            return fetch_metrics(where, timeout_ms / 1000, int(time.time() * 1000))
        return read_registry(where)

    return list(await asyncio.gather(*(asyncio.to_thread(read, w) for w in sources)))
