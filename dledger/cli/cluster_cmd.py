"""`dledger cluster`: a local N-member cluster of `dledger server` child processes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from dledger.cli.errors import EXIT_USAGE, GuardedCommand, fail
from dledger.cli.param_types import NonEmptyPath
from dledger.cli.server_cmds import build_config, load_config_file, server_command_line, store_options
from dledger.cli.tls_options import refuse_plaintext
from dledger.config import ConfigError, parse_address
from dledger.config_bounds import MS_MAX

CLUSTER_STORE_DEFAULTS: dict[str, Any] = {"flush_mode": "async", "data_file_size": 64 << 20}
"""`dledger cluster`'s store options that have a default of their own: every member is
started with them (so they win over the config file), unlike the options not given."""


@click.command(cls=GuardedCommand, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-n", "--nodes", default=3, show_default=True, type=click.IntRange(1, 9), help="Members.")
@click.option("-g", "--group", default="default", show_default=True, help="Raft group name.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback address to listen on.")
@click.option("--base-port", default=20911, show_default=True, type=click.IntRange(1, 65535), help="Port of n0.")
@click.option("-s", "--store-base-dir", default=".dledger-data", show_default=True, help="Logs go to DIR/dledger-n<k>.")
@click.option("--heartbeat-ms", type=click.IntRange(1, MS_MAX), help="Heartbeat interval.  [default: 2000]")
@store_options(CLUSTER_STORE_DEFAULTS)
@click.option("--metrics-base-port", type=click.IntRange(1, 65535), help="Metrics of n<k> on this port + k.")
@click.option(
    "-c",
    "--config-file",
    type=NonEmptyPath(exists=True, dir_okay=False, path_type=Path),
    help="YAML settings for every member (as `dledger server -c`); the options above win.",
)
@click.option(
    "--tls",
    is_flag=True,
    help="Mutual TLS: make a development CA and certificates in STORE_BASE_DIR/tls (kept for the next run).",
)
@click.option("--insecure", is_flag=True, help="Allow a non-loopback --host without --tls.")
@click.option(
    "--state-machine",
    metavar="NAME",
    help="Every member applies committed entries to this state machine: kv (the key-value store) or "
    "package.module:factory.  [default: none, a plain log]",
)
def cluster(
    nodes: int,
    group: str,
    host: str,
    base_port: int,
    store_base_dir: str,
    heartbeat_ms: int | None,
    metrics_base_port: int | None,
    config_file: Path | None,
    tls: bool,
    insecure: bool,
    state_machine: str | None,
    **store: Any,
) -> None:
    """Run a local N-member cluster (ids n0.., ports BASE-PORT..) until Ctrl-C.

    Each member is a `dledger server` child process; their logs are shown with an [id]
    prefix. Once a leader is elected it prints `leader: <id>` and how to talk to the
    cluster from another terminal. Ctrl-C shuts every member down cleanly; running the
    same command again resumes from the data in --store-base-dir.
    """
    from dledger.cli.cluster_runner import LocalCluster, store_args

    if base_port + nodes - 1 > 65535:
        raise click.BadParameter(
            f"{nodes} members need ports {base_port}..{base_port + nodes - 1}", param_hint="'--base-port'"
        )
    if metrics_base_port is not None and metrics_base_port + nodes - 1 > 65535:
        raise click.BadParameter(
            f"{nodes} members need ports {metrics_base_port}..{metrics_base_port + nodes - 1}",
            param_hint="'--metrics-base-port'",
        )
    try:
        parse_address(f"{host}:{base_port}")
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="'--host'") from None
    refuse_plaintext(f"{host}:{base_port}", tls, insecure)
    if state_machine:
        check_state_machine(state_machine)
    check_member_settings(
        nodes,
        base_port,
        metrics_base_port,
        config_file,
        {
            "group": group,
            "peers": ";".join(f"n{k}-{host}:{base_port + k}" for k in range(nodes)),
            "store_base_dir": store_base_dir,
            "heart_beat_time_interval_ms": heartbeat_ms,
            "state_machine": state_machine,
            **store,
        },
    )
    tls_dir = cluster_certs(Path(store_base_dir) / "tls", group, nodes, host) if tls else None
    runner = LocalCluster(
        nodes=nodes,
        group=group,
        host=host,
        base_port=base_port,
        store_base_dir=store_base_dir,
        extra_args=[
            *store_args(store),
            *(["--heartbeat-ms", str(heartbeat_ms)] if heartbeat_ms else []),
            *(["--config-file", str(config_file.resolve())] if config_file else []),
            *(["--state-machine", state_machine] if state_machine else []),
        ],
        metrics_base_port=metrics_base_port,
        command_line=server_command_line,
        tls_dir=tls_dir,
    )
    sys.exit(runner.run())


def check_member_settings(
    nodes: int, base_port: int, metrics_base_port: int | None, config_file: Path | None, options: dict[str, Any]
) -> None:
    """What every member would refuse at start, refused here once as a usage error of
    `cluster` (instead of N members printing their usage text and exiting): ports that
    overlap, a store base directory that is a file, and the settings of a member (n0's:
    the others differ only by id)."""
    if metrics_base_port is not None and max(base_port, metrics_base_port) < min(base_port, metrics_base_port) + nodes:
        raise click.BadParameter(
            f"metrics ports {metrics_base_port}..{metrics_base_port + nodes - 1} overlap the members' ports "
            f"{base_port}..{base_port + nodes - 1}",
            param_hint="'--metrics-base-port'",
        )
    base_dir = Path(options["store_base_dir"])
    if base_dir.exists() and not base_dir.is_dir():
        raise click.BadParameter(f"{base_dir} is not a directory", param_hint="'--store-base-dir'")
    settings = load_config_file(config_file, "n0") if config_file else {}
    build_config(settings, {**options, "self_id": "n0"})


def check_state_machine(name: str) -> None:
    """Import the factory `name` stands for (without calling it: each member makes its
    own); one `error:` line and status 2 when it cannot be."""
    from dledger.statemachine.loader import resolve_factory

    try:
        resolve_factory(name)
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)


def cluster_certs(directory: Path, group: str, nodes: int, host: str = "127.0.0.1") -> Path:
    """`dledger cluster --tls`'s certificates: those in `directory` when every file is
    there (a later run), else new ones (`dledger certs init`'s defaults, plus `host` as
    a name of every member). Exits 1 with one line when some exist but not all, or they
    cannot be written."""
    from dledger.cli.certs import DEFAULT_CLIENTS, parse_clients
    from dledger.security.certs import CertPlan, CertsError, write_dev_certs

    hosts = () if host in ("127.0.0.1", "localhost") else (host,)
    plan = CertPlan(group, tuple(f"n{k}" for k in range(nodes)), parse_clients(DEFAULT_CLIENTS), hosts)
    present = [name for name in plan.files() if (directory / name).exists()]
    if len(present) == len(plan.files()):
        click.echo(f"[cluster] mutual TLS with the certificates in {directory}")
        return directory
    try:
        write_dev_certs(directory, plan)
    except CertsError as exc:
        click.echo(f"error: {exc}; remove {directory} to make new certificates", err=True)
        sys.exit(1)
    click.echo(f"[cluster] mutual TLS: wrote a development CA and certificates to {directory}")
    return directory
