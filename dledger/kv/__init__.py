"""A replicated key-value store on top of the log: the worked example of a state machine
(docs/KV.md).

`KVStateMachine` is the state machine (`dledger server --state-machine kv` runs it);
`dledger.kv.commands` encodes the commands a client appends or queries and the answers.
"""

from dledger.kv.commands import (
    Answer,
    Cas,
    CasFailed,
    Command,
    Count,
    Delete,
    Error,
    Get,
    Len,
    NotFound,
    Ok,
    Pairs,
    Put,
    Scan,
    Value,
    decode_answer,
    decode_command,
    encode_answer,
    encode_command,
)
from dledger.kv.machine import KVStateMachine


def create_state_machine() -> KVStateMachine:
    """A fresh `KVStateMachine` (the factory `--state-machine kv` names)."""
    return KVStateMachine()


__all__ = [
    "Answer",
    "Cas",
    "CasFailed",
    "Command",
    "Count",
    "Delete",
    "Error",
    "Get",
    "KVStateMachine",
    "Len",
    "NotFound",
    "Ok",
    "Pairs",
    "Put",
    "Scan",
    "Value",
    "create_state_machine",
    "decode_answer",
    "decode_command",
    "encode_answer",
    "encode_command",
]
