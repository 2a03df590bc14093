"""Mutual-TLS contexts for partlog's RPC from three PEM files.

A broker, the controller and walmgr that share one CA, each with its own
certificate, know that the peer at the other end is one of the cluster's
processes: the shared secret authenticates a client to a server, mutual TLS
authenticates both ends and protects the stream (docs/security.md).  One
function builds both sides' contexts, so every process takes the same
three options (``tls_ca_file``, ``tls_cert_file``, ``tls_key_file``).
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass


class TlsConfigError(ValueError):
    """A TLS file is missing or unreadable, or the three are incomplete: a
    configuration error (exit status 2 in the CLIs)."""

    exit_status = 2


@dataclass(frozen=True, slots=True)
class TlsContexts:
    server: ssl.SSLContext  # requires and verifies the client's certificate
    client: ssl.SSLContext  # verifies the server's certificate and presents ours


def mutual_tls(ca_file: str, cert_file: str, key_file: str) -> TlsContexts | None:
    """Contexts for mutual TLS, or None when all three paths are empty.

    Giving some but not all of them is an error: a half-configured TLS that
    silently ran in plain text is what this refuses.  Raises
    :class:`TlsConfigError` naming the file that cannot be loaded.
    """
    given = {"ca": ca_file, "cert": cert_file, "key": key_file}
    if not any(given.values()):
        return None
    missing = [k for k, v in given.items() if not v]
    if missing:
        raise TlsConfigError(f"TLS needs a CA, a certificate and a key file; missing: {', '.join(missing)}")
    for what, path in (("CA", ca_file), ("certificate", cert_file), ("key", key_file)):
        # ssl's own errors do not say which file (FileNotFoundError without a name).
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            raise TlsConfigError(f"TLS {what} file {path}: not found or not readable")
    try:
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=ca_file)
        server.verify_mode = ssl.CERT_REQUIRED
        server.load_cert_chain(cert_file, key_file)
        client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
        client.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(f"TLS files ca={ca_file} cert={cert_file} key={key_file}: {e}") from e
    return TlsContexts(server, client)
