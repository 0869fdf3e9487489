"""Crash points for recovery tests.

Set DLEDGER_FAILPOINT to a comma-separated list of names; when the store reaches one of
them the process dies at once with exit code 137, as if killed -9. Names:

- ``after_data_before_index``: an entry's bytes are in the data segment, its index unit
  is not (checked inside the compiled append).
- ``mid_segment_roll``: a new segment file exists but is not mapped or used yet.
- ``mid_truncate``: the data was cut (its tail zeroed, later segments deleted), the
  index not yet.
- ``checkpoint_tmp_written`` / ``currterm_tmp_written``: the temp file is durable, the
  rename has not happened.
"""

from __future__ import annotations

import os

EXIT_CODE = 137


def active() -> frozenset[str]:
    """The failpoints set in the environment."""
    raw = os.environ.get("DLEDGER_FAILPOINT", "")
    return frozenset(name.strip() for name in raw.split(",") if name.strip())


_ACTIVE = active()


def hit(name: str) -> None:
    """Die with exit code 137 when `name` is an active failpoint."""
    if name in _ACTIVE:
        os._exit(EXIT_CODE)
