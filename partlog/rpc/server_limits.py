"""An :class:`partlog.rpc.server.RpcServer`'s limits: each default, with why it
is that number, and :class:`ServerLimits`, the value a process's config
carries (the broker's ``BrokerConfig.rpc_limits``, the CLIs' flags)."""

from __future__ import annotations

from dataclasses import dataclass

# Kafka clients default to 5 in-flight requests per connection and Kafka
# brokers queue 500 requests in all; a broker peer pipelines produce, fetch
# and commit calls on one connection, so 256 keeps it busy while bounding the
# handler tasks (and response buffers) one peer can make us hold.
REQUESTS_IN_FLIGHT_MAX_DEFAULT = 256
# Stays well under the common 1024 soft limit on open files, which a broker
# shares with LMDB and its object-store connections.
CONNECTIONS_MAX_DEFAULT = 512
# A connection that has not said hello holds a slot of connections_max; ten
# seconds is ample on any network where brokers talk to each other.
HANDSHAKE_TIMEOUT_MS_DEFAULT = 10_000
# Connections still in the handshake: strangers (no secret proven yet) may
# hold at most this many slots, so they cannot crowd out the brokers.
HANDSHAKES_MAX_DEFAULT = 64
# Connections from one peer address; Kafka's max.connections.per.ip is
# unbounded by default, but one host flooding a broker must leave room for
# the others (a whole test cluster on loopback uses a few dozen).
CONNECTIONS_PER_IP_MAX_DEFAULT = 256
# Once a frame's first byte arrived, the rest must arrive within this: a
# half-sent frame must not hold a connection (and its buffer) for ever.
# Kafka's request.timeout.ms: a 64 MiB frame at 2 MB/s.
FRAME_DEADLINE_MS_DEFAULT = 30_000
# An authenticated connection with nothing in flight for this long is closed
# (Kafka's connections.max.idle.ms, 10 minutes); clients connect again.
IDLE_TIMEOUT_MS_DEFAULT = 600_000
# Bytes of requests being read, decoded or handled, server-wide, counted
# before a frame's payload is read (Kafka's queued.max.request.bytes): past
# it the server stops reading new frames (TCP pushes back) until answers
# free room.  A frame costs its size plus what its body may decode to
# (DECODED_BYTES_PER_ELEMENT per object its method's schema allows, at most
# one per byte), so this bounds the memory requests can take.  One frame
# larger than the whole budget is still admitted when nothing else is.
REQUEST_BYTES_IN_FLIGHT_MAX_DEFAULT = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """An :class:`RpcServer`'s limits, as one value a process's config can
    carry (``RpcServer(..., **dataclasses.asdict(limits))``)."""

    connections_max: int = CONNECTIONS_MAX_DEFAULT
    connections_per_ip_max: int = CONNECTIONS_PER_IP_MAX_DEFAULT
    handshakes_max: int = HANDSHAKES_MAX_DEFAULT
    requests_in_flight_max: int = REQUESTS_IN_FLIGHT_MAX_DEFAULT
    request_bytes_in_flight_max: int = REQUEST_BYTES_IN_FLIGHT_MAX_DEFAULT
    handshake_timeout_ms: int = HANDSHAKE_TIMEOUT_MS_DEFAULT
    frame_deadline_ms: int = FRAME_DEADLINE_MS_DEFAULT
    idle_timeout_ms: int = IDLE_TIMEOUT_MS_DEFAULT

    def __post_init__(self) -> None:
        for name in self.__slots__:
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ValueError(f"RPC server limit {name} must be a positive integer, got {value!r}")


__all__ = [
    "CONNECTIONS_MAX_DEFAULT",
    "CONNECTIONS_PER_IP_MAX_DEFAULT",
    "FRAME_DEADLINE_MS_DEFAULT",
    "HANDSHAKES_MAX_DEFAULT",
    "HANDSHAKE_TIMEOUT_MS_DEFAULT",
    "IDLE_TIMEOUT_MS_DEFAULT",
    "REQUESTS_IN_FLIGHT_MAX_DEFAULT",
    "REQUEST_BYTES_IN_FLIGHT_MAX_DEFAULT",
    "ServerLimits",
]
