"""The shared RPC secret, read from a file: :func:`read_secret_file`.

Every process of a cluster (brokers, the controller, walmgr, the CLIs) reads
its secret here, so one rule holds for all: fail closed.  A missing,
unreadable, empty or short file raises :class:`SecretFileError` naming the
file; only "no file given" means "no authentication".
"""

from __future__ import annotations

# The shortest shared secret accepted: 16 bytes (128 bits) is what HMAC
# needs to resist guessing; a shorter one is a password, not a key.
SECRET_BYTES_MIN = 16
# A secret file is a key, not a document: refuse to read a large file.
SECRET_FILE_BYTES_MAX = 4096


class SecretFileError(ValueError):
    """The secret file is missing, unreadable, empty or too short: a
    configuration error (exit status 2 in the CLIs)."""

    exit_status = 2


def read_secret_file(path: str | None) -> bytes | None:
    """The shared RPC secret kept in ``path`` (surrounding whitespace
    dropped); None for no path (no authentication).

    Fail closed: an empty or whitespace-only file used to mean "no
    authentication"; now it, a secret shorter than ``SECRET_BYTES_MIN``
    bytes, or a file that cannot be read raise :class:`SecretFileError`
    naming the file."""
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            raw = f.read(SECRET_FILE_BYTES_MAX + 1)
    except OSError as e:
        raise SecretFileError(f"secret file {path}: {e.strerror or e}") from e
    if len(raw) > SECRET_FILE_BYTES_MAX:
        raise SecretFileError(f"secret file {path}: larger than {SECRET_FILE_BYTES_MAX} bytes")
    secret = raw.strip()
    if not secret:
        raise SecretFileError(f"secret file {path} is empty: refusing to run without authentication")
    if len(secret) < SECRET_BYTES_MIN:
        raise SecretFileError(
            f"secret file {path}: the secret has {len(secret)} bytes, at least {SECRET_BYTES_MIN} are needed"
        )
    return secret


__all__ = ["SECRET_BYTES_MIN", "SECRET_FILE_BYTES_MAX", "SecretFileError", "read_secret_file"]
