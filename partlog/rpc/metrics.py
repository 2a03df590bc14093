"""The RPC transport's counters: :class:`RpcMetrics`, one per server (all its
connections) or per client connection."""

from __future__ import annotations

from dataclasses import dataclass, field

from partlog.rpc.frame import code_name


@dataclass(slots=True)
class RpcMetrics:
    """Counters for one server (all its connections) or one client.

    Mutable on purpose, unlike our records: the shell bumps them in place and
    an exporter reads them.  ``errors_by_code`` counts ERROR frames sent (by a
    server) or received (by a client), keyed by code name.
    """

    frames_in: int = 0
    frames_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    errors_by_code: dict[str, int] = field(default_factory=dict)
    # server only
    connections_open: int = 0
    connections_refused: int = 0
    handshakes_open: int = 0
    idle_closed: int = 0
    frame_deadlines_missed: int = 0
    bad_requests: int = 0  # bodies refused by their method's schema or decoding limits
    request_bytes_in_flight: int = 0
    request_bytes_waits: int = 0  # frames that waited for room in request_bytes_in_flight_max
    # client only
    timeouts: int = 0
    late_responses_dropped: int = 0

    def count_error(self, code: int) -> None:
        name = code_name(code)
        self.errors_by_code[name] = self.errors_by_code.get(name, 0) + 1


__all__ = ["RpcMetrics"]
