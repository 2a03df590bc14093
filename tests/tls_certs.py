"""Test certificates for TLS on loopback: a CA, a server certificate for
127.0.0.1 and a client certificate, made with the openssl CLI (the
``cryptography`` package is not a dependency), and the SSL contexts built
from them.  The ``certs`` fixture (tests/conftest.py) makes them once per
session."""

from __future__ import annotations

import ssl
import subprocess
import textwrap
from pathlib import Path


def make_certs(d: Path) -> None:
    """Write ca.crt/key, server.crt/key and client.crt/key into ``d``."""
    (d / "openssl.cnf").write_text(
        textwrap.dedent(
            """
            [req]
            distinguished_name = dn
            [dn]
            [ca_ext]
            basicConstraints = critical, CA:TRUE
            keyUsage = critical, keyCertSign, cRLSign
            subjectKeyIdentifier = hash
            [server_ext]
            basicConstraints = critical, CA:FALSE
            keyUsage = critical, digitalSignature
            extendedKeyUsage = serverAuth
            subjectAltName = IP:127.0.0.1
            subjectKeyIdentifier = hash
            authorityKeyIdentifier = keyid
            [client_ext]
            basicConstraints = critical, CA:FALSE
            keyUsage = critical, digitalSignature
            extendedKeyUsage = clientAuth
            subjectKeyIdentifier = hash
            authorityKeyIdentifier = keyid
            """
        )
    )

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl(
        "req",
        "-x509",
        "-config",
        "openssl.cnf",
        "-extensions",
        "ca_ext",
        *key,
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=partlog test CA",
    )
    for name, serial in (("server", "2"), ("client", "3")):
        openssl(
            "req",
            "-new",
            "-config",
            "openssl.cnf",
            *key,
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            f"/CN=partlog test {name}",
        )
        openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-set_serial",
            serial,
            "-days",
            "2",
            "-extfile",
            "openssl.cnf",
            "-extensions",
            f"{name}_ext",
            "-out",
            f"{name}.crt",
        )


def server_context(certs: Path, *, mutual: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(certs / "server.crt", certs / "server.key")
    if mutual:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(certs / "ca.crt")
    return ctx


def client_context(certs: Path, *, with_cert: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=certs / "ca.crt")
    if with_cert:
        ctx.load_cert_chain(certs / "client.crt", certs / "client.key")
    return ctx
