"""`dledger query`: read the group's state machine (`Ledger.Query`) in a read mode.

REQUEST is sent as UTF-8 text, or read from stdin with `-`, or given in hexadecimal
with `--hex`. The answer is printed as `get` prints bodies (the text when printable
UTF-8, else `base64:` + base64), or written as it is with `--raw`. Exit status as every
client command (`dledger.cli.errors`): 0, 1 (failed, or for raft-log: outcome unknown),
2 (usage), 130 (Ctrl-C).
"""

from __future__ import annotations

import base64
import json
import sys

import click

from dledger.bounded import read_stream_bounded
from dledger.cli.client_cmds import CONTEXT, MAX_BODY, client_options, open_client, show_body
from dledger.cli.errors import GuardedCommand, stdin_binary
from dledger.client import ReadMode

MODES = {
    "unsafe": ReadMode.UNSAFE,
    "read-index": ReadMode.READ_INDEX,
    "lease": ReadMode.LEASE,
    "raft-log": ReadMode.RAFT_LOG,
}


def _request(text: str, as_hex: bool) -> bytes:
    if text == "-":
        if as_hex:
            raise click.UsageError("give REQUEST in hex or '-' (stdin), not both")
        data = read_stream_bounded(stdin_binary(), MAX_BODY, "stdin")
    elif as_hex:
        try:
            data = bytes.fromhex(text)
        except ValueError as exc:
            raise click.BadParameter(f"not hexadecimal: {exc}", param_hint="'REQUEST'") from exc
    else:
        data = text.encode("utf-8", "surrogateescape")
    if len(data) > MAX_BODY:
        raise click.BadParameter(f"{len(data)} bytes; at most {MAX_BODY}", param_hint="'REQUEST'")
    return data


@click.command(cls=GuardedCommand, context_settings=CONTEXT)
@click.argument("request")
@click.option(
    "-m",
    "--mode",
    type=click.Choice(list(MODES)),
    default="read-index",
    show_default=True,
    help="unsafe: any member, may be stale; read-index / lease: linearizable; raft-log: through the log (a write).",
)
@click.option("--hex", "as_hex", is_flag=True, help="REQUEST is hexadecimal bytes.")
@click.option("--raw", is_flag=True, help="Write the answer's bytes as they are.")
@click.option("--json", "as_json", is_flag=True, help="Print {mode, answer} (answer_b64 when not UTF-8) as JSON.")
@client_options
def query(
    request: str, mode: str, as_hex: bool, raw: bool, as_json: bool, peers: str, group: str, timeout_s: float
) -> None:
    """Send REQUEST to the group's state machine and print its answer ('-': read REQUEST
    from stdin)."""
    if raw and as_json:
        raise click.UsageError("give --raw or --json, not both")
    data = _request(request, as_hex)
    with open_client(peers, group, timeout_s, multiplex=False) as client:
        answer = client.query(data, MODES[mode], timeout=timeout_s)
    if raw:
        sys.stdout.buffer.write(answer)
        sys.stdout.buffer.flush()
    elif as_json:
        out: dict[str, str] = {"mode": mode}
        try:
            out["answer"] = answer.decode("utf-8")
        except UnicodeDecodeError:
            out["answer_b64"] = base64.b64encode(answer).decode("ascii")
        click.echo(json.dumps(out))
    else:
        click.echo(show_body(answer))


__all__ = ["MODES", "query"]
