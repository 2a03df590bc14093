"""A TLS peer's principal: its certificate's subject as Kafka writes it
(RFC 2253, the last RDN first, as Java's X500Principal.getName()), mapped
by Kafka's ``ssl.principal.mapping.rules`` (Kafka's SslPrincipalMapper).

One broker has one set of rules, as in Kafka: the Kafka listeners
(``partlog.kafka_front``) and the inter-broker RPC (``partlog.rpc``) both
name a certificate's holder with :func:`cert_principal`, so a broker
certificate is the same principal wherever ACLs or ``super.users`` name it.

Rules are comma- or newline-separated, tried in order, the first whose
pattern matches the whole subject wins:

* ``DEFAULT``: the subject unchanged;
* ``RULE:pattern/replacement/``, optionally ending ``L`` (lower case) or
  ``U`` (upper case): every match of the pattern replaced, ``$1`` naming
  the pattern's first group, as Java's ``String.replaceAll``.

A subject no rule matches fails the connection's authentication, as in
Kafka.  Pure functions; nothing here does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Kafka's KafkaPrincipal.ANONYMOUS: a peer without a certificate (PLAINTEXT,
# or TLS without a client certificate).
ANONYMOUS = "User:ANONYMOUS"

# Kafka's RULE_SPLITTER and RULE_PARSER: a pattern and a replacement may
# contain escaped slashes.
_RULE = re.compile(r"\s*(DEFAULT|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)[^,\n]*?|([^,\n]*?))\s*(?:[,\n]\s*|$)")
_JAVA_GROUP = re.compile(r"\\(.)|\$(\d)")
# Short names Java's X500Principal uses (RFC 2253 plus its extras), by the
# long names Python's ssl module reports.
_SHORT = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
# Characters RFC 2253 escapes anywhere in a value.
_SPECIAL = set(',+"\\<>;')


class NoMatchingRule(ValueError):
    """No rule matches the subject: the client is not authenticated."""


@dataclass(frozen=True, slots=True)
class Rule:
    default: bool
    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    case: str = ""  # "", "L" or "U"

    def apply(self, subject: str) -> str | None:
        if self.default:
            return subject
        assert self.pattern is not None
        if self.pattern.fullmatch(subject) is None:
            return None
        out = self.pattern.sub(self.replacement, subject)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


@dataclass(frozen=True, slots=True)
class PrincipalMapper:
    rules: tuple[Rule, ...]

    @classmethod
    def parse(cls, text: str) -> PrincipalMapper:
        """Rules from Kafka's syntax; ValueError names a malformed rule."""
        rules: list[Rule] = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise ValueError(f"ssl.principal.mapping.rules: cannot parse {text[pos:]!r}")
            pos = m.end()
            if m.group(5) is not None:
                raise ValueError(f"ssl.principal.mapping.rules: invalid rule {m.group(5)!r}")
            if m.group(1) == "DEFAULT":
                rules.append(Rule(True))
                continue
            try:
                pattern = re.compile(m.group(2))
            except re.error as e:
                raise ValueError(f"ssl.principal.mapping.rules: pattern {m.group(2)!r}: {e}") from None
            rules.append(Rule(False, pattern, _python_replacement(m.group(3)), m.group(4)))
        if not rules:
            rules.append(Rule(True))
        return cls(tuple(rules))

    def name(self, subject: str) -> str:
        """The principal's name for ``subject``; NoMatchingRule when none applies."""
        for rule in self.rules:
            out = rule.apply(subject)
            if out is not None:
                return out
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to {subject!r}")


def _python_replacement(java: str) -> str:
    """Java's replacement syntax (``$1``, ``\\$``) as re.sub's (``\\g<1>``)."""

    def one(m: re.Match[str]) -> str:
        if m.group(2) is not None:
            return f"\\g<{m.group(2)}>"
        return m.group(1).replace("\\", "\\\\")

    return _JAVA_GROUP.sub(one, java)


def rfc2253(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """The subject of ``ssl.SSLSocket.getpeercert()`` as X500Principal.getName()
    writes it: RDNs last first, attributes of one RDN joined by ``+``."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_SHORT.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


def cert_principal(mapper: PrincipalMapper, cert: Mapping[str, Any] | None) -> str:
    """The principal of a TLS peer whose certificate is ``cert`` (as
    ``SSLObject.getpeercert()`` returns it): ``User:`` and its subject
    mapped by ``mapper``; :data:`ANONYMOUS` without a certificate or
    subject.  NoMatchingRule when no rule applies (the caller fails the
    connection's authentication, as Kafka's SslAuthenticator does)."""
    if not cert or not cert.get("subject"):
        return ANONYMOUS
    return "User:" + mapper.name(rfc2253(cert["subject"]))


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in _SPECIAL else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


__all__ = ["ANONYMOUS", "NoMatchingRule", "PrincipalMapper", "Rule", "cert_principal", "rfc2253"]
