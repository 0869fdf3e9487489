"""`dledger server` (one member, DLedger's option names) and `dledger cluster` (a local
N-member cluster on loopback, one child process per member)."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import re
import socket
import sys
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import click

from dledger.cli.config_file import (
    file_settings,
    format_size,
    load_config_file,
    member_id_problem,
    parse_size,
    setting_fields,
    size_option,
)
from dledger.cli.errors import GuardedCommand, fail, one_line
from dledger.cli.param_types import NonEmptyPath
from dledger.cli.tls_options import EXIT_USAGE, refuse_plaintext, server_tls_options
from dledger.codes import CorruptStoreError, DLedgerError
from dledger.config import ConfigError, DLedgerConfig, StoreConfig, member_store_config, parse_address
from dledger.config_bounds import MS_MAX
from dledger.statemachine import StateMachine

EXIT_ADDRESS_IN_USE = 1
"""`dledger server` exit status when its port cannot be bound: 1 as any failure, with
a message `port N is already in use` (the metrics port is named as such)."""
EXIT_BAD_STORE = 1
"""`dledger server` exit status when the store cannot be opened (damaged, unreadable)."""

_Command = TypeVar("_Command", bound=Callable[..., Any])


def index_segment_size(data_segment_size: int) -> int:
    """Index segment size that goes with a data segment size: DLedger's 160 MiB, or less
    for small data segments (an entry takes at least 48 data bytes and 32 index bytes)."""
    default = StoreConfig.index_file_size
    size = max(1024 * 1024, min(default, data_segment_size))
    return size - size % 32


def build_config(file_settings: dict[str, Any], options: dict[str, Any]) -> DLedgerConfig:
    """DLedgerConfig from a member's defaults, then the config file, then the given CLI
    options (None = not given). Both name settings by field name: DLedgerConfig's, and
    StoreConfig's for its `store`. A data segment size without an index segment size
    brings a matching one (`index_segment_size`).

    Raises:
        click.UsageError: an invalid value or combination (bad peers, self id not in
            peers...).
    """
    settings = dict(file_settings)
    settings.update({k: v for k, v in options.items() if v is not None})
    store_names = {f.name for f in dataclasses.fields(StoreConfig)}
    store = {name: settings.pop(name) for name in list(settings) if name in store_names}
    if "data_file_size" in store and "index_file_size" not in store:
        store["index_file_size"] = index_segment_size(store["data_file_size"])
    try:
        return DLedgerConfig(**settings, store=member_store_config(**store))
    except (ConfigError, ValueError, TypeError) as exc:
        raise click.UsageError(_option_names(one_line(str(exc)), options, file_settings)) from exc


def _option_names(message: str, options: dict[str, Any], file_settings: dict[str, Any]) -> str:
    """`message` with the settings it names by their (snake_case) field names named as
    the user gave them: the config file's key for one the file set (`flush_mode` ->
    `flushMode`), else the command's option (`data_file_size` -> `--segment-size`,
    `tls_key` -> `--tls-key`)."""
    ctx = click.get_current_context(silent=True)
    flags = {p.name: max(p.opts, key=len) for p in ctx.command.params if p.opts} if ctx is not None else {}
    for field in (*dataclasses.fields(StoreConfig), *dataclasses.fields(DLedgerConfig)):
        if "_" not in field.name or not re.search(rf"\b{field.name}\b", message):
            continue  # a one-word name (group, peers) may be a word of the message
        yaml = field.metadata.get("yaml") or re.sub(r"_(\w)", lambda m: m.group(1).upper(), field.name)
        said: str | None = field.metadata.get("cli") or flags.get(field.name)
        if options.get(field.name) is None and field.name in file_settings:
            said = yaml if isinstance(yaml, str) else yaml[0]  # DLedger's name of it
        if said:
            message = re.sub(rf"\b{field.name}\b", said, message)
    return message


def store_options(
    defaults: Mapping[str, Any] | None = None, store_cls: type[StoreConfig] = StoreConfig
) -> Callable[[_Command], _Command]:
    """Decorator: the click options of the store settings that have one (metadata "cli"),
    in field order, each passed to the command as its field name. The help shows the
    default: the one in `defaults`, which is then the option's value when it is not
    given, or else a member's (`member_store_config`) with the value None (not given:
    the config file or a member's default applies)."""
    chosen = dict(defaults or {})
    member = member_store_config()
    hints = typing.get_type_hints(store_cls)

    def decorate(command: _Command) -> _Command:
        for field in reversed(dataclasses.fields(store_cls)):
            if "cli" in field.metadata:
                shown = chosen[field.name] if field.name in chosen else getattr(member, field.name, field.default)
                command = _store_option(field, hints[field.name], chosen.get(field.name), shown)(command)
        return command

    return decorate


