"""click parameter types of the `dledger` commands."""

from __future__ import annotations

from typing import Any

import click


class NonEmptyPath(click.Path):
    """click's Path without the empty string, which meant the current directory: `certs
    init ''` wrote private keys there, `check ''` called a directory that is no store
    healthy (helper D). `.` still says the current directory."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The path, or a usage error for an empty one."""
        if isinstance(value, str) and not value.strip():
            self.fail("an empty path (give '.' for the current directory)", param, ctx)
        return super().convert(value, param, ctx)
