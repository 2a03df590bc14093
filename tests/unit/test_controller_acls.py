"""The controller's ACLs: durable across a restart, versioned, and followed by
a broker's view through the long-poll."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from partlog.acl import AclBinding, AclBindingFilter, AclOperation, AclPermission, PatternType, ResourceType
from partlog.controller.acls import AclService, ControllerAcls
from partlog.rpc.methods import CONTROLLER_SCHEMAS

READ_T = AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:a", "*", AclOperation.READ, AclPermission.ALLOW)
DENY_G = AclBinding(ResourceType.GROUP, "g", PatternType.PREFIXED, "User:*", "*", AclOperation.ALL, AclPermission.DENY)
BAD = AclBinding(ResourceType.ANY, "t", PatternType.LITERAL, "User:a", "*", AclOperation.READ, AclPermission.ALLOW)


def _call(service: AclService) -> Any:
    handlers = service.handlers()

    async def call(method: str, body: Any, timeout_ms: int | None = None) -> Any:
        CONTROLLER_SCHEMAS[method].check(body, method)
        return await handlers[method](body)

    return call


def test_acls_persist_and_reach_brokers(tmp_path: Path) -> None:
    async def main() -> None:
        service = AclService(tmp_path / "acls")
        broker = ControllerAcls(_call(service))
        await broker.start()
        assert len(broker.acls) == 0
        assert await broker.create_acls([READ_T, DENY_G, BAD, READ_T]) == [None, None, ANY_ERR, None]
        assert broker.acls.bindings == {READ_T, DENY_G}
        other = ControllerAcls(_call(service))
        await other.start()
        assert other.acls.bindings == {READ_T, DENY_G}
        # The other broker's long-poll sees a change without asking again.
        gone = await broker.delete_acls([AclBindingFilter(resource_type=ResourceType.GROUP)])
        assert gone == [[DENY_G]]
        for _ in range(100):
            if other.acls.bindings == {READ_T}:
                break
            await asyncio.sleep(0.01)
        assert other.acls.bindings == {READ_T}
        version = other.acls.version
        await broker.stop()
        await other.stop()
        again = AclService(tmp_path / "acls")
        assert again.acls.bindings == {READ_T} and again.acls.version == version

    ANY_ERR = "resource type ANY cannot carry an ACL here"
    asyncio.run(main())
