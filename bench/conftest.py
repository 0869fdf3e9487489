"""Fixtures of the benchmarks and the end-of-session storage comparison table."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench._common import RESULTS, results_table


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """A scratch directory under /tmp, deleted after the test (stores are large; pytest's own
    tmp_path retention would keep the last three sessions' files)."""
    path = tmp_path / "work"
    path.mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print dledger's entries/s next to every baseline of the same group, with ratios."""
    if not RESULTS:
        return
    terminalreporter.section("storage: entries/s (median round) and dledger / baseline ratios")
    for line in results_table(RESULTS):
        terminalreporter.write_line(line)