def _store_option(field: dataclasses.Field[Any], hint: Any, default: Any, shown: Any) -> Callable[[_Command], _Command]:
    """The click option of one store setting (see `store_options`)."""
    kind: dict[str, Any] = {"type": hint}
    if field.metadata.get("size"):
        kind = {"type": click.STRING, "callback": size_option, "metavar": "SIZE"}
        shown = format_size(shown)
    elif typing.get_origin(hint) is Literal:
        kind = {"type": click.Choice(typing.get_args(hint))}
    text = f"[default: {shown}]"
    if field.metadata.get("help"):
        text = f"{field.metadata['help']}  {text}"
    return click.option(field.metadata["cli"], field.name, default=default, help=text, **kind)


def server_command_line(args: list[str]) -> list[str]:
    """The command that runs `dledger server ARGS` with this interpreter."""
    return [sys.executable, "-m", "dledger.cli.server_cmds", *args]


@click.command(cls=GuardedCommand, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-g", "--group", help="Raft group name.  [default: default]")
@click.option("-i", "--id", "self_id", help="This member's id (no '-' in ids).  [default: n0]")
@click.option("-p", "--peers", help="Every member as id-host:port, ';'-separated.  [default: n0-localhost:20911]")
@click.option(
    "-s", "--store-base-dir", help="Where the log lives: DIR/dledger-<id>/{data,index}.  [default: /tmp/dledgerstore]"
)
@click.option("--read-only-data-store-dirs", help="DLedger's multi-path storage: not supported (refused when given).")
@click.option(
    "--peer-push-throttle-point",
    callback=size_option,
    metavar="SIZE",
    help="Throttle catch-up pushes beyond this lag (bytes).",
)
@click.option(
    "--peer-push-quotas", callback=size_option, metavar="SIZE", help="Catch-up push quota per follower, bytes/s."
)
@click.option("--preferred-leader-id", help="Preferred leader id(s), ';'-separated.")
@click.option(
    "-c",
    "--config-file",
    type=NonEmptyPath(exists=True, dir_okay=False, path_type=Path),
    help="YAML settings (DLedger 0.3 keys: group, selfId, peers, storeBaseDir...); options given here win.",
)
@click.option("--metrics-port", type=click.IntRange(0, 65535), help="Serve Prometheus metrics on this port.")
@click.option("--heartbeat-ms", type=click.IntRange(1, MS_MAX), help="Heartbeat interval; election after 3 missed.")
@store_options()
@click.option("--listen", help="Listen address instead of this member's peer address (e.g. 0.0.0.0:20911).")
@click.option(
    "--initial-cluster-state",
    type=click.Choice(["new", "existing"]),
    help="new: this member founds the group; existing: it joins a running group, and with an empty store "
    "(a lost disk) it neither votes nor stands until a leader brought it up to date.  [default: new]",
)
@click.option(
    "--repair",
    is_flag=True,
    help="Cut a damaged log back to its last valid entry, also below the committed index; the member then "
    "catches up from the leader before it votes again.",
)
@click.option(
    "--state-machine",
    metavar="NAME",
    help="Apply committed entries to this state machine: kv (the key-value store, dledger.kv) or "
    "package.module:factory.  [default: none, a plain log]",
)
@server_tls_options
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
)
def server(
    group: str | None,
    self_id: str | None,
    peers: str | None,
    store_base_dir: str | None,
    read_only_data_store_dirs: str | None,
    peer_push_throttle_point: int | None,
    peer_push_quotas: int | None,
    preferred_leader_id: str | None,
    config_file: Path | None,
    metrics_port: int | None,
    heartbeat_ms: int | None,
    listen: str | None,
    initial_cluster_state: str | None,
    repair: bool,
    state_machine: str | None,
    log_level: str,
    tls_cert: str | None,
    tls_key: str | None,
    tls_ca: str | None,
    client_address: str | None,
    tokens_file: str | None,
    insecure: bool,
    reflection: bool,
    **store: Any,
) -> None:
    """Run one member of a DLedger group until SIGTERM / Ctrl-C.

    It listens on its own address from --peers (clients and peers share the port; with
    TLS, --client-address adds a port for clients with bearer tokens), stores its log
    under --store-base-dir and shuts down cleanly (flush + checkpoint) on SIGTERM or
    SIGINT. Example, a 3-member group on one machine:

    \b
      P="n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"
      dledger server -i n0 -p "$P" -s /tmp/dl &
      dledger server -i n1 -p "$P" -s /tmp/dl &
      dledger server -i n2 -p "$P" -s /tmp/dl &
    """
    if self_id is not None and (problem := member_id_problem(self_id)) is not None:
        raise click.BadParameter(problem, param_hint="'--id'")
    _prepare_process(self_id, log_level)
    file_settings = load_config_file(config_file, self_id) if config_file else {}
    machine = load_state_machine_or_exit(state_machine or file_settings.get("state_machine"))
    config = build_config(
        file_settings,
        {
            "group": group,
            "self_id": self_id,
            "peers": peers,
            "store_base_dir": store_base_dir,
            "read_only_data_store_dirs": read_only_data_store_dirs,
            "peer_push_throttle_point": peer_push_throttle_point,
            "peer_push_quota": peer_push_quotas,
            "preferred_leader_ids": preferred_leader_id,
            "heart_beat_time_interval_ms": heartbeat_ms,
            "tls_cert": tls_cert,
            "tls_key": tls_key,
            "tls_ca": tls_ca,
            "client_address": client_address,
            "tokens_file": tokens_file,
            "initial_cluster_state": initial_cluster_state,
            "state_machine": state_machine,
            **store,
        },
    )
    if listen is not None:
        try:
            parse_address(listen)
        except ConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="'--listen'") from None
    run_server(
        config,
        listen=listen,
        metrics_port=metrics_port,
        insecure=insecure,
        reflection=reflection,
        repair=repair,
        state_machine=machine,
    )


