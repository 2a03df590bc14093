"""Authentication of one Kafka connection, as Kafka's SaslServerAuthenticator
orders it (sans-IO but for the answer's encoding).

On a SASL listener a connection starts unauthenticated:

* before SaslHandshake, ApiVersions is served and SaslHandshake handled;
  any other request closes the connection without an answer (Kafka's
  "Unexpected Kafka request of type X during SASL handshake");
* SaslHandshake naming a mechanism not enabled is answered
  UNSUPPORTED_SASL_MECHANISM (with the enabled ones) and the connection
  closed;
* after SaslHandshake v0 (clients before KIP-152), the SASL tokens travel
  raw, each size-prefixed, both ways (:meth:`AuthGate.raw_answer`); a token
  the mechanism refuses closes the connection without an answer, as Kafka's;
* after v1, only SaslAuthenticate: any other request is answered
  ILLEGAL_SASL_STATE and the connection closed; a token the mechanism
  refuses is answered SASL_AUTHENTICATION_FAILED (its message) and the
  connection closed;
* once the mechanism completes, the session's principal is ``User:<name>``
  and every request is served.

SaslHandshake or SaslAuthenticate on a connection that is not (or no
longer) in the handshake, a PLAINTEXT or SSL listener's or an
authenticated one, is answered ILLEGAL_SASL_STATE, as Kafka's KafkaApis.
A connection that has not authenticated by the deadline is closed by the
listener (its read loop asks :attr:`AuthGate.deadline`).

Re-authentication (KIP-368), with ``connections.max.reauth.ms`` > 0, as
Kafka's KafkaChannel and SaslServerAuthenticator:

* a completed authentication answers ``session_lifetime_ms`` =
  connections.max.reauth.ms (PLAIN and SCRAM credentials do not expire),
  and the session expires that long after;
* a request that arrives after its session expired closes the connection
  without an answer (Kafka's expired-connections-killed), except
* SaslHandshake on the authenticated connection, which begins a
  re-authentication (at most one a second; a second one within it is
  answered ILLEGAL_SASL_STATE, and the connection kept): the same mechanism
  must follow (another enabled one is answered, then the next frame closes
  the connection), then SaslAuthenticate only, under the auth deadline; it
  must prove the same principal ("Cannot change principals during
  re-authentication"), else SASL_AUTHENTICATION_FAILED and the connection
  closes; success starts a new session.  Requests already being served go on.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from typing import Any

from partlog.kafka.errors import Errors
from partlog.kafka_front.codec import API_VERSIONS_KEY, Request, build, encode_response, error_body, response_class
from partlog.kafka_front.listeners import ListenerSecurity
from partlog.kafka_front.scram import SASL_TOKEN_BYTES_MAX, PlainServer, SaslFailure, ScramServer

log = logging.getLogger(__name__)

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
# Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS: a connection
# begins at most one re-authentication a second.
REAUTH_INTERVAL_MIN_S = 1.0
# A request frame before authentication is at most this (Kafka's
# sasl.server.max.receive.size bounds it at 512 KiB; a handshake or a SCRAM
# token with its header fits in far less).
UNAUTHENTICATED_FRAME_BYTES_MAX = SASL_TOKEN_BYTES_MAX + 1024


class Step(enum.Enum):
    SERVE = "serve"  # the listener's handlers answer it
    ANSWER = "answer"  # the gate answers it (``answer``)
    CLOSE = "close"  # close the connection, no answer
    EXPIRED = "expired"  # the session expired (KIP-368): close, no answer


class _State(enum.Enum):
    HANDSHAKE = "handshake"  # ApiVersions or SaslHandshake
    AUTHENTICATE = "authenticate"  # SaslAuthenticate only
    RAW = "raw"  # raw size-prefixed tokens (after SaslHandshake v0)
    DONE = "done"  # authenticated, or a listener without SASL
    REAUTH_BAD_MECHANISM = "reauth_bad_mechanism"  # the next frame closes the connection
    FAILED = "failed"


class AuthGate:
    """One connection's authentication state.  ``sasl`` False: nothing to
    do but answer stray SASL requests ILLEGAL_SASL_STATE."""

    def __init__(
        self,
        sasl: bool,
        security: ListenerSecurity,
        nonce: Callable[[], str],
        deadline: float,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self.security = security
        self._nonce = nonce
        self._state = _State.HANDSHAKE if sasl else _State.DONE
        self._server: PlainServer | ScramServer | None = None
        # Monotonic seconds by which authentication must be done (None: done).
        self.deadline: float | None = deadline if sasl else None
        self.principal: str | None = None  # set once SASL completes
        self.close_after_answer = False
        # KIP-368 (``monotonic``: the listener's clock, needed with
        # connections.max.reauth.ms > 0).
        self._monotonic = monotonic
        self.mechanism: str | None = None  # of the session
        self.session_expires: float | None = None  # monotonic seconds; None: never
        self._reauth_started: float | None = None
        # While re-authenticating: the session's mechanism and principal.
        self._previous: tuple[str, str] | None = None
        self.reauthentications = 0  # completed

    def _now(self) -> float:
        assert self._monotonic is not None, "connections.max.reauth.ms needs the listener's clock"
        return self._monotonic()

    @property
    def authenticated(self) -> bool:
        return self._state is _State.DONE

    @property
    def raw_tokens(self) -> bool:
        """The next frame is a raw SASL token, not a Kafka request."""
        return self._state is _State.RAW

    @property
    def frame_bytes_max(self) -> int | None:
        return None if self.authenticated else UNAUTHENTICATED_FRAME_BYTES_MAX

    def classify(self, req: Request) -> Step:
        key = req.api_key
        if self._state is _State.DONE and self.session_expires is not None:
            if key == SASL_HANDSHAKE_KEY and self._begin_reauthentication():
                return Step.ANSWER
            if self._now() > self.session_expires:
                log.info("kafka listener: %s after its session expired: closing", req.api_name)
                self._state = _State.FAILED
                return Step.EXPIRED
        if self._state is _State.REAUTH_BAD_MECHANISM:
            log.info("kafka listener: re-authentication with another mechanism than %s: closing", self.mechanism)
            self._state = _State.FAILED
            return Step.CLOSE
        if key in (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY):
            if self._state is _State.HANDSHAKE and key == SASL_AUTHENTICATE_KEY:
                return self._refuse(req, "during SASL handshake")
            return Step.ANSWER
        if self._state is _State.DONE:
            return Step.SERVE
        if self._state is _State.HANDSHAKE:
            if key == API_VERSIONS_KEY:
                return Step.SERVE
            return self._refuse(req, "during SASL handshake")
        return Step.ANSWER  # ILLEGAL_SASL_STATE, then closed

    def _begin_reauthentication(self) -> bool:
        """A SaslHandshake on the authenticated connection: begin a
        re-authentication, unless one began less than a second ago (Kafka's
        MIN_REAUTH_INTERVAL; the handshake is then answered as any other
        after authentication)."""
        now = self._now()
        if self._reauth_started is not None and now - self._reauth_started < REAUTH_INTERVAL_MIN_S:
            return False
        assert self.mechanism is not None and self.principal is not None
        self._reauth_started = now
        self._previous = (self.mechanism, self.principal)
        self._state = _State.HANDSHAKE
        self.deadline = now + self.security.auth_deadline_ms / 1000
        return True

    def _refuse(self, req: Request, when: str) -> Step:
        log.info("kafka listener: unexpected Kafka request of type %s %s: closing", req.api_name, when)
        self._state = _State.FAILED
        return Step.CLOSE

    async def answer(self, req: Request) -> bytes:
        """The answer to a request ``classify`` said the gate answers; sets
        ``close_after_answer`` when the connection must close once it is sent."""
        cls = response_class(req.api_key, req.api_version)
        if req.unsupported is not None:
            self._fail()
            return encode_response(req, build(cls, _error(req.api_key, Errors.UNSUPPORTED_VERSION, "")))
        state = self._state
        if req.api_key not in (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY):
            # Another API while SASL is under way: its own error answer
            # (Kafka's getErrorResponse), then closed.
            self._fail()
            return encode_response(req, error_body(cls, int(Errors.ILLEGAL_SASL_STATE)))
        if req.api_key == SASL_HANDSHAKE_KEY and state is _State.HANDSHAKE:
            body = self._handshake(req.body.mechanism, raw=req.api_version == 0)
        elif req.api_key == SASL_AUTHENTICATE_KEY and state is _State.AUTHENTICATE:
            body = await self._authenticate(bytes(req.body.auth_bytes))
        else:
            if state is not _State.DONE:
                self._fail()
            what = "after successful authentication" if state is _State.DONE else "during SASL authentication"
            body = _error(req.api_key, Errors.ILLEGAL_SASL_STATE, f"Unexpected {req.api_name} request {what}")
        return encode_response(req, build(cls, body))

    async def raw_answer(self, token: bytes) -> bytes | None:
        """The size-prefixed answer to a raw token (after SaslHandshake v0),
        or None when authentication failed (the connection then closes)."""
        assert self._state is _State.RAW
        body = await self._authenticate(token)
        if body["error_code"]:
            return None
        out = bytes(body["auth_bytes"])
        return len(out).to_bytes(4, "big") + out

    def _handshake(self, mechanism: str, *, raw: bool) -> dict[str, Any]:
        enabled = list(self.security.sasl_mechanisms)
        if mechanism not in enabled:
            self._fail()
            log.info("kafka listener: SASL mechanism %r not enabled (%s)", mechanism, ",".join(enabled))
            return {"error_code": int(Errors.UNSUPPORTED_SASL_MECHANISM), "mechanisms": enabled}
        if self._previous is not None and mechanism != self._previous[0]:
            # Kafka answers, then fails the next frame without an answer.
            self._state = _State.REAUTH_BAD_MECHANISM
            return {"error_code": 0, "mechanisms": enabled}
        self._server = PlainServer() if mechanism == "PLAIN" else ScramServer(mechanism, self._nonce())
        self._state = _State.RAW if raw else _State.AUTHENTICATE
        return {"error_code": 0, "mechanisms": enabled}

    async def _authenticate(self, token: bytes) -> dict[str, Any]:
        server = self._server
        assert server is not None
        lookup = self.security.credentials.scram_credential
        try:
            if isinstance(server, PlainServer):
                user, password = server.read(token)
                cred = await lookup(user, "SCRAM-SHA-512") or await lookup(user, "SCRAM-SHA-256")
                # A key derivation (PBKDF2, thousands of hashes): off the loop.
                await asyncio.to_thread(server.check, user, password, cred)
                out = b""
            elif not server.started:
                user = server.client_first(token)
                out = server.server_first(await lookup(user, server.mechanism))
            else:
                out = server.client_final(token)
        except SaslFailure as e:
            self._fail()
            what = "re-authentication" if self._previous is not None else "authentication"
            log.info("kafka listener: SASL %s %s failed: %s", server.mechanism, what, e)
            # Kafka's message for every SaslException: it tells the client
            # neither whether the user exists nor which check failed.
            message = (
                f"Authentication failed during {what} due to invalid credentials with SASL mechanism {server.mechanism}"
            )
            return _error(SASL_AUTHENTICATE_KEY, Errors.SASL_AUTHENTICATION_FAILED, message)
        lifetime_ms = 0
        if server.user is not None:
            principal = f"User:{server.user}"
            if self._previous is not None and principal != self._previous[1]:
                self._fail()
                before = self._previous[1].replace(":", ".", 1)
                message = (
                    f"Cannot change principals during re-authentication from {before}: {principal.replace(':', '.', 1)}"
                )
                log.info("kafka listener: %s", message)
                return _error(SASL_AUTHENTICATE_KEY, Errors.SASL_AUTHENTICATION_FAILED, message)
            lifetime_ms = self._complete(server.mechanism, principal)
        return {"error_code": 0, "error_message": None, "auth_bytes": out, "session_lifetime": lifetime_ms}

    def _complete(self, mechanism: str, principal: str) -> int:
        """The session starts (again); its lifetime in ms (0: no expiry)."""
        if self._previous is not None:
            self.reauthentications += 1
        self._state = _State.DONE
        self._previous = None
        self.deadline = None
        self.mechanism = mechanism
        self.principal = principal
        lifetime_ms = self.security.connections_max_reauth_ms
        self.session_expires = self._now() + lifetime_ms / 1000 if lifetime_ms > 0 else None
        return lifetime_ms

    def _fail(self) -> None:
        self._state = _State.FAILED
        self.close_after_answer = True


def _error(api_key: int, error: Errors, message: str) -> dict[str, Any]:
    if api_key == SASL_HANDSHAKE_KEY:
        return {"error_code": int(error), "mechanisms": []}
    return {"error_code": int(error), "error_message": message, "auth_bytes": b"", "session_lifetime": 0}


__all__ = ["SASL_AUTHENTICATE_KEY", "SASL_HANDSHAKE_KEY", "UNAUTHENTICATED_FRAME_BYTES_MAX", "AuthGate", "Step"]
