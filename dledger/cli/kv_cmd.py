"""`dledger kv put|get|del|cas`: the key-value store of a group run with
`--state-machine kv` (`make run` starts one).

Keys and values are UTF-8 text, or hexadecimal with `--hex`. Writes go through the log
(their answer is the one the machine gave when it applied them); `get` reads in a read
mode (`read-index` by default: linearizable). Exit status as every client command
(`dledger.cli.errors`), and 1 also for "not found" (`get`) and "not swapped" (`cas`),
so that scripts can branch on them.
"""

from __future__ import annotations

import json
from typing import Any

import click

from dledger.cli.client_cmds import CONTEXT, client_options, open_client, show_body
from dledger.cli.errors import EXIT_FAILED, GuardedGroup, fail
from dledger.cli.query_cmd import MODES
from dledger.kv.client import KVClient, KVError
from dledger.kv.commands import MAX_KEY_SIZE


def _bytes(text: str, as_hex: bool, what: str) -> bytes:
    if not as_hex:
        return text.encode("utf-8", "surrogateescape")
    try:
        return bytes.fromhex(text)
    except ValueError as exc:
        raise click.BadParameter(f"not hexadecimal: {exc}", param_hint=f"'{what}'") from exc


def _key(text: str, as_hex: bool) -> bytes:
    key = _bytes(text, as_hex, "KEY")
    if len(key) > MAX_KEY_SIZE:
        raise click.BadParameter(f"{len(key)} bytes; at most {MAX_KEY_SIZE}", param_hint="'KEY'")
    return key


def _show(value: bytes | None, as_hex: bool) -> str | None:
    if value is None:
        return None
    return value.hex() if as_hex else show_body(value)


def _emit(as_json: bool, text: str, **fields: Any) -> None:
    click.echo(json.dumps(fields) if as_json else text)


def _run(peers: str, group: str, timeout_s: float, action: Any) -> Any:
    with open_client(peers, group, timeout_s) as client:
        try:
            return action(KVClient(client))
        except KVError as exc:
            fail(f"kv: {exc}")


hex_option = click.option("--hex", "as_hex", is_flag=True, help="Keys and values are (and are shown in) hexadecimal.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print the outcome as one JSON object.")


@click.group(cls=GuardedGroup, context_settings=CONTEXT)
def kv() -> None:
    """The key-value store of a group run with `--state-machine kv`."""


@kv.command("put")
@click.argument("key")
@click.argument("value")
@hex_option
@json_option
@client_options
def put(key: str, value: str, as_hex: bool, as_json: bool, peers: str, group: str, timeout_s: float) -> None:
    """Set KEY to VALUE."""
    k, v = _key(key, as_hex), _bytes(value, as_hex, "VALUE")
    _run(peers, group, timeout_s, lambda store: store.put(k, v, timeout=timeout_s))
    _emit(as_json, "OK", ok=True, key=_show(k, as_hex))


@kv.command("get")
@click.argument("key")
@click.option(
    "-m", "--mode", type=click.Choice(list(MODES)), default="read-index", show_default=True, help="The read mode."
)
@hex_option
@json_option
@client_options
def get(key: str, mode: str, as_hex: bool, as_json: bool, peers: str, group: str, timeout_s: float) -> None:
    """Print the value of KEY (exit 1 when it is absent)."""
    k = _key(key, as_hex)
    value = _run(peers, group, timeout_s, lambda store: store.get(k, MODES[mode], timeout=timeout_s))
    if value is None:
        if as_json:
            _emit(True, "", key=_show(k, as_hex), found=False)
            raise SystemExit(EXIT_FAILED)
        fail(f"key {_show(k, as_hex)!r} not found")
    _emit(as_json, _show(value, as_hex) or "", key=_show(k, as_hex), found=True, value=_show(value, as_hex))


@kv.command("del")
@click.argument("key")
@hex_option
@json_option
@client_options
def delete(key: str, as_hex: bool, as_json: bool, peers: str, group: str, timeout_s: float) -> None:
    """Remove KEY (an absent key is not an error)."""
    k = _key(key, as_hex)
    existed = _run(peers, group, timeout_s, lambda store: store.delete(k, timeout=timeout_s))
    _emit(as_json, "OK" if existed else "OK (it had no value)", ok=True, key=_show(k, as_hex), existed=existed)


@kv.command("cas")
@click.argument("key")
@click.argument("values", nargs=-1, metavar="[EXPECTED] NEW")
@click.option("--absent", is_flag=True, help="Swap only if KEY has no value (then give only NEW).")
@hex_option
@json_option
@client_options
def cas(
    key: str,
    values: tuple[str, ...],
    absent: bool,
    as_hex: bool,
    as_json: bool,
    peers: str,
    group: str,
    timeout_s: float,
) -> None:
    """Set KEY to NEW if it holds EXPECTED (with --absent: if it has no value); exit 1
    when it did not swap, printing the current value."""
    if len(values) != (1 if absent else 2):
        raise click.UsageError("give KEY EXPECTED NEW, or --absent KEY NEW")
    k, n = _key(key, as_hex), _bytes(values[-1], as_hex, "NEW")
    e = None if absent else _bytes(values[0], as_hex, "EXPECTED")
    result = _run(peers, group, timeout_s, lambda store: store.cas(k, e, n, timeout=timeout_s))
    if result.swapped:
        _emit(as_json, "swapped", key=_show(k, as_hex), swapped=True)
        return
    current = _show(result.current, as_hex)
    shown = "absent" if current is None else current
    _emit(as_json, f"not swapped: current value {shown}", key=_show(k, as_hex), swapped=False, current=current)
    raise SystemExit(EXIT_FAILED)


__all__ = ["kv"]