def _prepare_process(self_id: str | None, log_level: str) -> None:
    """A server process's stack dumps, allocator tuning, descriptor limit and logging."""
    import faulthandler
    import resource
    import signal

    from dledger import allocator

    with contextlib.suppress(ValueError, OSError, AttributeError):  # stderr without a file (tests): no dumps
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>` dumps every thread's stack
    allocator.keep_freed_memory()  # reuse freed message buffers (see dledger.allocator)
    # every connection holds a descriptor: take all the system allows (helper M exhausted
    # a member's with idle connections; the store then retries its checkpoint)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    logging.basicConfig(
        level=getattr(logging, log_level.upper()),
        format=f"%(asctime)s %(levelname)s [{self_id or 'n0'}] %(name)s: %(message)s",
        force=True,  # `dledger -v` may have configured logging already
    )


def load_state_machine_or_exit(name: str | None) -> StateMachine | None:
    """The state machine `name` stands for (None: none); a name that cannot be loaded
    ends the command with one `error:` line and status 2 (a usage error)."""
    if not name:
        return None
    from dledger.statemachine.loader import load_state_machine

    try:
        return load_state_machine(name)
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)


def _repairable(exc: CorruptStoreError, repairing: bool) -> bool:
    """Whether `--repair` is the way out of `exc`: damage in the log's files (not in
    `currterm` or `identity`, whose own message says what to do), when not repairing."""
    path = Path(exc.path)
    return not repairing and (path.parent.name in ("data", "index") or path.name.startswith("checkpoint"))


def run_server(
    config: DLedgerConfig,
    *,
    listen: str | None,
    metrics_port: int | None,
    insecure: bool,
    reflection: bool,
    repair: bool = False,
    state_machine: StateMachine | None = None,
) -> None:
    """Serve `config` (applying committed entries to `state_machine`) until a signal;
    exits with one line on stderr when it cannot: 2 for plaintext on a non-loopback
    address without `insecure` or unreadable TLS files, 1 for a busy port (named) or a
    store that cannot be opened."""
    from dledger.security.tls import TlsError
    from dledger.security.tokens import TokenFileError
    from dledger.server import DLedgerServer
    from dledger.transport.grpc_server import BindError

    refuse_plaintext(listen or config.self_address, config.tls_enabled, insecure)
    srv = DLedgerServer(
        config,
        listen_address=listen,
        metrics_port=metrics_port,
        reflection=reflection,
        repair=repair,
        state_machine=state_machine,
    )
    try:
        srv.run_until_signal()
    except (TlsError, TokenFileError) as exc:
        fail(str(exc), EXIT_USAGE)
    except BindError as exc:
        fail(bind_failure(exc.address or srv.listen_address, exc), EXIT_ADDRESS_IN_USE)
    except CorruptStoreError as exc:
        hint = (
            "; `dledger server --repair` cuts the log back to its last valid entry and lets the member catch up "
            "from the leader (`dledger check --repair` shows what it would cut)"
        )
        shown = hint if _repairable(exc, repair) else ""
        fail(f"cannot open the store in {config.default_path}: {exc}{shown}", EXIT_BAD_STORE)
    except (DLedgerError, OSError) as exc:
        fail(f"cannot open the store in {config.default_path}: {exc}", EXIT_BAD_STORE)


def bind_failure(address: str, exc: OSError) -> str:
    """The message for a port that could not be bound: `port N is already in use` when
    it is (probed again here: gRPC does not say why), else what gRPC said."""
    text = str(exc)
    if text.startswith("metrics port"):
        return text
    try:
        host, port = parse_address(address)
    except ConfigError:
        return text
    probe = socket.socket(socket.AF_INET6 if host.startswith("[") else socket.AF_INET)
    try:
        probe.bind((host.strip("[]"), port))
    except OSError as probe_exc:
        if probe_exc.errno == errno.EADDRINUSE:
            return f"port {port} is already in use (cannot listen on {address})"
        return f"cannot listen on {address}: {probe_exc.strerror or probe_exc}"
    finally:
        probe.close()
    return text


__all__ = [
    "build_config",
    "file_settings",
    "format_size",
    "index_segment_size",
    "load_config_file",
    "parse_size",
    "server",
    "server_command_line",
    "setting_fields",
    "size_option",
    "store_options",
]


if __name__ == "__main__":  # `python -m dledger.cli.server_cmds [server options]` (what `cluster` runs)
    server(prog_name="dledger server")
