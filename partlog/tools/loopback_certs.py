"""Throwaway certificates for TLS on loopback, made with the openssl command:
a CA, and certificates it signs for a server at 127.0.0.1 or for a client.
``partlog bench kafka --security`` (partlog.tools.bench_kafka_security) and
scripts/conformance's ssl scenario (partlog.tools.conformance_security) use
them; they live one day."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

OPENSSL_CNF = """[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
"""
EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
RSA_KEY = ("-newkey", "rsa:2048", "-nodes")
DAYS = "1"


class CertError(RuntimeError):
    """openssl is missing or failed (one line)."""


def openssl(d: Path, *args: str) -> None:
    """One openssl command in ``d`` (its openssl.cnf: :func:`make_ca` writes it)."""
    if shutil.which("openssl") is None:
        raise CertError("the openssl command is needed to make TLS certificates")
    r = subprocess.run(["openssl", *args], cwd=d, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise CertError(f"openssl {args[0]} in {d}: {tail}")


def make_ca(d: Path, cert: str, key: str, cn: str, key_spec: tuple[str, ...] = EC_KEY) -> None:
    """A self-signed CA, ``cert`` and ``key`` (PEM) in ``d``."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "openssl.cnf").write_text(OPENSSL_CNF)
    openssl(d, "req", "-x509", "-config", "openssl.cnf", "-extensions", "ca", *key_spec, "-keyout", key,
            "-out", cert, "-days", DAYS, "-subj", f"/CN={cn}")  # fmt: skip


def make_signed(
    d: Path,
    cert: str,
    key: str,
    cn: str,
    *,
    ca: tuple[str, str],
    serial: int,
    usage: str = "server",
    key_spec: tuple[str, ...] = EC_KEY,
) -> None:
    """A certificate for ``usage`` (server: 127.0.0.1 and localhost; client)
    signed by ``ca`` (its certificate and key, made by :func:`make_ca` in
    ``d``), ``cert`` and its unencrypted ``key`` (PEM) in ``d``."""
    if usage not in ("server", "client"):
        raise ValueError(f"usage is server or client, got {usage!r}")
    csr = f"{cert}.csr"
    openssl(d, "req", "-new", "-config", "openssl.cnf", *key_spec, "-keyout", key, "-out", csr,
            "-subj", f"/CN={cn}")  # fmt: skip
    openssl(d, "x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-set_serial", str(serial),
            "-days", DAYS, "-extfile", "openssl.cnf", "-extensions", usage, "-out", cert)  # fmt: skip


__all__ = ["EC_KEY", "RSA_KEY", "CertError", "make_ca", "make_signed", "openssl"]
