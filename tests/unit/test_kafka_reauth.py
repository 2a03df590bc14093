"""KIP-368 re-authentication in the Kafka listener's AuthGate
(partlog.kafka_front.authn), sans-IO: a hypothesis state machine drives the
gate with SaslHandshake, SaslAuthenticate (SASL/PLAIN tokens) and ListGroups
requests on a clock of its own, and checks every step against a small model
of Kafka's KafkaChannel and SaslServerAuthenticator: what is served, what
is answered with which error, what closes the connection, the session's
lifetime and expiry, the one-a-second limit, and that a re-authentication
keeps its mechanism and principal."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from partlog.kafka.errors import Errors
from partlog.kafka.scram_credential import ScramCredential
from partlog.kafka_front.apis import SUPPORTED_VERSIONS
from partlog.kafka_front.authn import REAUTH_INTERVAL_MIN_S, AuthGate, Step
from partlog.kafka_front.codec import Request, parse_request
from partlog.kafka_front.listeners import ListenerConfigError, ListenerSecurity
from partlog.kafka_front.scram import StaticCredentials
from tests.kafka_helpers import kio_answer, kio_request

USERS = {"bob": "bob-pw", "alice": "alice-pw"}
# One credential each, made once (a PBKDF2 of 4,096 rounds).
_CREDS = StaticCredentials(
    {(u, "SCRAM-SHA-512"): ScramCredential.from_password("SCRAM-SHA-512", p, b"salt-" + u.encode(), 4096)
     for u, p in USERS.items()}
)  # fmt: skip
ENABLED = ("PLAIN", "SCRAM-SHA-512")
AUTH_DEADLINE_MS = 2_000


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t


def _request(api_key: int, version: int, body: dict[str, object]) -> Request:
    return parse_request(kio_request(api_key, version, 7, body)[4:], SUPPORTED_VERSIONS)


@dataclass
class Outcome:
    """What the gate did with one request."""

    kind: str  # serve, answer, close, expired
    error: int = 0
    closes: bool = False  # after its answer
    lifetime_ms: int = 0


def _drive(gate: AuthGate, req: Request) -> Outcome:
    step = gate.classify(req)
    if step is Step.SERVE:
        return Outcome("serve")
    if step is Step.CLOSE:
        return Outcome("close")
    if step is Step.EXPIRED:
        return Outcome("expired")
    data = asyncio.run(gate.answer(req))
    body = kio_answer(req.api_key, req.api_version, data[4:])
    lifetime = int(body.session_lifetime.total_seconds() * 1000) if req.api_key == 36 else 0
    return Outcome("answer", int(body.error_code), gate.close_after_answer, lifetime)


class ReauthMachine(RuleBasedStateMachine):
    """The gate against Kafka's rules, one SASL_PLAINTEXT connection."""

    @initialize(reauth_ms=st.sampled_from([0, 5_000, 5_000]))
    def start(self, reauth_ms: int) -> None:
        self.clock = Clock()
        self.reauth_ms = reauth_ms
        self.connect()

    @precondition(lambda self: self.phase == "closed")
    @rule()
    def connect(self) -> None:
        """A new connection (the first, or after the gate closed one)."""
        reauth_ms = self.reauth_ms
        security = ListenerSecurity(
            sasl_mechanisms=ENABLED, credentials=_CREDS, auth_deadline_ms=AUTH_DEADLINE_MS,
            connections_max_reauth_ms=reauth_ms,
        )  # fmt: skip
        self.gate = AuthGate(
            True, security, lambda: "nonce", self.clock.t + AUTH_DEADLINE_MS / 1000, self.clock.monotonic
        )
        # The model.
        self.phase = "handshake"  # authenticate, done, bad_mechanism, closed
        self.mechanism = ""  # of the handshake under way, then of the session
        self.principal = ""
        self.previous_principal: str | None = None  # while re-authenticating
        self.expires: float | None = None
        self.reauth_started: float | None = None

    def _expired(self) -> bool:
        return self.expires is not None and self.clock.t > self.expires

    def _check(self, got: Outcome, want: Outcome) -> None:
        assert got == want, (got, want, self.phase)
        if want.kind in ("close", "expired") or want.closes:
            self.phase = "closed"

    @rule(seconds=st.sampled_from([0.1, 0.5, 0.99, 1.0, 2.0, 4.9, 5.0, 5.01, 12.0]))
    def wait(self, seconds: float) -> None:
        self.clock.t += seconds

    @precondition(lambda self: self.phase != "closed")
    @rule()
    def list_groups(self) -> None:
        got = _drive(self.gate, _request(16, 3, {}))
        if self.phase == "handshake" or self.phase == "bad_mechanism":
            want = Outcome("close")
        elif self.phase == "authenticate":  # "Unexpected Kafka request ... during SASL authentication"
            want = Outcome("answer", Errors.ILLEGAL_SASL_STATE, closes=True)
        else:
            want = Outcome("expired") if self._expired() else Outcome("serve")
        self._check(got, want)

    @precondition(lambda self: self.phase != "closed")
    @rule(mechanism=st.sampled_from(["PLAIN", "PLAIN", "PLAIN", "SCRAM-SHA-512", "GSSAPI"]))
    def handshake(self, mechanism: str) -> None:
        got = _drive(self.gate, _request(17, 1, {"mechanism": mechanism}))
        want: Outcome
        if self.phase == "bad_mechanism":
            want = Outcome("close")
        elif self.phase == "authenticate":
            want = Outcome("answer", Errors.ILLEGAL_SASL_STATE, closes=True)
        elif self.phase == "done":
            t = self.clock.t
            may = self.expires is not None and (self.reauth_started is None or t - self.reauth_started >= 1.0)
            if not may:
                # Kafka's KafkaApis: ILLEGAL_SASL_STATE, the connection kept
                # (an expired session closes first).
                want = Outcome("expired") if self._expired() else Outcome("answer", Errors.ILLEGAL_SASL_STATE)
            else:
                self.reauth_started = t
                self.previous_principal = self.principal
                want = self._handshake_answer(mechanism, reauth=True)
        else:
            want = self._handshake_answer(mechanism, reauth=False)
        self._check(got, want)

    def _handshake_answer(self, mechanism: str, *, reauth: bool) -> Outcome:
        if mechanism not in ENABLED:
            return Outcome("answer", Errors.UNSUPPORTED_SASL_MECHANISM, closes=True)
        if reauth and mechanism != self.mechanism:
            self.phase = "bad_mechanism"  # answered; the next frame closes
            return Outcome("answer", Errors.NONE)
        self.phase, self.mechanism = "authenticate", mechanism
        return Outcome("answer", Errors.NONE)

    @precondition(lambda self: self.phase != "closed")
    @rule(user=st.sampled_from(["bob", "bob", "bob", "alice"]), right=st.sampled_from([True, True, True, False]))
    def authenticate(self, user: str, right: bool) -> None:
        password = USERS[user] if right else "wrong"
        got = _drive(self.gate, _request(36, 2, {"auth_bytes": f"\0{user}\0{password}".encode()}))
        want: Outcome
        if self.phase in ("handshake", "bad_mechanism"):
            want = Outcome("close")
        elif self.phase == "done":
            want = Outcome("expired") if self._expired() else Outcome("answer", Errors.ILLEGAL_SASL_STATE)
        elif self.mechanism != "PLAIN" or not right:  # a PLAIN token is no SCRAM client-first
            want = Outcome("answer", Errors.SASL_AUTHENTICATION_FAILED, closes=True)
        elif self.previous_principal is not None and self.previous_principal != f"User:{user}":
            want = Outcome("answer", Errors.SASL_AUTHENTICATION_FAILED, closes=True)  # no change of principal
        else:
            self.phase, self.principal, self.previous_principal = "done", f"User:{user}", None
            self.expires = self.clock.t + self.reauth_ms / 1000 if self.reauth_ms else None
            want = Outcome("answer", Errors.NONE, lifetime_ms=self.reauth_ms)
        self._check(got, want)

    @precondition(lambda self: self.phase != "closed")
    @rule(
        mechanism=st.sampled_from(["PLAIN", "PLAIN", "PLAIN", "SCRAM-SHA-512"]),
        user=st.sampled_from(["bob", "bob", "bob", "alice"]),
        right=st.sampled_from([True, True, True, False]),
    )
    def log_in(self, mechanism: str, user: str, right: bool) -> None:
        """A handshake and its SaslAuthenticate, as a client sends them (a
        first authentication, or a re-authentication): the two steps
        above in one rule, so that runs reach deep states."""
        self.handshake(mechanism)
        if self.phase != "closed":
            self.authenticate(user, right)

    @invariant()
    def deadline_only_while_authenticating(self) -> None:
        if self.phase == "closed":
            return
        assert (self.gate.deadline is None) == (self.phase == "done"), (self.gate.deadline, self.phase)
        if self.phase == "done":
            assert self.gate.principal == self.principal and self.gate.session_expires == self.expires


ReauthMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_reauthentication_follows_kafkas_rules = ReauthMachine.TestCase


def test_the_one_a_second_limit_is_kafkas() -> None:
    assert REAUTH_INTERVAL_MIN_S == 1.0


@pytest.mark.parametrize("bad", [-1, 2**31, 1.5, True])
def test_a_bad_connections_max_reauth_ms_is_refused(bad: object) -> None:
    with pytest.raises(ListenerConfigError, match=r"connections\.max\.reauth\.ms"):
        ListenerSecurity(connections_max_reauth_ms=bad)  # type: ignore[arg-type]


def test_describe_configs_shows_connections_max_reauth_ms() -> None:
    assert ListenerSecurity().kafka_configs() == {"connections.max.reauth.ms": "0"}
    assert ListenerSecurity(connections_max_reauth_ms=9000).kafka_configs() == {"connections.max.reauth.ms": "9000"}
