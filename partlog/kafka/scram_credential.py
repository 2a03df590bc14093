"""SCRAM credentials (RFC 5802 section 3), as Kafka keeps them: a salt, an
iteration count, the stored key and the server key, never the password.

Kafka's mechanisms and their numbers on the wire (KIP-554's
AlterUserScramCredentials and DescribeUserScramCredentials), the least and
largest iteration counts Kafka accepts, and the derivations from a
password or from a salted password (what KIP-554's clients send)."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# KIP-554's ScramMechanism byte.
MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES = {v: k for k, v in MECHANISM_IDS.items()}
SCRAM_ITERATIONS_MIN = 4096
SCRAM_ITERATIONS_MAX = 16_384
SALT_BYTES_MAX = 1024
USER_CHARS_MAX = 256


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the cluster keeps for one user and mechanism."""

    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_salted_password(cls, mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
        algo = HASHES[mechanism]
        client_key = hmac.digest(salted, b"Client Key", algo)
        return cls(
            mechanism,
            salt,
            iterations,
            hashlib.new(algo, client_key).digest(),
            hmac.digest(salted, b"Server Key", algo),
        )

    @classmethod
    def from_password(cls, mechanism: str, password: str, salt: bytes, iterations: int) -> ScramCredential:
        return cls.from_salted_password(
            mechanism, salted_password(mechanism, password.encode(), salt, iterations), salt, iterations
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


__all__ = [
    "HASHES",
    "MECHANISM_IDS",
    "MECHANISM_NAMES",
    "SALT_BYTES_MAX",
    "SCRAM_ITERATIONS_MAX",
    "SCRAM_ITERATIONS_MIN",
    "USER_CHARS_MAX",
    "ScramCredential",
    "salted_password",
]
