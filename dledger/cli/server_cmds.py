"""`dledger server` (one member, DLedger's option names) and `dledger cluster` (a local
N-member cluster on loopback, one child process per member)."""

from __future__ import annotations

import dataclasses
import logging
import re
import sys
from pathlib import Path
from typing import Any

import click

from dledger.codes import DLedgerError
from dledger.config import ConfigError, DLedgerConfig

EXIT_ADDRESS_IN_USE = 98
"""`dledger server` exit status when its port cannot be bound (errno EADDRINUSE)."""
EXIT_BAD_STORE = 3
"""`dledger server` exit status when the store cannot be opened (damaged, unreadable)."""

_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)

# DLedger's YAML / Java property names whose snake_case form differs from ours
_YAML_ALIASES = {
    "selfId": "self_id",
    "preferredLeaderId": "preferred_leader_ids",
    "preferredLeaderIds": "preferred_leader_ids",
    "peerPushQuotas": "peer_push_quota",
    "flushFileInterval": "flush_file_interval_ms",
    "checkPointInterval": "check_point_interval_ms",
    "leadershipTransferWaitTimeout": "leadership_transfer_wait_timeout_ms",
    "heartbeatMs": "heart_beat_time_interval_ms",
}


def parse_size(text: str) -> int:
    """`"16MiB"`, `"64m"`, `"1g"` or a plain byte count -> bytes.

    Raises:
        ValueError: not a size.
    """
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"not a size: {text!r} (examples: 1048576, 64MiB, 1g)")
    number, unit = int(match.group(1)), match.group(2).lower()
    return number << (10 * " kmgt".index(unit or " "))  # no unit: shift 0


def size_option(_ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """Click callback: a byte size with an optional K/M/G/T (binary) suffix."""
    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param=param) from exc


def _snake(name: str) -> str:
    if name in _YAML_ALIASES:
        return _YAML_ALIASES[name]
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower().replace("-", "_")


def _coerce(field: dataclasses.Field[Any], value: Any) -> Any:
    default = field.default
    if isinstance(default, bool):
        if isinstance(value, str):
            return value.strip().lower() in ("1", "true", "yes", "on")
        return bool(value)
    if isinstance(default, int):
        return parse_size(value) if isinstance(value, str) else int(value)
    if isinstance(default, float):
        return float(value)
    return None if value is None else str(value)


def load_config_file(path: Path, self_id: str | None = None) -> dict[str, Any]:
    """DLedgerConfig keyword arguments from a YAML file: DLedger 0.3's keys (`group`,
    `selfId`, `peers`, `storeBaseDir`, `peerPushQuota`...) or ours in snake_case, at the
    top level or in DLedger's proxy form `configs: [{...}]` (the entry whose selfId is
    `self_id` when there are several). Unknown keys are reported on stderr and ignored.

    Raises:
        click.UsageError: unreadable YAML or no single matching entry.
    """
    import yaml  # type: ignore[import-untyped]

    try:
        document = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise click.UsageError(f"cannot read config file {path}: {exc}") from exc
    if not isinstance(document, dict):
        raise click.UsageError(f"{path}: expected a mapping of settings")
    if "configs" in document:
        entries = [e for e in document["configs"] or [] if isinstance(e, dict)]
        if len(entries) > 1 and self_id is not None:
            entries = [e for e in entries if str(e.get("selfId", e.get("self_id"))) == self_id]
        if len(entries) != 1:
            raise click.UsageError(f"{path}: need exactly one entry under 'configs' (use --id to pick one)")
        document = entries[0]
    fields = {f.name: f for f in dataclasses.fields(DLedgerConfig) if f.init}
    result: dict[str, Any] = {}
    for key, value in document.items():
        name = _snake(str(key))
        if name not in fields:
            click.echo(f"warning: {path}: ignoring unsupported setting {key!r}", err=True)
            continue
        try:
            result[name] = _coerce(fields[name], value)
        except (TypeError, ValueError) as exc:
            raise click.UsageError(f"{path}: bad value for {key}: {value!r} ({exc})") from exc
    return result


def index_segment_size(data_segment_size: int) -> int:
    """Index segment size that goes with a data segment size: DLedger's 160 MiB, or less
    for small data segments (an entry takes at least 48 data bytes and 32 index bytes)."""
    default = DLedgerConfig().mapped_file_size_for_entry_index
    size = max(1024 * 1024, min(default, data_segment_size))
    return size - size % 32


def build_config(file_settings: dict[str, Any], options: dict[str, Any]) -> DLedgerConfig:
    """DLedgerConfig from defaults, then the config file, then the given CLI options
    (None = not given).

    Raises:
        click.UsageError: an invalid combination (bad peers, self id not in peers...).
    """
    settings = dict(file_settings)
    settings.update({k: v for k, v in options.items() if v is not None})
    if "mapped_file_size_for_entry_data" in settings and "mapped_file_size_for_entry_index" not in settings:
        settings["mapped_file_size_for_entry_index"] = index_segment_size(settings["mapped_file_size_for_entry_data"])
    try:
        return DLedgerConfig(**settings)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc


def server_command_line(args: list[str]) -> list[str]:
    """The command that runs `dledger server ARGS` with this interpreter."""
    return [sys.executable, "-m", "dledger.cli.server_cmds", *args]


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-g", "--group", help="Raft group name.  [default: default]")
@click.option("-i", "--id", "self_id", help="This member's id (no '-' in ids).  [default: n0]")
@click.option("-p", "--peers", help="Every member as id-host:port, ';'-separated.  [default: n0-localhost:20911]")
@click.option(
    "-s", "--store-base-dir", help="Where the log lives: DIR/dledger-<id>/{data,index}.  [default: /tmp/dledgerstore]"
)
@click.option("--read-only-data-store-dirs", help="Extra read-only data directories (DLedger multi-path).")
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
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML settings (DLedger 0.3 keys: group, selfId, peers, storeBaseDir...); options given here win.",
)
@click.option("--metrics-port", type=click.IntRange(0, 65535), help="Serve Prometheus metrics on this port.")
@click.option(
    "--flush-mode",
    type=click.Choice(["async", "sync"]),
    help="async: ack from page cache, flush every 10 ms (DLedger); sync: ack after fsync.  [default: async]",
)
@click.option("--heartbeat-ms", type=click.IntRange(min=1), help="Heartbeat interval; election after 3 missed.")
@click.option(
    "--segment-size", callback=size_option, metavar="SIZE", help="Data segment size, e.g. 64MiB.  [default: 1GiB]"
)
@click.option(
    "--release-behind",
    callback=size_option,
    metavar="SIZE",
    help="Keep this much flushed data per file in the page cache, hand older pages back to the kernel "
    "(0 keeps all).  [default: 256MiB]",
)
@click.option("--listen", help="Listen address instead of this member's peer address (e.g. 0.0.0.0:20911).")
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
    flush_mode: str | None,
    heartbeat_ms: int | None,
    segment_size: int | None,
    release_behind: int | None,
    listen: str | None,
    log_level: str,
) -> None:
    """Run one member of a DLedger group until SIGTERM / Ctrl-C.

    It listens on its own address from --peers (clients and peers share the port),
    stores its log under --store-base-dir and shuts down cleanly (flush + checkpoint)
    on SIGTERM or SIGINT. Example, a 3-member group on one machine:

    \b
      P="n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"
      dledger server -i n0 -p "$P" -s /tmp/dl &
      dledger server -i n1 -p "$P" -s /tmp/dl &
      dledger server -i n2 -p "$P" -s /tmp/dl &
    """
    import faulthandler
    import signal

    from dledger import allocator
    from dledger.server import DLedgerServer
    from dledger.transport.grpc_server import BindError

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>` dumps every thread's stack
    allocator.keep_freed_memory()  # reuse freed message buffers (see dledger.allocator)

    logging.basicConfig(
        level=getattr(logging, log_level.upper()),
        format=f"%(asctime)s %(levelname)s [{self_id or 'n0'}] %(name)s: %(message)s",
        force=True,  # `dledger -v` may have configured logging already
    )
    file_settings = load_config_file(config_file, self_id) if config_file else {}
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
            "flush_mode": flush_mode,
            "heart_beat_time_interval_ms": heartbeat_ms,
            "mapped_file_size_for_entry_data": segment_size,
            "release_behind_bytes": release_behind,
        },
    )
    srv = DLedgerServer(config, listen_address=listen, metrics_port=metrics_port)
    try:
        srv.run_until_signal()
    except BindError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_ADDRESS_IN_USE)
    except (DLedgerError, OSError) as exc:
        click.echo(f"error: cannot open the store in {config.default_path}: {exc}", err=True)
        sys.exit(EXIT_BAD_STORE)


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-n", "--nodes", default=3, show_default=True, type=click.IntRange(1, 9), help="Members.")
@click.option("-g", "--group", default="default", show_default=True, help="Raft group name.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback address to listen on.")
@click.option("--base-port", default=20911, show_default=True, type=click.IntRange(1, 65535), help="Port of n0.")
@click.option("-s", "--store-base-dir", default=".dledger-data", show_default=True, help="Logs go to DIR/dledger-n<k>.")
@click.option("--flush-mode", type=click.Choice(["async", "sync"]), default="async", show_default=True)
@click.option("--heartbeat-ms", type=click.IntRange(min=1), help="Heartbeat interval.  [default: 2000]")
@click.option(
    "--segment-size",
    callback=size_option,
    metavar="SIZE",
    default="64MiB",
    show_default=True,
    help="Data segment size.",
)
@click.option("--metrics-base-port", type=click.IntRange(1, 65535), help="Metrics of n<k> on this port + k.")
@click.option(
    "-c",
    "--config-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML settings for every member (as `dledger server -c`); the options above win.",
)
def cluster(
    nodes: int,
    group: str,
    host: str,
    base_port: int,
    store_base_dir: str,
    flush_mode: str,
    heartbeat_ms: int | None,
    segment_size: int,
    metrics_base_port: int | None,
    config_file: Path | None,
) -> None:
    """Run a local N-member cluster (ids n0.., ports BASE-PORT..) until Ctrl-C.

    Each member is a `dledger server` child process; their logs are shown with an [id]
    prefix. Once a leader is elected it prints `leader: <id>` and how to talk to the
    cluster from another terminal. Ctrl-C shuts every member down cleanly; running the
    same command again resumes from the data in --store-base-dir.
    """
    from dledger.cli.cluster_runner import LocalCluster

    runner = LocalCluster(
        nodes=nodes,
        group=group,
        host=host,
        base_port=base_port,
        store_base_dir=store_base_dir,
        extra_args=[
            "--flush-mode",
            flush_mode,
            "--segment-size",
            str(segment_size),
            *(["--heartbeat-ms", str(heartbeat_ms)] if heartbeat_ms else []),
            *(["--config-file", str(config_file.resolve())] if config_file else []),
        ],
        metrics_base_port=metrics_base_port,
        command_line=server_command_line,
    )
    sys.exit(runner.run())


if __name__ == "__main__":  # `python -m dledger.cli.server_cmds [server options]` (what `cluster` runs)
    server()
