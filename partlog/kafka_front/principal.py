"""A TLS client's principal on the Kafka listeners: the rules and the
subject's form live one floor down (:mod:`partlog.kafka.principal_rules`),
shared with the inter-broker RPC; this module names them for the front end."""

from partlog.kafka.principal_rules import ANONYMOUS, NoMatchingRule, PrincipalMapper, Rule, cert_principal, rfc2253

__all__ = ["ANONYMOUS", "NoMatchingRule", "PrincipalMapper", "Rule", "cert_principal", "rfc2253"]
