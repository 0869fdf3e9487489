"""The `dledger` command's entry point, outside the `dledger` package so that nothing
heavy is imported before it runs: a Ctrl-C while the command's modules load (about half
a second) ends it quietly with status 130 instead of a Python traceback, and gRPC's own
log lines (a failed TLS handshake per retry, a port in use) stay off unless
GRPC_VERBOSITY asks for them: the command's one `error:` line says what failed."""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType


def _interrupted(signum: int, frame: FrameType | None) -> None:
    sys.stderr.write("interrupted\n")
    raise SystemExit(130)


def main() -> None:
    """Load the command (Ctrl-C: exit 130, quietly), then run it."""
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    previous = signal.signal(signal.SIGINT, _interrupted)
    try:
        from dledger.cli.main import main as command
    finally:
        signal.signal(signal.SIGINT, previous)
    command()


if __name__ == "__main__":
    main()
