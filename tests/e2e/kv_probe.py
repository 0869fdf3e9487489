"""A user state machine for the `--state-machine package.module:factory` tests: a
KVStateMachine that, after every batch, writes its whole state as JSON (hex keys and
values) to `$KV_PROBE_DIR/<pid>.json` (via rename, so a reader never sees half a file)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from dledger.entry import Entry
from dledger.kv import KVStateMachine


class ProbeMachine(KVStateMachine):
    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.path = directory / f"{os.getpid()}.json"

    def on_apply(self, entries: Sequence[Entry]) -> Sequence[bytes]:
        answers = super().on_apply(entries)
        state = {k.hex(): v.hex() for k, v in self.to_dict().items()}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"applied_index": self.applied_index, "state": state}))
        tmp.replace(self.path)
        return answers


def factory() -> ProbeMachine:
    return ProbeMachine(Path(os.environ["KV_PROBE_DIR"]))
