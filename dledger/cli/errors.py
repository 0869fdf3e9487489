"""How every `dledger` command ends: exit status 0 (done), 1 (failed), 2 (usage error),
130 (interrupted), each failure as one line on stderr, never a traceback.

`GuardedCommand` / `GuardedGroup` (click's `cls=`) turn whatever escapes a command into
that contract: click's own usage errors keep their status 2, a `ConfigError` (bad
peers...) becomes a usage error, a `DLedgerError` and any other exception one
`error: ...` line and status 1, Ctrl-C status 130. A reader that went away (`| head`)
ends the command quietly with status 1.
"""

from __future__ import annotations

import contextlib
import errno
import io
import math
import os
import sys
from collections.abc import Callable
from typing import Any, BinaryIO, NoReturn, cast

import click

from dledger.cli.tls_options import unreachable_hint
from dledger.codes import DLedgerError
from dledger.config import ConfigError

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
"""128 + SIGINT, what shells report for a command ended by Ctrl-C."""

INT64_MAX = (1 << 63) - 1
"""The largest index or term a request can carry (protobuf int64)."""


class FiniteFloatRange(click.FloatRange):
    """click's FloatRange without NaN (which every range check lets through)."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The number, or a usage error for NaN or a value outside the range."""
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail(f"{value!r} is not a number", param, ctx)
        return number


def one_line(text: str) -> str:
    """`text` with every run of whitespace (newlines included) as one space."""
    return " ".join(str(text).split())


def fail(message: str, status: int = EXIT_FAILED) -> NoReturn:
    """Print `error: <message>` as one line on stderr and exit with `status`."""
    click.echo(f"error: {one_line(message)}", err=True)
    sys.exit(status)


def interrupted(message: str | None = None) -> NoReturn:
    """Print `interrupted` (`interrupted: <message>`) on stderr and exit 130 (Ctrl-C)."""
    click.echo("interrupted" + (f": {one_line(message)}" if message else ""), err=True)
    sys.exit(EXIT_INTERRUPTED)


_end_process: Callable[[int], NoReturn] = os._exit
"""How `interrupted_now` ends the process (tests replace it)."""


def interrupted_now(message: str) -> NoReturn:
    """Print `interrupted: <message>` on stderr and end the process at once with 130,
    without unwinding: what a second Ctrl-C does while a call that must not be cut is in
    flight (closing the client would wait for the call, see
    `dledger.client.interrupts`). Called from a signal handler: a failing write (the
    main thread was writing the same stream) does not stop the exit."""
    with contextlib.suppress(Exception):
        click.echo(f"interrupted: {one_line(message)}", err=True)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    _end_process(EXIT_INTERRUPTED)


def _describe(exc: BaseException) -> str:
    text = one_line(str(exc))
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return text or type(exc).__name__


class OutputClosedError(BrokenPipeError):
    """A write to stdout when the process was started with stdout closed (`>&-`)."""


class _ClosedBinaryOutput(io.RawIOBase):
    """`sys.stdout.buffer` of a closed stdout: every write fails."""

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        raise OutputClosedError(errno.EPIPE, "stdout is closed")


class _ClosedOutput(io.TextIOBase):
    """What `sys.stdout` is when the process was started with stdout closed: every
    write fails (Python leaves it None, and click then prints nothing and exits 0)."""

    encoding = "utf-8"
    errors = "strict"
    buffer = _ClosedBinaryOutput()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        raise OutputClosedError(errno.EPIPE, "stdout is closed")

    def fileno(self) -> int:
        raise OutputClosedError(errno.EPIPE, "stdout is closed")


def _guard_standard_streams() -> None:
    """Open /dev/null on a standard descriptor (0, 1, 2) the process started without, so
    a file opened later (a store's segment) never gets it and is never written by a
    print or a library's log line; a closed stdout fails the first write instead of
    printing nothing."""
    for fd, flags in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            with contextlib.suppress(OSError):
                null = os.open(os.devnull, flags)
                if null != fd:
                    os.dup2(null, fd)
                    os.close(null)
    if sys.stdout is None:
        sys.stdout = _ClosedOutput()


def stdin_binary() -> BinaryIO:
    """`sys.stdin`'s bytes, or exit 2 with one line when the process has no stdin."""
    if sys.stdin is None:
        fail("no standard input (stdin is closed)", EXIT_USAGE)
    return cast(BinaryIO, sys.stdin.buffer)


def _guarded_invoke(invoke: Any, ctx: click.Context | None) -> Any:
    _guard_standard_streams()
    try:
        return invoke(ctx)
    except (click.exceptions.Exit, click.ClickException, SystemExit):
        raise
    except click.Abort as exc:  # click's prompts: Ctrl-C, or the end of the input
        if isinstance(exc.__context__, KeyboardInterrupt):
            interrupted()
        click.echo(err=True)  # end the prompt's line
        fail("no answer: the input ended before the question was answered")
    except KeyboardInterrupt:
        interrupted()
    except ConfigError as exc:
        raise click.UsageError(str(exc), ctx) from None
    except DLedgerError as exc:
        fail(str(unreachable_hint(exc)))
    except OutputClosedError:
        fail("output closed (stdout is closed)")
    except BrokenPipeError:
        # the reader went away (`dledger get ... | head`), which it does on purpose: end
        # quietly with 1 (what was asked was not all written), and without a flush of the
        # rest of stdout failing again at exit
        with contextlib.suppress(Exception):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(EXIT_FAILED)
    except MemoryError:
        fail("out of memory")
    except Exception as exc:
        fail(f"{type(exc).__name__}: {_describe(exc)}" if not isinstance(exc, OSError) else _describe(exc))


class GuardedCommand(click.Command):
    """A click command that ends by the exit contract of this module."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; see the module docstring for how it ends."""
        return _guarded_invoke(super().invoke, ctx)


class GuardedGroup(click.Group):
    """A click group whose subcommands end by the exit contract of this module."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the group and its subcommand; see the module docstring for how it ends."""
        return _guarded_invoke(super().invoke, ctx)

    def make_context(self, info_name: str | None, args: list[str], *more: Any, **options: Any) -> click.Context:
        """The group's context, where click answers the group's own `--help` and
        `--version`: written to a full disk, they ended in a traceback."""
        make = super().make_context
        return cast(click.Context, _guarded_invoke(lambda _ctx: make(info_name, args, *more, **options), None))


__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "INT64_MAX",
    "FiniteFloatRange",
    "OutputClosedError",
    "GuardedCommand",
    "GuardedGroup",
    "fail",
    "interrupted",
    "interrupted_now",
    "stdin_binary",
]
