"""Kafka listeners as Kafka's brokers configure them, and what each one
asks of a connection before its requests reach a handler.

``listeners = "SASL_SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092"``:
each entry names a listener, a host and a port (0: any free port).  A
listener's name is its security protocol (Kafka's four), or any name that
``listener.security.protocol.map`` (:func:`parse_protocol_map`, e.g.
``INTERNAL:SASL_SSL,EXTERNAL:SSL``) maps to one; as Kafka's, a map given
replaces the default one.  One broker may have several listeners, each
name at most once.  ``advertised.listeners`` (:func:`parse_advertised`)
gives the host and port clients are told for a listener (Metadata,
FindCoordinator); by default its own.

* PLAINTEXT: nothing; every client is ``User:ANONYMOUS``.
* SSL: TLS; with a client certificate (``ssl.client.auth`` required or
  requested) the principal is ``User:`` and the certificate's subject,
  mapped by ``ssl.principal.mapping.rules``; ANONYMOUS without one.
* SASL_PLAINTEXT, SASL_SSL: SaslHandshake and SaslAuthenticate first (over
  TLS for SASL_SSL); the principal is ``User:<name>``.

:class:`ListenerSecurity` holds what the listeners of one broker share:
the TLS files, the client certificate policy, the mapping rules, the SASL
mechanisms, the credentials and the handshake deadline.  Nothing here does
I/O beyond loading the TLS files.
"""

from __future__ import annotations

import enum
import os
import re
import ssl
from dataclasses import dataclass, field, replace

from partlog.controller.cluster_meta import format_kafka_listeners
from partlog.kafka_front.principal import PrincipalMapper
from partlog.kafka_front.scram import MECHANISMS, CredentialLookup, NoCredentials

# A client must finish TLS and SASL within this of its connection (Kafka
# bounds it only by connections.max.idle.ms, 10 minutes; a client that
# connects and stops would otherwise hold a connection slot that long).
AUTH_DEADLINE_MS_DEFAULT = 10_000
# connections.max.reauth.ms at most this (24.8 days; Kafka takes any long):
# a session of years is no session limit, and a bounded value keeps the
# expiry arithmetic and the answer's session_lifetime_ms plain.
REAUTH_MS_MAX = 2**31 - 1
PORT_MAX = 65_535
_LISTENER = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)://(\[[0-9a-fA-F:.]+\]|[^:/\s]*):(\d{1,5})$")
_HOST = re.compile(r"^[A-Za-z0-9._-]+$|^[0-9a-fA-F:.]+$")


class ListenerConfigError(ValueError):
    """A listener or its security settings are not usable (exit status 2)."""

    exit_status = 2


