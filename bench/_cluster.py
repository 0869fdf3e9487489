"""The dledger cluster the service benchmarks run against: three `dledger server`
processes on free loopback ports, 1 s heartbeats, quiet logs."""

from __future__ import annotations

from pathlib import Path

from dledger.cli.cluster_runner import LocalCluster
from dledger.cli.server_cmds import server_command_line
from tests.e2e.harness import free_ports


def start_cluster(
    workdir: Path, flush_mode: str, *, group: str = "bench", segment_size: str = "256MiB", tls_dir: Path | None = None
) -> LocalCluster:
    """Three members with `flush_mode` and `segment_size` segments (mutual TLS with the
    certificates in `tls_dir`), data and logs under `workdir`, once a leader is elected.

    Raises:
        RuntimeError: no leader within 60 s (the members are stopped).
    """
    cluster = LocalCluster(
        nodes=3,
        group=group,
        host="127.0.0.1",
        base_port=0,
        ports=free_ports(3),
        store_base_dir=workdir / "data",
        extra_args=["--flush-mode", flush_mode, "--segment-size", segment_size, "--heartbeat-ms", "1000",
                    "--log-level", "WARNING"],
        command_line=server_command_line,
        log_dir=workdir / "logs",
        tls_dir=tls_dir,
    )  # fmt: skip
    cluster.start_all()
    if cluster.wait_leader(60) is None:
        cluster.shutdown(30)
        raise RuntimeError("no leader elected")
    return cluster
