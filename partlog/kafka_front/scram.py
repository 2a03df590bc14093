"""SASL servers for the Kafka listener, sans-IO: SCRAM-SHA-256 and
SCRAM-SHA-512 (RFC 5802, RFC 7677) and PLAIN (RFC 4616), as Kafka's
ScramSaslServer and PlainSaslServer.

A server is fed the client's tokens one at a time (``step``) and returns
the token to send back; a bad token raises :class:`SaslFailure` and the
exchange is over (the listener answers SASL_AUTHENTICATION_FAILED and
closes the connection).  Randomness comes in as a value (the server nonce)
so tests replay an exchange exactly.

Credentials are SCRAM's (RFC 5802 section 3): a salt, an iteration count,
the stored key and the server key, never the password.  PLAIN checks a
password against the same credential (deriving with its salt and
iterations), so there is one credential store.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

# Kafka's ScramMechanism: the hash and the least iteration count it takes.
HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_ITERATIONS_MIN = 4096
SCRAM_ITERATIONS_MAX = 16_384  # Kafka's limit too (KIP-554)
# A SASL token larger than this fails the exchange: SCRAM's messages are a
# name, two nonces and a proof (a few hundred bytes); PLAIN's two names and
# a password.  Kafka bounds them at sasl.server.max.receive.size (512 KiB)
# for every mechanism; none of these needs more than this.
SASL_TOKEN_BYTES_MAX = 4096
NAME_CHARS_MAX = 256
_ATTR = re.compile(r"^[a-zA-Z]=")


class SaslFailure(Exception):
    """The client failed authentication; the message goes to the client
    (Kafka's SaslAuthenticationException), so it says no more than Kafka's."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the cluster keeps for one user and mechanism."""

    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_password(cls, mechanism: str, password: str, salt: bytes, iterations: int) -> ScramCredential:
        salted = salted_password(mechanism, password.encode(), salt, iterations)
        algo = HASHES[mechanism]
        client_key = hmac.digest(salted, b"Client Key", algo)
        return cls(
            mechanism,
            salt,
            iterations,
            hashlib.new(algo, client_key).digest(),
            hmac.digest(salted, b"Server Key", algo),
        )

    def password_matches(self, password: str) -> bool:
        """Whether ``password`` derives this credential (PLAIN's check)."""
        other = ScramCredential.from_password(self.mechanism, password, self.salt, self.iterations)
        return hmac.compare_digest(other.stored_key, self.stored_key)


def salted_password(mechanism: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    if mechanism not in HASHES:
        raise ValueError(f"not a SCRAM mechanism: {mechanism!r}")
    if not SCRAM_ITERATIONS_MIN <= iterations <= SCRAM_ITERATIONS_MAX:
        raise ValueError(f"{mechanism} iterations must be in [{SCRAM_ITERATIONS_MIN}, {SCRAM_ITERATIONS_MAX}]")
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password, salt, iterations)


class CredentialLookup(Protocol):
    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None: ...


class NoCredentials:
    """No users: every SASL exchange fails."""

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return None


class StaticCredentials:
    """Credentials held in memory, by (user, mechanism)."""

    def __init__(self, creds: dict[tuple[str, str], ScramCredential] | None = None) -> None:
        self.creds = dict(creds or {})

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.creds.get((user, mechanism))


class SaslServer(Protocol):
    mechanism: str

    def step(self, token: bytes) -> bytes:
        """The answer to the client's next token; SaslFailure ends the exchange."""
        ...

    @property
    def user(self) -> str | None:
        """The authenticated user, once complete; None before."""
        ...


def _check_size(token: bytes) -> None:
    if len(token) > SASL_TOKEN_BYTES_MAX:
        raise SaslFailure(f"Authentication failed: SASL token of {len(token)} bytes > {SASL_TOKEN_BYTES_MAX}")


class PlainServer:
    """PLAIN: one token ``authzid NUL authcid NUL password``."""

    mechanism = "PLAIN"

    def __init__(self, credentials: CredentialLookup) -> None:
        self._credentials = credentials
        self._user: str | None = None
        self._done = False

    @property
    def user(self) -> str | None:
        return self._user

    def step(self, token: bytes) -> bytes:
        if self._done:
            raise SaslFailure("Authentication failed: PLAIN takes one message")
        self._done = True
        _check_size(token)
        try:
            parts = token.decode("utf-8").split("\0")
        except UnicodeDecodeError:
            raise SaslFailure("Authentication failed: invalid SASL/PLAIN response: not UTF-8") from None
        if len(parts) != 3:
            raise SaslFailure("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, user, password = parts
        if not user:
            raise SaslFailure("Authentication failed: username not specified")
        if not password:
            raise SaslFailure("Authentication failed: password not specified")
        if authzid and authzid != user:
            raise SaslFailure(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            cred = self._credentials.scram_credential(user, mechanism)
            if cred is not None:
                if cred.password_matches(password):
                    self._user = user
                    return b""
                break
        raise SaslFailure("Authentication failed: Invalid username or password")


class ScramServer:
    """One SCRAM exchange: client-first, server-first, client-final,
    server-final.  ``nonce`` is the server's half of the nonce (printable,
    no comma), drawn by the caller."""

    def __init__(self, mechanism: str, credentials: CredentialLookup, nonce: str) -> None:
        if mechanism not in HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism!r}")
        if not nonce or "," in nonce or not nonce.isprintable():
            raise ValueError("the server nonce must be printable, without a comma")
        self.mechanism = mechanism
        self._algo = HASHES[mechanism]
        self._credentials = credentials
        self._server_nonce = nonce
        self._state = "first"
        self._user: str | None = None
        self._cred: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2 = ""

    @property
    def user(self) -> str | None:
        return self._user if self._state == "done" else None

    def step(self, token: bytes) -> bytes:
        state, self._state = self._state, "failed"  # any exception leaves it failed
        _check_size(token)
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure("Authentication failed: SCRAM message is not UTF-8") from None
        if state == "first":
            out = self._client_first(text)
            self._state = "final"
            return out
        if state == "final":
            out = self._client_final(text)
            self._state = "done"
            return out
        raise SaslFailure(f"Authentication failed: unexpected SCRAM message in state {state}")

    def _client_first(self, text: str) -> bytes:
        # gs2-header: "n,," or "y,," (no channel binding; Kafka refuses "p=").
        # An authzid ("a=...") must be the user itself, as Kafka checks.
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            raise SaslFailure("Authentication failed: invalid SCRAM client first message (gs2 header)")
        authzid = parts[1]
        if authzid and not authzid.startswith("a="):
            raise SaslFailure("Authentication failed: invalid SCRAM client first message (authzid)")
        bare = parts[2]
        attrs = _attributes(bare, "client first")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
            raise SaslFailure("Authentication failed: invalid SCRAM client first message")
        # Extensions after r= (Kafka's tokenauth) are not served: refused.
        if any(k != "n" and k != "r" for k, _ in attrs) or len(attrs) != 2:
            raise SaslFailure("Authentication failed: SCRAM extensions are not supported")
        user = _sasl_name(attrs[0][1])
        client_nonce = attrs[1][1]
        if not client_nonce or not client_nonce.isprintable():
            raise SaslFailure("Authentication failed: invalid SCRAM client nonce")
        if authzid and _sasl_name(authzid[2:]) != user:
            raise SaslFailure("Authentication failed: Invalid user credentials")
        cred = self._credentials.scram_credential(user, self.mechanism)
        if cred is None:
            raise SaslFailure("Authentication failed: Invalid user credentials")
        self._user, self._cred = user, cred
        self._gs2 = f"{parts[0]},{authzid},"
        self._client_first_bare = bare
        self._nonce = client_nonce + self._server_nonce
        salt = base64.b64encode(cred.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={cred.iterations}"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        attrs = _attributes(text, "client final")
        if len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r" or attrs[-1][0] != "p":
            raise SaslFailure("Authentication failed: invalid SCRAM client final message")
        cred = self._cred
        assert cred is not None
        try:
            binding = base64.b64decode(attrs[0][1], validate=True)
            proof = base64.b64decode(attrs[-1][1], validate=True)
        except ValueError:
            raise SaslFailure("Authentication failed: invalid SCRAM client final message (base64)") from None
        if binding != self._gs2.encode():
            raise SaslFailure("Authentication failed: invalid SCRAM channel binding")
        if attrs[1][1] != self._nonce:
            raise SaslFailure("Authentication failed: Invalid client nonce in the final client message.")
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(cred.stored_key, auth_message, self._algo)
        if len(proof) != len(signature):
            raise SaslFailure("Authentication failed: Invalid client final message")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._algo, client_key).digest(), cred.stored_key):
            raise SaslFailure("Authentication failed: Invalid user credentials")
        server_signature = hmac.digest(cred.server_key, auth_message, self._algo)
        return b"v=" + base64.b64encode(server_signature)


def _attributes(text: str, what: str) -> list[tuple[str, str]]:
    out = []
    for item in text.split(","):
        if not _ATTR.match(item):
            raise SaslFailure(f"Authentication failed: invalid SCRAM {what} message")
        out.append((item[0], item[2:]))
    return out


def _sasl_name(raw: str) -> str:
    """RFC 5802's saslname: "=2C" is a comma, "=3D" an equals sign."""
    if len(raw) > NAME_CHARS_MAX or not raw:
        raise SaslFailure("Authentication failed: invalid SCRAM user name")
    if re.search(r"=(?!2C|3D)", raw):
        raise SaslFailure("Authentication failed: invalid SCRAM user name (escape)")
    return raw.replace("=2C", ",").replace("=3D", "=")


def new_server(mechanism: str, credentials: CredentialLookup, nonce: Callable[[], str]) -> SaslServer:
    if mechanism == "PLAIN":
        return PlainServer(credentials)
    return ScramServer(mechanism, credentials, nonce())


__all__ = [
    "HASHES",
    "MECHANISMS",
    "SASL_TOKEN_BYTES_MAX",
    "SCRAM_ITERATIONS_MAX",
    "SCRAM_ITERATIONS_MIN",
    "CredentialLookup",
    "NoCredentials",
    "PlainServer",
    "SaslFailure",
    "SaslServer",
    "ScramCredential",
    "ScramServer",
    "StaticCredentials",
    "new_server",
    "salted_password",
]
