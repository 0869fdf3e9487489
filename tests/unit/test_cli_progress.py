"""The CLI's progress bar: drawn on stderr when it is a terminal, nowhere otherwise."""

from __future__ import annotations

import io
import sys

import pytest

from dledger.cli.progress import progress

pytestmark = pytest.mark.unit


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_is_drawn_on_a_terminal_and_counts_what_was_done(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with progress(5000, "appending") as advance:
        for _ in range(5):
            advance(1000)
    drawn = terminal.getvalue()
    assert "appending" in drawn and "5000/5000" in drawn and "entries" in drawn


@pytest.mark.parametrize(("stderr", "total"), [(io.StringIO(), 5000), (Terminal(), None)])
def test_no_bar_into_a_pipe_or_without_a_total(
    monkeypatch: pytest.MonkeyPatch, stderr: io.StringIO, total: int | None
) -> None:
    monkeypatch.setattr(sys, "stderr", stderr)
    with progress(total, "appending") as advance:
        advance(5000)
    assert stderr.getvalue() == ""