class SecurityProtocol(enum.Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


class ClientAuth(enum.Enum):
    """Kafka's ``ssl.client.auth``."""

    REQUIRED = "required"
    REQUESTED = "requested"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    protocol: SecurityProtocol
    host: str
    port: int
    # The listener's name (Kafka's listener name); "": its protocol's.
    listener_name: str = ""
    # What clients are told (advertised.listeners); "" / 0: host / port.
    advertised_host: str = ""
    advertised_port: int = 0

    @property
    def name(self) -> str:
        return self.listener_name or self.protocol.value

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def _split(item: str, what: str) -> tuple[str, str, int]:
    m = _LISTENER.match(item)
    if m is None:
        raise ListenerConfigError(f"{what} {item!r}: expected NAME://HOST:PORT")
    host, port = m.group(2).strip("[]"), int(m.group(3))
    if not host:
        raise ListenerConfigError(f"{what} {item!r}: name the host (an empty host is all of them)")
    if not _HOST.match(host):
        raise ListenerConfigError(f"{what} {item!r}: {host!r} is not a host name or address")
    if port > PORT_MAX:
        raise ListenerConfigError(f"{what} {item!r}: port above {PORT_MAX}")
    return m.group(1).upper(), host, port


def parse_protocol_map(text: str) -> dict[str, SecurityProtocol]:
    """Kafka's ``listener.security.protocol.map``: ``NAME:PROTOCOL,...``."""
    out: dict[str, SecurityProtocol] = {}
    for raw in text.split(","):
        name, _, proto = raw.strip().partition(":")
        name = name.upper()
        if not re.match(r"^[A-Z_][A-Z0-9_]*$", name) or name in out:
            raise ListenerConfigError(f"listener security protocol map: {raw.strip()!r} is not NAME:PROTOCOL "
                                      "(or names a listener twice)")  # fmt: skip
        try:
            out[name] = SecurityProtocol(proto.strip().upper())
        except ValueError:
            known = ", ".join(p.value for p in SecurityProtocol)
            raise ListenerConfigError(
                f"listener security protocol map: {raw.strip()!r}: unknown protocol (one of {known})"
            ) from None
    return out


def parse_listeners(text: str, protocol_map: dict[str, SecurityProtocol] | None = None) -> tuple[ListenerSpec, ...]:
    """Kafka's ``listeners`` value: comma-separated ``NAME://host:port``,
    each name a protocol or a key of ``protocol_map`` (which, given,
    replaces the default map, as Kafka's)."""
    names = protocol_map if protocol_map else {p.value: p for p in SecurityProtocol}
    specs: list[ListenerSpec] = []
    for raw in text.split(","):
        item = raw.strip()
        name, host, port = _split(item, "listener")
        protocol = names.get(name)
        if protocol is None:
            known = ", ".join(names)
            raise ListenerConfigError(f"listener {item!r}: unknown listener name (one of {known}; "
                                      "others need the listener security protocol map)")  # fmt: skip
        if any(s.name == name for s in specs):
            raise ListenerConfigError(f"listener {item!r}: {name} is named twice")
        specs.append(ListenerSpec(protocol, host, port, "" if name == protocol.value else name))
    if not specs:
        raise ListenerConfigError("no listener given")
    return tuple(specs)


def parse_advertised(text: str, specs: tuple[ListenerSpec, ...]) -> tuple[ListenerSpec, ...]:
    """``specs`` with Kafka's ``advertised.listeners`` applied: each entry
    ``NAME://host:port`` names one of the listeners; the others advertise
    their own address."""
    by_name = {s.name: s for s in specs}
    told: dict[str, tuple[str, int]] = {}
    for raw in text.split(","):
        item = raw.strip()
        name, host, port = _split(item, "advertised listener")
        if name not in by_name:
            raise ListenerConfigError(f"advertised listener {item!r}: no listener named {name}")
        if name in told:
            raise ListenerConfigError(f"advertised listener {item!r}: {name} is named twice")
        if port == 0:
            raise ListenerConfigError(f"advertised listener {item!r}: a port clients can reach, not 0")
        told[name] = (host, port)
    return tuple(
        replace(s, advertised_host=told[s.name][0], advertised_port=told[s.name][1]) if s.name in told else s
        for s in specs
    )


def registration_text(specs: tuple[ListenerSpec, ...], bound_ports: dict[str, int] | None = None) -> str:
    """The ``kafka_listeners`` a broker registers: every listener's name and
    advertised address (its port once bound, from ``bound_ports``)."""
    ports = bound_ports or {}
    return format_kafka_listeners(
        [(s.name, s.advertised_host or s.host, s.advertised_port or ports.get(s.name, s.port)) for s in specs]
    )


@dataclass(frozen=True, slots=True)
class ListenerTls:
    """A TLS listener's files (PEM), Kafka's ssl.keystore / ssl.truststore."""

    cert_file: str
    key_file: str
    ca_file: str = ""  # verifies client certificates; needed unless client_auth is none
    client_auth: ClientAuth = ClientAuth.NONE

    def context(self) -> ssl.SSLContext:
        """The server context; ListenerConfigError names a file that cannot be used."""
        if self.client_auth is not ClientAuth.NONE and not self.ca_file:
            raise ListenerConfigError(f"ssl.client.auth={self.client_auth.value} needs a CA file")
        for what, path in (("certificate", self.cert_file), ("key", self.key_file), ("CA", self.ca_file)):
            if path and not (os.path.isfile(path) and os.access(path, os.R_OK)):
                raise ListenerConfigError(f"Kafka listener TLS {what} file {path}: not found or not readable")
        try:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_cert_chain(self.cert_file, self.key_file)
            if self.ca_file:
                ctx.load_verify_locations(self.ca_file)
        except (OSError, ssl.SSLError) as e:
            raise ListenerConfigError(f"Kafka listener TLS files cert={self.cert_file} key={self.key_file}: {e}") from e
        ctx.verify_mode = {
            ClientAuth.REQUIRED: ssl.CERT_REQUIRED,
            ClientAuth.REQUESTED: ssl.CERT_OPTIONAL,
            ClientAuth.NONE: ssl.CERT_NONE,
        }[self.client_auth]
        return ctx


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """What a broker's listeners need beyond their address."""

    tls: ListenerTls | None = None
    # Kafka's ssl.principal.mapping.rules (DEFAULT: the subject as it is).
    principal_rules: str = "DEFAULT"
    # Kafka's sasl.enabled.mechanisms (its default is GSSAPI, not served here).
    sasl_mechanisms: tuple[str, ...] = ("SCRAM-SHA-512", "SCRAM-SHA-256")
    credentials: CredentialLookup = field(default_factory=NoCredentials)
    auth_deadline_ms: int = AUTH_DEADLINE_MS_DEFAULT
    # Kafka's connections.max.reauth.ms (KIP-368): a SASL session's lifetime,
    # after which the client must re-authenticate on its connection or be
    # disconnected at its next request; 0 (Kafka's default): never.
    connections_max_reauth_ms: int = 0

    def __post_init__(self) -> None:
        unknown = [m for m in self.sasl_mechanisms if m not in MECHANISMS]
        if unknown or not self.sasl_mechanisms:
            raise ListenerConfigError(
                f"sasl.enabled.mechanisms {','.join(self.sasl_mechanisms) or '(none)'}: "
                f"each one of {', '.join(MECHANISMS)}"
            )
        if type(self.auth_deadline_ms) is not int or self.auth_deadline_ms <= 0:
            raise ListenerConfigError(f"auth_deadline_ms must be a positive integer, got {self.auth_deadline_ms!r}")
        reauth = self.connections_max_reauth_ms
        if type(reauth) is not int or not 0 <= reauth <= REAUTH_MS_MAX:
            raise ListenerConfigError(
                f"connections.max.reauth.ms must be an integer in [0, {REAUTH_MS_MAX}], got {reauth!r}"
            )
        try:
            PrincipalMapper.parse(self.principal_rules)
        except ValueError as e:
            raise ListenerConfigError(str(e)) from None

    def kafka_configs(self) -> dict[str, str]:
        """The settings Kafka has broker configs for, by those names (DescribeConfigs)."""
        return {"connections.max.reauth.ms": str(self.connections_max_reauth_ms)}

    def mapper(self) -> PrincipalMapper:
        return PrincipalMapper.parse(self.principal_rules)

    def check(self, specs: tuple[ListenerSpec, ...]) -> None:
        """Refuse a TLS listener without TLS files."""
        for s in specs:
            if s.protocol.tls and self.tls is None:
                raise ListenerConfigError(f"listener {s}: needs TLS files (a certificate and its key)")


__all__ = [
    "AUTH_DEADLINE_MS_DEFAULT",
    "REAUTH_MS_MAX",
    "ClientAuth",
    "ListenerConfigError",
    "ListenerSecurity",
    "ListenerSpec",
    "ListenerTls",
    "SecurityProtocol",
    "parse_advertised",
    "parse_listeners",
    "parse_protocol_map",
    "registration_text",
]
