"""The SSL and SASL scenarios of ``scripts/conformance`` (partlog.tools.conformance):
what trivup, the suite's own cluster tool, sets up for them, made here.

* ``ssl``: a test CA, a broker certificate for 127.0.0.1 and a client's
  key and certificate in every encoding the suite's 0097 reads (PEM, DER,
  PKCS#12), in the ``SSL_*`` variables trivup's LibrdkafkaTestApp sets; the
  brokers' only Kafka listener is SSL with ``ssl.client.auth=required``.
* ``sasl``: a SASL_PLAINTEXT listener (SCRAM-SHA-512, sessions of
  ``connections.max.reauth.ms`` = :data:`REAUTH_MS`) beside a PLAINTEXT
  one, and a SCRAM user made through the PLAINTEXT listener with Kafka's
  AlterUserScramCredentials, as a Kafka operator would; the tests get the
  SASL listener and that user's name and password in ``test.conf``.

Certificates are made with the openssl command (partlog.tools.loopback_certs);
they live one day, in the run's log directory.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

from partlog.tools.loopback_certs import RSA_KEY, CertError, make_ca, make_signed, openssl

# The protocol of the listener each secure scenario's tests connect to.
SECURE_SCENARIOS = {"ssl": "SSL", "sasl": "SASL_PLAINTEXT"}
SASL_MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 4096  # Kafka's least
SCRAM_USER = "conformance"
# The sasl scenario's connections.max.reauth.ms: 0142 re-authenticates its
# clients once within each sub-test (each runs 1.2 times this long), and
# every other SASL test sees its sessions renewed as Kafka's would be.
REAUTH_MS = 10_000
# How long the Kafka admin call that makes the user may take.
USER_CREATE_TIMEOUT_S = 30.0


class SecuritySetupError(Exception):
    """A certificate or the SCRAM user could not be made (one line)."""


@dataclass
class Secure:
    """One secure scenario: the cluster's extra flags, the test.conf lines
    beyond the bootstrap servers, the runner's extra environment, and the
    listener its tests use."""

    listener: str
    cluster_flags: tuple[str, ...] = ()
    conf_lines: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    # sasl: the user to make once the cluster is up.
    user: tuple[str, str] | None = None


def make_suite_certs(d: Path, password: str) -> dict[str, str]:
    """A CA, an unused second CA, a broker certificate and a client's key and
    certificate under ``d``; the ``SSL_*`` variables naming them (trivup's
    names: ``SSL_pkcs``, ``SSL_pub_pem``, ``SSL_priv_der``, ...)."""
    try:
        _make_suite_certs(d, password)
    except CertError as e:
        raise SecuritySetupError(str(e)) from None
    return {
        "SSL_ca_pem": str(d / "ca.pem"),
        "SSL_ca_der": str(d / "ca.der"),
        "SSL_all_cas_pem": str(d / "all-cas.pem"),
        "SSL_unused_ca_pem": str(d / "unused-ca.pem"),
        "SSL_pub_pem": str(d / "client.pem"),
        "SSL_pub_der": str(d / "client.der"),
        "SSL_priv_pem": str(d / "client.key"),
        "SSL_priv_der": str(d / "client-key.der"),
        "SSL_pkcs": str(d / "client.p12"),
        "SSL_password": password,
        "SSL_client_auth": "required",
    }


def _make_suite_certs(d: Path, password: str) -> None:
    for ca in ("ca", "unused-ca"):
        make_ca(d, f"{ca}.pem", f"{ca}.key", f"partlog conformance {ca}", key_spec=RSA_KEY)
    for name, serial in (("broker", 2), ("client", 3)):
        usage = "server" if name == "broker" else "client"
        make_signed(d, f"{name}.pem", f"{name}-plain.key", f"partlog conformance {name}", ca=("ca.pem", "ca.key"),
                    serial=serial, usage=usage, key_spec=RSA_KEY)  # fmt: skip
    # The client's key as trivup makes it: PEM encrypted with the password
    # (ssl.key.password), DER, and a PKCS#12 keystore holding the key, its
    # certificate and the CA (0097 reads the CA from it too).
    openssl(d, "pkey", "-in", "client-plain.key", "-aes256", "-passout", f"pass:{password}", "-out", "client.key")
    openssl(d, "pkey", "-in", "client-plain.key", "-outform", "DER", "-out", "client-key.der")
    openssl(d, "x509", "-in", "client.pem", "-outform", "DER", "-out", "client.der")
    openssl(d, "x509", "-in", "ca.pem", "-outform", "DER", "-out", "ca.der")
    openssl(d, "pkcs12", "-export", "-inkey", "client-plain.key", "-in", "client.pem", "-certfile", "ca.pem",
             "-passout", f"pass:{password}", "-out", "client.p12")  # fmt: skip
    (d / "all-cas.pem").write_text((d / "ca.pem").read_text() + (d / "unused-ca.pem").read_text())


def prepare(scenario: str, d: Path) -> Secure:
    """The secure scenario's certificates or user (made under ``d``) and
    what the cluster and the tests need of them."""
    if scenario == "ssl":
        password = secrets.token_hex(8)
        env = make_suite_certs(d, password)
        return Secure(
            listener="SSL",
            cluster_flags=(
                "--kafka-protocols=SSL",
                f"--kafka-ssl-cert={d / 'broker.pem'}",
                f"--kafka-ssl-key={d / 'broker-plain.key'}",
                f"--kafka-ssl-ca={d / 'ca.pem'}",
                "--kafka-ssl-client-auth=required",
            ),
            conf_lines=(
                "security.protocol=SSL",
                f"ssl.ca.location={env['SSL_ca_pem']}",
                f"ssl.certificate.location={env['SSL_pub_pem']}",
                f"ssl.key.location={env['SSL_priv_pem']}",
                f"ssl.key.password={password}",
            ),
            env=env,
        )
    if scenario == "sasl":
        password = secrets.token_hex(12)
        return Secure(
            listener="SASL_PLAINTEXT",
            cluster_flags=(
                "--kafka-protocols=SASL_PLAINTEXT,PLAINTEXT",
                f"--kafka-sasl-mechanisms={SASL_MECHANISM}",
                f"--kafka-connections-max-reauth-ms={REAUTH_MS}",
            ),
            conf_lines=(
                "security.protocol=SASL_PLAINTEXT",
                f"sasl.mechanisms={SASL_MECHANISM}",
                f"sasl.username={SCRAM_USER}",
                f"sasl.password={password}",
            ),
            user=(SCRAM_USER, password),
        )
    raise ValueError(f"no secure scenario {scenario!r}")


def make_user(plaintext_bootstrap: str, user: str, password: str) -> None:
    """The SCRAM user, made through the cluster's PLAINTEXT listener with
    Kafka's AlterUserScramCredentials (confluent-kafka's admin client)."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": plaintext_bootstrap, "broker.address.family": "v4"})
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS), password.encode()
    )
    try:
        for f in admin.alter_user_scram_credentials([upsert]).values():
            f.result(USER_CREATE_TIMEOUT_S)
    except Exception as e:  # the client's KafkaException: one line
        raise SecuritySetupError(f"AlterUserScramCredentials for {user} at {plaintext_bootstrap}: {e}") from None


def secure_bootstrap(bootstraps: dict[str, str], secure: Secure) -> str:
    """The secure listener's bootstrap servers (of ``bootstraps``, each
    listener's by name), once the scenario's user, if any, is made."""
    bootstrap = bootstraps.get(secure.listener)
    if bootstrap is None:
        raise SecuritySetupError(f"partlog cluster printed no {secure.listener} bootstrap servers")
    if secure.user is not None:
        plaintext = bootstraps.get("PLAINTEXT")
        if plaintext is None:
            raise SecuritySetupError("partlog cluster printed no PLAINTEXT bootstrap servers to make the user on")
        make_user(plaintext, *secure.user)
    return bootstrap


__all__ = [
    "SECURE_SCENARIOS",
    "Secure",
    "SecuritySetupError",
    "make_suite_certs",
    "make_user",
    "prepare",
    "secure_bootstrap",
]
