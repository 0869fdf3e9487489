"""Each member's committed log read offline from its store directory (`dledger.store`'s
read-only `StoreView`: nothing is written), after the members stopped cleanly."""

from __future__ import annotations

from pathlib import Path

from dledger.store import StoreView

BATCH_ENTRIES = 65536
BATCH_BYTES = 64 << 20


def read_store(node_dir: Path) -> list[str | None]:
    """The committed entries of a stopped member's store, body per index from 0 (None:
    a NOOP; entries before the store's first kept one are None too).

    Raises:
        Exception: the store cannot be read (missing, damaged); the caller records why.
    """
    log: list[str | None] = []
    with_view = StoreView.open(node_dir)
    try:
        if with_view.begin_index > 0:
            log.extend([None] * with_view.begin_index)
        index = max(with_view.begin_index, 0)
        while with_view.begin_index >= 0 and index <= with_view.committed_index:
            batch = with_view.read_columns(index, BATCH_ENTRIES, BATCH_BYTES)
            if batch.count == 0:
                raise RuntimeError(f"{node_dir}: no entry at {index} below the committed {with_view.committed_index}")
            log.extend((batch.body(k) or b"").decode(errors="replace") or None for k in range(batch.count))
            index += batch.count
    finally:
        with_view.close()
    return log
