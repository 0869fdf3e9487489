"""`dledger`: the command-line entry point (subcommands live in sibling modules)."""

from __future__ import annotations

import logging

import click

from dledger import __version__
from dledger.cli.bench_cmd import bench
from dledger.cli.certs import certs
from dledger.cli.client_cmds import append, get, leadership_transfer
from dledger.cli.cluster_cmd import cluster
from dledger.cli.demo import demo
from dledger.cli.errors import GuardedGroup
from dledger.cli.kv_cmd import kv
from dledger.cli.query_cmd import query
from dledger.cli.server_cmds import server
from dledger.cli.status_cmd import status
from dledger.cli.store_tools import check, read_file


@click.group(cls=GuardedGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dledger")
@click.option("-v", "--verbose", is_flag=True, help="Log what the store does (recovery, retention).")
def main(verbose: bool) -> None:
    """dledger-py: a Raft-replicated commit log, byte-compatible with RocketMQ's DLedger.

    Exit status: 0 done, 1 failed (one `error:` line on stderr), 2 usage error, 130
    interrupted (Ctrl-C). Client commands read --peers and --group from DLEDGER_PEERS
    and DLEDGER_GROUP when the options are not given.
    """
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(message)s")


main.add_command(read_file)
main.add_command(check)
main.add_command(demo)
main.add_command(server)
main.add_command(cluster)
main.add_command(append)
main.add_command(get)
main.add_command(status)
main.add_command(leadership_transfer)
main.add_command(query)
main.add_command(kv)
main.add_command(bench)
main.add_command(certs)


if __name__ == "__main__":
    main()
