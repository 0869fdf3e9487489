"""Chooses the compiled `dledger._store` or its pure-Python twin.

The compiled module is used unless DLEDGER_NO_EXTENSIONS=1 is set; if it is missing
(the package was not built) that is an error, not a silent slowdown. Type checkers see
`impl` as the compiled module, typed by `dledger/_store.pyi`: the twin has the same API
(tests/unit/test_twin_api.py).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING

__all__ = ["impl"]


def _load() -> ModuleType:
    if os.environ.get("DLEDGER_NO_EXTENSIONS") == "1":
        from dledger import _store_py

        return _store_py
    try:
        from dledger import _store
    except ImportError as exc:  # pragma: no cover - only on a broken install
        raise ImportError(
            "dledger's compiled extension is missing: run `make install` (or `pip install -e .`), "
            "or set DLEDGER_NO_EXTENSIONS=1 to use the slow pure-Python store"
        ) from exc
    return _store


if TYPE_CHECKING:
    from dledger import _store as impl
else:
    impl = _load()
