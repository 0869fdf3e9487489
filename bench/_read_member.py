"""`dledger server` with a Register state machine (tests/node/register.py): the members
of the read benchmark (`python -m bench._read_member [server options]`)."""

from __future__ import annotations

from typing import Any

import dledger.server
from dledger.cli.server_cmds import server
from dledger.node import DLedgerNode
from tests.node.register import Register


class RegisterNode(DLedgerNode):
    """A member whose state machine is a Register."""

    def __init__(self, config: Any, transport: Any = None, **options: Any) -> None:
        options.setdefault("state_machine", Register())
        super().__init__(config, transport, **options)


if __name__ == "__main__":
    dledger.server.DLedgerNode = RegisterNode  # type: ignore[misc]
    server()
