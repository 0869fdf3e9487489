"""The per-peer push quota (DLedger's Quota), as the Raft layer reaches it.

The budget is compiled with the store's hot path (`dledger._store`, or its pure-Python
twin); this module gives it a Python name and a type, so `dledger.raft` depends on
neither.
"""

from __future__ import annotations

from typing import Protocol, cast

from dledger._native import impl


class QuotaLike(Protocol):
    """A per-second byte budget over a window of five one-second slots."""

    max_per_second: int

    def sample(self, value: int, now_ms: int) -> None:
        """Account `value` bytes to the second containing `now_ms`."""
        ...

    def validate_now(self, now_ms: int) -> bool:
        """True when this second's budget is used up (the caller must wait)."""
        ...

    def left_now_ms(self, now_ms: int) -> int:
        """Milliseconds until the next second starts."""
        ...


def new_quota(max_per_second: int) -> QuotaLike:
    """A fresh budget of `max_per_second` bytes per second."""
    return cast(QuotaLike, impl.Quota(max_per_second))
