"""Where a broker's ACLs come from: the :class:`AclSource` contract, and the
change rules every source applies (:func:`apply_create`, :func:`apply_delete`).

A source holds the cluster's current :class:`~partlog.acl.authorizer.AclSet`
(``acls``, replaced as a whole on every change, so a decision never sees half
a change) and makes changes for CreateAcls and DeleteAcls.  The embedded
controller's source keeps them in its metadata and brokers long-poll it
(:mod:`partlog.controller.acls`); :class:`LocalAcls` keeps them in memory, for
a broker on a static cluster file and for tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from partlog.acl.authorizer import ACLS_MAX, AclSet
from partlog.acl.model import AclBinding, AclBindingFilter, invalid_binding

__all__ = ["AclSource", "LocalAcls", "apply_create", "apply_delete"]


class AclSource(Protocol):
    @property
    def acls(self) -> AclSet: ...

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[str | None]:
        """Per binding: None (created, or there already), or why it was
        refused (CreateAcls answers INVALID_REQUEST with it)."""
        ...

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        """Per filter, the ACLs it matched and that are now gone."""
        ...


def apply_create(acls: AclSet, bindings: Sequence[AclBinding]) -> tuple[list[str | None], list[AclBinding]]:
    """The answers to a CreateAcls of ``bindings`` and the bindings to add:
    each is validated apart (Kafka answers per creation); a set full at
    ``ACLS_MAX`` refuses the rest."""
    answers: list[str | None] = []
    added: list[AclBinding] = []
    size = len(acls)
    for b in bindings:
        why = invalid_binding(b)
        if why is None and b not in acls.bindings and b not in added:
            if size >= ACLS_MAX:
                why = f"the cluster holds {ACLS_MAX} ACLs, the most it may"
            else:
                added.append(b)
                size += 1
        answers.append(why)
    return answers, added


def apply_delete(acls: AclSet, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
    """Per filter, the ACLs it deletes (a binding two filters match is
    reported by both, as Kafka's)."""
    return [acls.select(f) if f.invalid() is None else [] for f in filters]


class LocalAcls:
    """ACLs in this process's memory only (not shared with other brokers)."""

    def __init__(self, bindings: Sequence[AclBinding] = ()) -> None:
        self.acls = AclSet(bindings)

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[str | None]:
        answers, added = apply_create(self.acls, bindings)
        if added:
            self.acls = self.acls.with_changes(added, ())
        return answers

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        gone = apply_delete(self.acls, filters)
        removed = [b for bs in gone for b in bs]
        if removed:
            self.acls = self.acls.with_changes((), removed)
        return gone
