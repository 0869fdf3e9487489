"""The TLS options of the command line: `--tls-cert`, `--tls-key`, `--tls-ca` for the
client commands (also from DLEDGER_TLS_CERT / DLEDGER_TLS_KEY / DLEDGER_TLS_CA) and for
`dledger server` (options or YAML keys `tlsCert`, `tlsKey`, `tlsCa`; never from the
environment, so a shell set up for client commands cannot hand a client certificate to
the members `dledger cluster` starts), plus `--insecure` and `--reflection`."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from dledger.cli.param_types import NonEmptyPath
from dledger.codes import DLedgerError
from dledger.security.probe import with_tls_hint
from dledger.security.tls import ENV_CA, ENV_CERT, ENV_KEY, ENV_TOKEN, TlsConfig, TlsError, is_loopback

F = TypeVar("F", bound=Callable[..., Any])

_META_KEY = "dledger.tls"
_CLIENT_KEY = "dledger.client"
_SETTINGS = f"--tls-cert, --tls-key and --tls-ca (or {ENV_CERT}, {ENV_KEY}, {ENV_CA})"
_FILE = NonEmptyPath(dir_okay=False)

EXIT_USAGE = 2


def _remember(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    ctx.meta.setdefault(_META_KEY, {})[param.name or ""] = value


def client_tls_options(fn: F) -> F:
    """Decorator: --tls-cert/--tls-key/--tls-ca and --token for a client command
    (environment DLEDGER_TLS_*, DLEDGER_TOKEN); read them with `client_tls()` and
    `client_token()`. The command's signature is unchanged."""
    fn = click.option(
        "--token",
        "token",
        envvar=ENV_TOKEN,
        show_envvar=True,
        expose_value=False,
        callback=_remember,
        metavar="TOKEN",
        help="Bearer token for the members' client ports (--client-address), with --tls-ca and no client "
        f"certificate. Prefer {ENV_TOKEN}: options show in the process list.",
    )(fn)
    for name, env, what in (
        ("ca", ENV_CA, "CA certificate the members' certificates must chain to"),
        ("key", ENV_KEY, "Private key of the client certificate"),
        ("cert", ENV_CERT, "Client certificate (mutual TLS; its role decides what may be called)"),
    ):
        fn = click.option(
            f"--tls-{name}",
            f"tls_{name}",
            type=_FILE,
            envvar=env,
            show_envvar=True,
            expose_value=False,
            callback=_remember,
            help=f"{what}.",
        )(fn)
    return fn


def client_tls() -> TlsConfig | None:
    """The TLS settings the current client command was given (None: plaintext).

    Raises:
        click.BadParameter: only some are given, a file cannot be read, the key is not the
            certificate's, or the certificate is not valid now (exit 2).
    """
    given = _given()
    token = given.get("token")
    try:
        tls = TlsConfig.from_options(
            given.get("tls_cert"), given.get("tls_key"), given.get("tls_ca"), allow_ca_only=bool(token)
        )
        if tls is not None:
            tls.read_matching()
    except TlsError as exc:
        raise click.BadParameter(str(exc), param_hint="'--tls-cert/--tls-key/--tls-ca'") from exc
    if token and tls is None:
        raise click.BadParameter(
            f"a bearer token is only sent over TLS: give --tls-ca (or {ENV_CA})", param_hint="'--token'"
        )
    if token and not (token.isascii() and token.isprintable() and " " not in token):
        # gRPC sends it in a header: anything else failed deep in gRPC (a traceback, or a
        # NETWORK_ERROR that blamed the members)
        raise click.BadParameter("not a token: printable ASCII without spaces", param_hint="'--token'")
    return tls


def client_token() -> str | None:
    """The bearer token the current client command was given (None: none)."""
    token = _given().get("token")
    return token or None


def _given() -> dict[str, str | None]:
    ctx = click.get_current_context(silent=True)
    given: dict[str, str | None] = ctx.meta.get(_META_KEY, {}) if ctx is not None else {}
    return given


def remember_client(peers: Mapping[str, str], tls: TlsConfig | None) -> None:
    """Note the members the current command's client talks to, and its TLS settings,
    for `unreachable_hint`."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta[_CLIENT_KEY] = (dict(peers), tls)


def unreachable_hint(exc: DLedgerError) -> DLedgerError:
    """`exc`, with a hint added when a client command failed because no member answered
    and the members speak TLS where the command did not, or the reverse
    (`dledger.security.probe.with_tls_hint`)."""
    ctx = click.get_current_context(silent=True)
    client = ctx.meta.get(_CLIENT_KEY) if ctx is not None else None
    if client is None:
        return exc
    peers, tls = client
    return with_tls_hint(exc, peers, tls, _SETTINGS)


def server_tls_options(fn: F) -> F:
    """Decorator: --tls-cert/--tls-key/--tls-ca (passed as tls_cert, tls_key, tls_ca),
    --client-address/--tokens-file, --insecure and --reflection of `dledger server`."""
    fn = click.option("--reflection", is_flag=True, help="Serve gRPC server reflection (off by default).")(fn)
    fn = click.option(
        "--tokens-file",
        type=_FILE,
        help="Bearer tokens the client port accepts: lines 'name role sha256' (see `dledger certs token`); "
        "read again within a second of a change, so tokens are added or revoked without a restart.",
    )(fn)
    fn = click.option(
        "--client-address",
        metavar="HOST:PORT",
        help="Also serve clients with bearer tokens here (server-side TLS, no client certificate; needs "
        "--tls-* and --tokens-file). The Peer service is refused there.",
    )(fn)
    fn = click.option(
        "--insecure",
        is_flag=True,
        help="Allow listening on a non-loopback address without TLS (anyone reaching the port can act as a member).",
    )(fn)
    fn = click.option("--tls-ca", type=_FILE, help="CA every peer and client certificate must chain to.")(fn)
    fn = click.option("--tls-key", type=_FILE, help="Private key of this member's certificate.")(fn)
    fn = click.option(
        "--tls-cert", type=_FILE, help="This member's certificate (SAN URI dledger://<group>/<id>); mutual TLS."
    )(fn)
    return fn


def refuse_plaintext(address: str, tls_on: bool, insecure: bool) -> None:
    """Exit 2 with one line when `address` is not loopback, TLS is off and `--insecure`
    was not given."""
    if tls_on or insecure or is_loopback(address):
        return
    click.echo(
        f"error: refusing to listen on {address} without TLS: anyone who can reach it could act as a member "
        "or a client; give --tls-cert/--tls-key/--tls-ca (see `dledger certs init`), or --insecure",
        err=True,
    )
    sys.exit(EXIT_USAGE)
