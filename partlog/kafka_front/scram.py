"""SASL servers for the Kafka listener, sans-IO: SCRAM-SHA-256 and
SCRAM-SHA-512 (RFC 5802, RFC 7677) and PLAIN (RFC 4616), as Kafka's
ScramSaslServer and PlainSaslServer.

A server is fed the client's tokens one at a time and returns the token
to send back; between reading the user's name and answering, the caller
looks the user's credential up (an await on the cluster metadata, outside
this module).  A bad token raises :class:`SaslFailure` and the exchange
is over (the listener answers SASL_AUTHENTICATION_FAILED and closes the
connection).  Randomness comes in as a value (the server nonce)
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
from typing import Protocol

from partlog.kafka.scram_credential import HASHES, USER_CHARS_MAX, ScramCredential

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# A SASL token larger than this fails the exchange: SCRAM's messages are a
# name, two nonces and a proof (a few hundred bytes); PLAIN's two names and
# a password.  Kafka bounds them at sasl.server.max.receive.size (512 KiB)
# for every mechanism; none of these needs more than this.
SASL_TOKEN_BYTES_MAX = 4096
_ATTR = re.compile(r"^[a-zA-Z]=")


class SaslFailure(Exception):
    """The client failed authentication; the message goes to the client
    (Kafka's SaslAuthenticationException), so it says no more than Kafka's."""


class CredentialLookup(Protocol):
    """Where the listener finds a user's credential (the cluster metadata)."""

    async def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None: ...


class NoCredentials:
    """No users: every SASL exchange fails."""

    async def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return None


class StaticCredentials:
    """Credentials held in memory, by (user, mechanism)."""

    def __init__(self, creds: dict[tuple[str, str], ScramCredential] | None = None) -> None:
        self.creds = dict(creds or {})

    async def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.creds.get((user, mechanism))


def _check_size(token: bytes) -> None:
    if len(token) > SASL_TOKEN_BYTES_MAX:
        raise SaslFailure(f"Authentication failed: SASL token of {len(token)} bytes > {SASL_TOKEN_BYTES_MAX}")


class PlainServer:
    """PLAIN: one token ``authzid NUL authcid NUL password``.  ``read`` it,
    look the user's credential up, then ``check`` (a key derivation: run it
    off the event loop)."""

    mechanism = "PLAIN"

    def __init__(self) -> None:
        self.user: str | None = None
        self._read = False

    def read(self, token: bytes) -> tuple[str, str]:
        """The user and the password; SaslFailure when malformed."""
        if self._read:
            raise SaslFailure("Authentication failed: PLAIN takes one message")
        self._read = True
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
        return user, password

    def check(self, user: str, password: str, cred: ScramCredential | None) -> None:
        if cred is None or not cred.password_matches(password):
            raise SaslFailure("Authentication failed: Invalid username or password")
        self.user = user


class ScramServer:
    """One SCRAM exchange: ``client_first`` (the user's name), then
    ``server_first`` with that user's credential, then ``client_final``
    (server-final).  ``nonce`` is the server's half of the nonce
    (printable, no comma), drawn by the caller."""

    def __init__(self, mechanism: str, nonce: str) -> None:
        if mechanism not in HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism!r}")
        if not nonce or "," in nonce or not nonce.isprintable():
            raise ValueError("the server nonce must be printable, without a comma")
        self.mechanism = mechanism
        self._algo = HASHES[mechanism]
        self._server_nonce = nonce
        self._state = "first"
        self._user = ""
        self._cred: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2 = ""

    @property
    def user(self) -> str | None:
        return self._user if self._state == "done" else None

    @property
    def started(self) -> bool:
        """Whether the client-first message was taken."""
        return self._state != "first"

    def _expect(self, state: str) -> None:
        if self._state != state:
            self._state = "failed"
            raise SaslFailure("Authentication failed: unexpected SCRAM message")
        self._state = "failed"  # until the step succeeds

    def client_first(self, token: bytes) -> str:
        """The user the client names; SaslFailure when malformed."""
        self._expect("first")
        text = _text(token)
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
        # Extensions after r= (Kafka's tokenauth) are not served: refused.
        if len(attrs) != 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
            raise SaslFailure("Authentication failed: invalid SCRAM client first message")
        user = _sasl_name(attrs[0][1])
        client_nonce = attrs[1][1]
        if not client_nonce or not client_nonce.isprintable():
            raise SaslFailure("Authentication failed: invalid SCRAM client nonce")
        if authzid and _sasl_name(authzid[2:]) != user:
            raise SaslFailure("Authentication failed: Invalid user credentials")
        self._user = user
        self._gs2 = f"{parts[0]},{authzid},"
        self._client_first_bare = bare
        self._nonce = client_nonce + self._server_nonce
        self._state = "lookup"
        return user

    def server_first(self, cred: ScramCredential | None) -> bytes:
        self._expect("lookup")
        if cred is None or cred.mechanism != self.mechanism:
            raise SaslFailure("Authentication failed: Invalid user credentials")
        self._cred = cred
        salt = base64.b64encode(cred.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={cred.iterations}"
        self._state = "final"
        return self._server_first.encode()

    def client_final(self, token: bytes) -> bytes:
        self._expect("final")
        text = _text(token)
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
        self._state = "done"
        return b"v=" + base64.b64encode(hmac.digest(cred.server_key, auth_message, self._algo))


def _text(token: bytes) -> str:
    _check_size(token)
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslFailure("Authentication failed: SCRAM message is not UTF-8") from None


def _attributes(text: str, what: str) -> list[tuple[str, str]]:
    out = []
    for item in text.split(","):
        if not _ATTR.match(item):
            raise SaslFailure(f"Authentication failed: invalid SCRAM {what} message")
        out.append((item[0], item[2:]))
    return out


def _sasl_name(raw: str) -> str:
    """RFC 5802's saslname: "=2C" is a comma, "=3D" an equals sign."""
    if len(raw) > USER_CHARS_MAX or not raw:
        raise SaslFailure("Authentication failed: invalid SCRAM user name")
    if re.search(r"=(?!2C|3D)", raw):
        raise SaslFailure("Authentication failed: invalid SCRAM user name (escape)")
    return raw.replace("=2C", ",").replace("=3D", "=")


__all__ = [
    "MECHANISMS",
    "SASL_TOKEN_BYTES_MAX",
    "CredentialLookup",
    "NoCredentials",
    "PlainServer",
    "SaslFailure",
    "ScramServer",
    "StaticCredentials",
]
