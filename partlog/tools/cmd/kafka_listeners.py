"""``partlog broker``'s Kafka listener flags, as Kafka's broker configs:
``--listeners`` (listeners), ``--listener-security-protocol-map``
(listener.security.protocol.map), ``--advertised-listeners``
(advertised.listeners), the TLS files and ``--kafka-ssl-client-auth``
(ssl.keystore / ssl.truststore / ssl.client.auth), the principal mapping
rules (ssl.principal.mapping.rules) and the SASL mechanisms
(sasl.enabled.mechanisms).  A bad value is one line and exit status 2."""

from __future__ import annotations

import argparse

from partlog.kafka_front.listeners import (
    AUTH_DEADLINE_MS_DEFAULT,
    REAUTH_MS_MAX,
    ClientAuth,
    ListenerConfigError,
    ListenerSecurity,
    ListenerSpec,
    ListenerTls,
    parse_advertised,
    parse_listeners,
    parse_protocol_map,
)
from partlog.tools.cmd.flags import non_negative_int, positive_int


def add_listener_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Kafka listeners and their security (Kafka's broker configs)")
    g.add_argument(
        "--listeners",
        default=None,
        metavar="NAME://HOST:PORT[,...]",
        help="Kafka's listeners, e.g. SASL_SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092 (a name is PLAINTEXT, "
        "SSL, SASL_PLAINTEXT, SASL_SSL or one of --listener-security-protocol-map; instead of --kafka-port). "
        "Metadata gives clients each broker's address on the listener they came in on",
    )
    g.add_argument(
        "--listener-security-protocol-map",
        default=None,
        metavar="NAME:PROTOCOL[,...]",
        help="listener.security.protocol.map: the protocol of each listener name, e.g. INTERNAL:SASL_SSL,EXTERNAL:SSL "
        "(replaces the default, where each protocol's name is its own)",
    )
    g.add_argument(
        "--advertised-listeners",
        default=None,
        metavar="NAME://HOST:PORT[,...]",
        help="advertised.listeners: the address clients are told for a listener (default: the listener's own)",
    )
    add_security_args(g)


def add_security_args(g: argparse._ActionsContainer) -> None:
    """The flags of the listeners' TLS files and SASL (``partlog broker``
    and ``partlog cluster``)."""
    g.add_argument("--kafka-ssl-cert", default=None, metavar="FILE", help="SSL/SASL_SSL listeners' certificate (PEM)")
    g.add_argument("--kafka-ssl-key", default=None, metavar="FILE", help="its private key (PEM)")
    g.add_argument("--kafka-ssl-ca", default=None, metavar="FILE", help="CA that client certificates must chain to")
    g.add_argument(
        "--kafka-ssl-client-auth",
        choices=[c.value for c in ClientAuth],
        default=ClientAuth.NONE.value,
        help="ssl.client.auth: ask clients for a certificate (default none)",
    )
    g.add_argument(
        "--kafka-ssl-principal-mapping-rules",
        default="DEFAULT",
        metavar="RULES",
        help="ssl.principal.mapping.rules: the principal from a client certificate's subject, "
        "e.g. 'RULE:^CN=(.*?),.*$/$1/L,DEFAULT' (default DEFAULT)",
    )
    g.add_argument(
        "--kafka-sasl-mechanisms",
        default="SCRAM-SHA-512,SCRAM-SHA-256",
        metavar="M[,...]",
        help="sasl.enabled.mechanisms of the SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 "
        "(default SCRAM-SHA-512,SCRAM-SHA-256; users: partlog users, kept by the controller or etcd)",
    )
    g.add_argument(
        "--kafka-connections-max-reauth-ms",
        type=non_negative_int,
        default=0,
        metavar="MS",
        help="connections.max.reauth.ms (KIP-368): a SASL session lasts this long; the client re-authenticates on "
        "its connection before then, or is disconnected at its next request (default 0: sessions never expire; "
        f"at most {REAUTH_MS_MAX})",
    )
    g.add_argument(
        "--kafka-auth-deadline-ms",
        type=positive_int,
        default=AUTH_DEADLINE_MS_DEFAULT,
        help=f"close a client that has not finished TLS and SASL in this long (default {AUTH_DEADLINE_MS_DEFAULT})",
    )


def listener_config(args: argparse.Namespace) -> tuple[tuple[ListenerSpec, ...], ListenerSecurity]:
    """The listeners (none without --listeners) and their security;
    ListenerConfigError (exit 2) when they do not fit together."""
    protocol_map = None
    if args.listener_security_protocol_map is not None:
        protocol_map = parse_protocol_map(args.listener_security_protocol_map)
    if args.listeners is None and (protocol_map is not None or args.advertised_listeners is not None):
        raise ListenerConfigError("--listener-security-protocol-map and --advertised-listeners need --listeners")
    specs = parse_listeners(args.listeners, protocol_map) if args.listeners is not None else ()
    if args.advertised_listeners is not None:
        specs = parse_advertised(args.advertised_listeners, specs)
    security = security_config(args)
    security.check(specs)
    return specs, security


def security_config(args: argparse.Namespace) -> ListenerSecurity:
    """The listeners' security from :func:`add_security_args`' flags;
    ListenerConfigError (exit 2) names a bad one."""
    tls = None
    if args.kafka_ssl_cert or args.kafka_ssl_key:
        if not (args.kafka_ssl_cert and args.kafka_ssl_key):
            raise ListenerConfigError("--kafka-ssl-cert and --kafka-ssl-key go together")
        tls = ListenerTls(
            args.kafka_ssl_cert, args.kafka_ssl_key, args.kafka_ssl_ca or "", ClientAuth(args.kafka_ssl_client_auth)
        )
        tls.context()  # the files load, or one line now
    return ListenerSecurity(
        tls=tls,
        principal_rules=args.kafka_ssl_principal_mapping_rules,
        sasl_mechanisms=tuple(m.strip() for m in args.kafka_sasl_mechanisms.split(",") if m.strip()),
        auth_deadline_ms=args.kafka_auth_deadline_ms,
        connections_max_reauth_ms=args.kafka_connections_max_reauth_ms,
    )


__all__ = ["ListenerConfigError", "add_listener_args", "add_security_args", "listener_config", "security_config"]
