"""``partlog acls add|remove|list``: the cluster's ACLs, through the embedded
controller (``--controller``) or in the cluster's etcd (``--metadata
etcd://...``, the URL forms of :mod:`partlog.controller.etcd_url`).  Kafka
clients use CreateAcls, DescribeAcls and DeleteAcls on any broker with
``--authorizer``; docs/security.md.  Also the authorizer flags of ``partlog
broker`` and ``partlog cluster`` (:func:`add_authorizer_flags`,
:func:`authorizer_config`)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from partlog.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermission,
    AuthorizerConfig,
    PatternType,
    ResourceType,
)
from partlog.rpc.secret import read_secret_file
from partlog.tools.cmd.common import add_tls, admin_metadata, host_port, tls_contexts
from partlog.tools.cmd.flags import TIMEOUT_MS_MAX, positive_int_at_most

if TYPE_CHECKING:
    from partlog.tools.cmd.common import Subparsers

__all__ = ["AclFlagError", "add_authorizer_flags", "add_parser", "authorizer_config", "run"]

_TYPES = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP, "cluster": ResourceType.CLUSTER,
          "transactional-id": ResourceType.TRANSACTIONAL_ID}  # fmt: skip
_OPS = {o.name.lower().replace("_", "-"): o for o in AclOperation if o not in (AclOperation.UNKNOWN, AclOperation.ANY)}


class AclFlagError(ValueError):
    """Flags that cannot work as given: one line, exit status 2."""

    exit_status = 2


def add_authorizer_flags(parser: argparse.ArgumentParser, rpc: str) -> None:
    """--authorizer, --super-users and --allow-everyone-if-no-acl-found;
    ``rpc`` ends --authorizer's help: whom the broker RPC's CLUSTER_ACTION
    check (partlog.broker.rpc_authz) concerns and what they need."""
    ag = parser.add_argument_group("authorization (Kafka's ACLs; docs/security.md)")
    ag.add_argument(
        "--authorizer",
        action="store_true",
        help="check every Kafka request against the cluster's ACLs (off by default: everything is allowed); "
        "every broker RPC method then needs CLUSTER_ACTION on the cluster, as Kafka's inter-broker requests: " + rpc,
    )
    ag.add_argument(
        "--super-users",
        default="",
        metavar="PRINCIPALS",
        help="principals allowed everything, ';'-separated as Kafka's super.users (e.g. 'User:admin;User:ops')",
    )
    ag.add_argument(
        "--allow-everyone-if-no-acl-found",
        action="store_true",
        help="allow a request on a resource no ACL names (allow.everyone.if.no.acl.found; default false)",
    )


def authorizer_config(args: argparse.Namespace) -> AuthorizerConfig | None:
    """The broker's authorizer from --authorizer, --super-users and
    --allow-everyone-if-no-acl-found (None: no authorization)."""
    if not args.authorizer:
        if args.super_users or args.allow_everyone_if_no_acl_found:
            raise AclFlagError("--super-users and --allow-everyone-if-no-acl-found need --authorizer")
        return None
    supers = frozenset(p.strip() for p in args.super_users.split(";") if p.strip())
    for p in supers:
        kind, _, name = p.partition(":")
        if not kind or not name:
            raise AclFlagError(f"--super-users: {p!r} is not a principal of the form Type:name")
    return AuthorizerConfig(super_users=supers, allow_everyone_if_no_acl_found=args.allow_everyone_if_no_acl_found)


def add_parser(sub: Subparsers) -> None:
    ac = sub.add_parser("acls", help="manage the cluster's ACLs (through the controller, or in etcd)")
    ac_sub = ac.add_subparsers(dest="acls", required=True)
    for name, text in (
        ("add", "add one ACL (Kafka's kafka-acls --add)"),
        ("remove", "remove the ACLs the flags match (omitted flags match any)"),
        ("list", "list the ACLs the flags match (omitted flags match any)"),
    ):
        p = ac_sub.add_parser(name, help=text, description=text)
        need = name == "add"
        p.add_argument("--controller", default=None, metavar="HOST:PORT", help="the controller's address")
        p.add_argument(
            "--metadata",
            default=None,
            metavar="etcd://HOST:PORT[,...][/PREFIX]",
            help="or the cluster's etcd, in the URL forms of the broker's --metadata (etcd+tls://...?ca=..., "
            "?user=...&password_file=...); --secret-file and --tls-* are the controller's",
        )
        p.add_argument("--resource-type", choices=sorted(_TYPES), required=need, help="the resource's type")
        p.add_argument("--name", default=None, help="the resource's name ('*': every one; cluster: kafka-cluster)")
        p.add_argument("--prefixed", action="store_true", help="the name is a prefix (PREFIXED pattern)")
        p.add_argument("--principal", required=need, default=None, help="Type:name, e.g. User:alice (User:* for all)")
        p.add_argument("--host", default="*" if need else None, help="the client's address ('*', the default: any)")
        p.add_argument("--operation", choices=sorted(_OPS), required=need, help="the operation")
        p.add_argument("--deny", action="store_true", help="a DENY entry (default ALLOW)")
        p.add_argument("--secret-file", default=None, help="file holding the shared secret of the controller's RPCs")
        p.add_argument("--cluster-id", default=None, metavar="UUID", help="refuse a cluster of another id")
        add_tls(p)
        p.add_argument("--timeout-ms", type=positive_int_at_most(TIMEOUT_MS_MAX), default=30_000,
                       help="give up if the controller or etcd does not answer (default 30000)")  # fmt: skip


def _binding(args: argparse.Namespace) -> AclBinding:
    rt = _TYPES[args.resource_type]
    name = args.name if args.name is not None else ("kafka-cluster" if rt == ResourceType.CLUSTER else None)
    if name is None:
        raise AclFlagError("--name is needed (or '*' for every resource)")
    pattern = PatternType.PREFIXED if args.prefixed else PatternType.LITERAL
    permission = AclPermission.DENY if args.deny else AclPermission.ALLOW
    return AclBinding(rt, name, pattern, args.principal, args.host, _OPS[args.operation], permission)


def _filter(args: argparse.Namespace) -> AclBindingFilter:
    pattern = (
        PatternType.PREFIXED if args.prefixed else (PatternType.LITERAL if args.name is not None else PatternType.ANY)
    )
    return AclBindingFilter(
        _TYPES[args.resource_type] if args.resource_type else ResourceType.ANY,
        args.name,
        pattern,
        args.principal,
        args.host,
        _OPS[args.operation] if args.operation else AclOperation.ANY,
        AclPermission.DENY if args.deny else AclPermission.ANY,
    )


def _line(b: AclBinding) -> str:
    return (f"{b.permission.name} {b.principal} from {b.host} {b.operation.name} on {b.resource_type.name} "
            f"{b.pattern_type.name} {b.resource_name}")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from partlog.controller.client import ControllerUnavailableError
    from partlog.controller.cluster_meta import MetadataError

    what = f"partlog acls {args.acls}"
    if (args.controller is None) == (args.metadata is None):
        raise AclFlagError("give exactly one of --controller HOST:PORT and --metadata etcd://...")
    host, port, etcd_target = "", 0, None  # the one the flags name is set below
    try:
        if args.controller is not None:
            host, port = host_port(args.controller)
        else:
            from partlog.controller.etcd_layout import parse_etcd_url

            etcd_target = parse_etcd_url(args.metadata)
    except (ValueError, MetadataError) as e:
        raise AclFlagError(f"{'--controller' if args.controller else '--metadata'}: {e}") from e
    change = _binding(args) if args.acls == "add" else _filter(args)
    for name in ("client", "etcd_meta", "etcd_acls"):
        logging.getLogger(f"partlog.controller.{name}").setLevel(logging.ERROR)

    async def main() -> int:
        client = admin_metadata(args, etcd_target, host, port, read_secret_file(args.secret_file), tls_contexts(args))
        try:
            await client.start(timeout_ms=args.timeout_ms)
            if etcd_target is None:
                return _answer(what, change, await _by_controller(client, args.acls, change))
            await client.stop()  # it checked the prefix holds a cluster (of --cluster-id)
            return _answer(what, change, await _in_etcd(etcd_target, args.timeout_ms, args.acls, change))
        except (ControllerUnavailableError, MetadataError, ConnectionError) as e:
            print(f"{what}: {e}", file=sys.stderr)
            return 1
        finally:
            await client.stop()

    return asyncio.run(main())


# What a command did: add's refusal (None: added), or the ACLs removed or listed.
_Done = str | None | list[AclBinding]


async def _by_controller(client: Any, command: str, change: AclBinding | AclBindingFilter) -> _Done:
    from partlog.controller.acls import dec_binding, enc_binding, enc_filter

    if isinstance(change, AclBinding):
        why: str | None = (await client.call("create_acls", {"acls": [enc_binding(change)]}))["results"][0]
        return why
    if command == "remove":
        gone = (await client.call("delete_acls", {"filters": [enc_filter(change)]}))["results"][0]
        return [dec_binding(v) for v in gone]
    found = (await client.call("acls_poll", {"version": -1, "max_wait_ms": 0})).get("acls", [])
    return [b for b in map(dec_binding, found) if change.matches(b)]


async def _in_etcd(target: Any, timeout_ms: int, command: str, change: AclBinding | AclBindingFilter) -> _Done:
    from partlog.controller.etcd_acls import EtcdAcls

    acls = EtcdAcls(target, request_timeout_ms=timeout_ms)
    try:
        if command == "list":
            assert isinstance(change, AclBindingFilter)
            return (await acls.read()).select(change)
        # A change is validated against the ACLs read first (as a broker's).
        await acls.start()
        if not acls.loaded:
            raise ConnectionError(f"etcd {target.url()} did not answer within {timeout_ms} ms")
        if isinstance(change, AclBinding):
            return (await acls.create_acls([change]))[0]
        return (await acls.delete_acls([change]))[0]
    finally:
        await acls.stop()


def _answer(what: str, change: AclBinding | AclBindingFilter, done: _Done) -> int:
    if isinstance(change, AclBinding):
        if done is not None:
            print(f"{what}: {done}", file=sys.stderr)
            return 2
        print(f"added: {_line(change)}")
        return 0
    assert isinstance(done, list)
    if what.endswith(" remove"):
        for b in done:
            print(f"removed: {_line(b)}")
    else:
        for b in sorted(done, key=_line):
            print(_line(b))
    return 0
