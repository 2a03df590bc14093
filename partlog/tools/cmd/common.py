"""Flags and helpers that several subcommands share: mutual TLS, the RPC
server's limits, ``--cluster-id``, ``HOST:PORT``, progress lines and the
console clients' (``produce``, ``consume``) error and client id."""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from partlog.rpc import server_limits as rpc
from partlog.tools.cmd.flags import TIMEOUT_MS_MAX, positive_int, positive_int_at_most

if TYPE_CHECKING:
    from partlog.rpc.server_limits import ServerLimits
    from partlog.rpc.tls import TlsContexts
    from partlog.util.cli_errors import OneLineArgumentParser

    Subparsers = argparse._SubParsersAction[OneLineArgumentParser]


class KafkaCliError(Exception):
    """A produce or consume that failed: one line, exit status 1."""

    exit_status = 1


def kafka_client_id(az: str | None) -> str:
    # KIP-1163: a client names its AZ in its client id, and is routed to
    # brokers in that AZ.
    return f"partlog-cli,diskless_az={az}" if az else "partlog-cli"


def progress_printer(args: argparse.Namespace) -> Callable[[str], None]:
    """A benchmark's or a cluster's progress: ``... msg`` on stderr, none with --json."""

    def progress(msg: str) -> None:
        if not args.json:
            print(f"... {msg}", file=sys.stderr, flush=True)

    return progress


def cluster_id_arg(text: str | None) -> uuid.UUID | None:
    from partlog.controller.cluster_meta import parse_cluster_id

    return None if text is None else parse_cluster_id(text, "--cluster-id")


def tls_contexts(args: argparse.Namespace) -> TlsContexts | None:
    from partlog.rpc.tls import mutual_tls

    return mutual_tls(args.tls_ca or "", args.tls_cert or "", args.tls_key or "")


def admin_metadata(
    args: argparse.Namespace, etcd_target: Any, host: str, port: int, secret: bytes | None, tls: TlsContexts | None
) -> Any:
    """The cluster metadata a one-shot admin command talks to: its etcd
    (``--metadata``, ``etcd_target`` parsed from it) or its controller
    (``--controller HOST:PORT``); not started."""
    if args.metadata is not None:
        from partlog.controller.etcd_meta import EtcdMetadata

        return EtcdMetadata(etcd_target, cluster_id=cluster_id_arg(args.cluster_id))
    from partlog.controller.client import ControllerMetadata

    return ControllerMetadata(
        host, port, cluster_id=cluster_id_arg(args.cluster_id), secret=secret, ssl=tls.client if tls else None
    )


def add_metadata_target(p: argparse.ArgumentParser, *, timeout_ms: int = 30_000, timeout_help: str = "") -> None:
    """The flags naming the cluster's metadata, as every one-shot admin
    command takes them (``admin_metadata`` reads them): the controller or
    etcd, the controller's secret and TLS, the cluster id, the timeout."""
    p.add_argument("--controller", default=None, metavar="HOST:PORT", help="the controller's address")
    p.add_argument(
        "--metadata",
        default=None,
        metavar="etcd[+tls]://HOST:PORT[,...][/PREFIX][?QUERY]",
        help="or the cluster's etcd (QUERY: see partlog broker --help)",
    )
    p.add_argument("--secret-file", default=None, help="file holding the shared secret of the controller's RPCs")
    p.add_argument("--cluster-id", default=None, metavar="UUID", help="refuse a controller of another cluster")
    add_tls(p)
    p.add_argument(
        "--timeout-ms",
        type=positive_int_at_most(TIMEOUT_MS_MAX),
        default=timeout_ms,
        help=f"{timeout_help or 'give up if the controller does not answer'} (default {timeout_ms})",
    )


def add_tls(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tls-ca", default=None, metavar="FILE", help="mutual TLS: the cluster's CA certificate (PEM)")
    p.add_argument("--tls-cert", default=None, metavar="FILE", help="mutual TLS: this process's certificate (PEM)")
    p.add_argument("--tls-key", default=None, metavar="FILE", help="mutual TLS: this process's private key (PEM)")


def add_rpc_limits(p: argparse.ArgumentParser) -> None:
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
        g.add_argument(flag, type=positive_int, default=default, help=f"{what} (default {default})")


def rpc_limits(args: argparse.Namespace) -> ServerLimits:
    # Each limit's flag is its field's name (--frame-deadline-ms: frame_deadline_ms).
    return rpc.ServerLimits(**{name: getattr(args, name) for name in rpc.ServerLimits.__slots__ if hasattr(args, name)})


def host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)
