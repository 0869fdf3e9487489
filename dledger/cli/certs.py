"""`dledger certs init`: a development CA and member / client certificates for a
mutual-TLS group (see dledger.security.certs); `dledger certs token`: a bearer token for
the members' client ports (see dledger.security.tokens)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from dledger.cli.config_file import member_id_problem
from dledger.cli.errors import GuardedCommand, GuardedGroup, fail
from dledger.cli.param_types import NonEmptyPath
from dledger.security.identity import ROLES

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

DEFAULT_CLIENTS = ("admin:admin", "writer:write", "reader:read")


def parse_clients(specs: tuple[str, ...]) -> dict[str, str]:
    """`("alice:write", "bob")` -> {"alice": "write", "bob": "read"}.

    Raises:
        click.BadParameter: a role that is not read, write or admin, or a name twice.
    """
    clients: dict[str, str] = {}
    for spec in specs:
        name, _, role = spec.partition(":")
        role = role or "read"
        if role not in ROLES:
            raise click.BadParameter(f"{spec!r}: role must be one of {', '.join(ROLES)}", param_hint="'--client'")
        if name in clients:
            raise click.BadParameter(f"client {name!r} is given twice", param_hint="'--client'")
        clients[name] = role
    return clients


def parse_members(members: str) -> tuple[str, ...]:
    """`"n0,n1,n2"` or a count `"3"` -> ("n0", "n1", "n2"); ids as `--peers` takes
    them (`member_id_problem`).

    Raises:
        click.BadParameter: no members, an empty item (`3,`), an id `--peers` refuses
            (`n-0`), an id twice, or a count outside 1..99.
    """
    text = members.strip()
    if text.isdigit():
        count = int(text)
        if not 1 <= count <= 99:
            raise click.BadParameter("a member count must be 1..99", param_hint="'--members'")
        return tuple(f"n{k}" for k in range(count))
    if not text:
        raise click.BadParameter("no member ids", param_hint="'--members'")
    ids = tuple(item.strip() for item in text.replace(";", ",").split(","))
    for node_id in ids:
        problem = member_id_problem(node_id)
        if problem is not None:
            raise click.BadParameter(f"{problem} in {members!r}", param_hint="'--members'")
    if len(set(ids)) < len(ids):
        raise click.BadParameter(f"a member id is given twice in {members!r}", param_hint="'--members'")
    return ids


@click.group(cls=GuardedGroup, context_settings=CONTEXT, no_args_is_help=False)
def certs() -> None:
    """Development certificates and bearer tokens for a TLS group."""


@certs.command("init", cls=GuardedCommand, context_settings=CONTEXT)
@click.argument("directory", type=NonEmptyPath(file_okay=False, path_type=Path))
@click.option("-g", "--group", default="default", show_default=True, help="Raft group the members belong to.")
@click.option(
    "-m", "--members", default="3", show_default=True, help="Member ids (n0,n1,...) or a count (3 = n0,n1,n2)."
)
@click.option(
    "--client",
    "clients",
    multiple=True,
    metavar="NAME[:ROLE]",
    help="A client certificate (role read, write or admin; default read). Repeat. "
    f"[default: {' '.join(DEFAULT_CLIENTS)}]",
)
@click.option("--host", "hosts", multiple=True, help="Extra DNS name or IP of the member certificates. Repeat.")
@click.option("--days", type=click.IntRange(1, 36500), default=365, show_default=True, help="Validity in days.")
@click.option("--force", is_flag=True, help="Overwrite existing files.")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as one JSON object.")
def init(
    directory: Path,
    group: str,
    members: str,
    clients: tuple[str, ...],
    hosts: tuple[str, ...],
    days: int,
    force: bool,
    as_json: bool,
) -> None:
    """Write a development CA (ca.crt, ca.key), one certificate per member (<id>.crt,
    <id>.key: SAN URI dledger://<group>/<id>, localhost, 127.0.0.1) and client
    certificates (client-<name>.crt/.key: SAN URI dledger-client://<name> and its role)
    into DIRECTORY. Keys are written with mode 0600. Exit 0 on success, 1 when the
    files cannot be written (or exist, without --force), 2 for bad options.

    \b
      dledger certs init tls -g default -m 3
      dledger server -i n0 -p "$P" --tls-cert tls/n0.crt --tls-key tls/n0.key --tls-ca tls/ca.crt
      dledger status -p "$P" --tls-cert tls/client-admin.crt --tls-key tls/client-admin.key --tls-ca tls/ca.crt
    """
    from dledger.security.certs import CertPlan, CertsError, write_dev_certs

    plan = CertPlan(group, parse_members(members), parse_clients(clients or DEFAULT_CLIENTS), hosts, days)
    try:
        plan.validate()
    except CertsError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        written = write_dev_certs(directory, plan, force=force)
    except CertsError as exc:
        fail(str(exc))
    if as_json:
        files = [str(path) for path in written]
        click.echo(
            json.dumps(
                {
                    "directory": str(directory),
                    "group": group,
                    "members": list(plan.members),
                    "clients": dict(plan.clients),
                    "files": files,
                }
            )
        )
        return
    click.echo(f"wrote {len(written)} files to {directory}: CA, members {', '.join(plan.members)}, ", nl=False)
    click.echo("clients " + ", ".join(f"{n} ({r})" for n, r in plan.clients.items()))


@certs.command("token", cls=GuardedCommand, context_settings=CONTEXT)
@click.argument("name")
@click.option("--role", type=click.Choice(ROLES), default="read", show_default=True, help="What the token may call.")
@click.option(
    "-f",
    "--file",
    "tokens_file",
    type=NonEmptyPath(dir_okay=False, path_type=Path),
    required=True,
    help="The tokens file to add it to (created with mode 0600 when missing).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the name, role and token as one JSON object.")
def token(name: str, role: str, tokens_file: Path, as_json: bool) -> None:
    """Make a bearer token for client NAME, add its SHA-256 to the tokens file and print
    the token (it is shown only here). Members read the file again within a second of a
    change (`dledger server --client-address HOST:PORT --tokens-file FILE`): delete a
    token's line to revoke it. Clients send it
    with `--token` or DLEDGER_TOKEN and `--tls-ca`. Exit 0 on success, 1 when the file
    cannot be read or written, 2 for a bad name or role.

    \b
      export DLEDGER_TOKEN=$(dledger certs token dashboard --role read -f tls/tokens)
      dledger get 0 -p "n0-127.0.0.1:21911" --tls-ca tls/ca.crt
    """
    from dledger.security.tokens import TokenFileError, add_token, client_problem

    problem = client_problem(name, role)
    if problem:
        raise click.BadParameter(problem, param_hint="'NAME'")
    try:
        made = add_token(tokens_file, name, role)
    except TokenFileError as exc:
        fail(str(exc))
    if as_json:
        click.echo(json.dumps({"name": name, "role": role, "token": made, "file": str(tokens_file)}))
    else:
        click.echo(made)
