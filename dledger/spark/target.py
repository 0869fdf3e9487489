"""Where a read or write of the `dledger` data source goes, parsed without Spark: a local
store directory (offline) or a live cluster (`peers`, `group`); for a cluster whose
members speak mutual TLS, the client certificate, its key and the CA (`tlsCert`,
`tlsKey`, `tlsCa`: PEM files at these paths on the driver and on every executor, as
Kafka's `kafka.ssl.*.location` options; the certificate's role decides what the job
may do: `read` to read, `write` to write). Against the members' client ports, a bearer
token (`token`, with `tlsCa` only) stands for the certificate; Spark redacts options
named like `token` in its plans and UI.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dledger.config import DEFAULT_GROUP, ConfigError, parse_peers
from dledger.security.tls import TlsConfig

TLS_OPTIONS = ("tlsCert", "tlsKey", "tlsCa")
TARGET_OPTIONS = ("path", "peers", "group", *TLS_OPTIONS, "token")
"""The options every read and write takes."""


class OptionError(ValueError):
    """An option or a schema given to the `dledger` data source is invalid."""


@dataclass(frozen=True)
class Target:
    """Where the log is: a local store directory (offline) or a live cluster.

    Attributes:
        path: the node directory (`dledger-<selfId>`) or a storeBaseDir holding one;
            None for a live cluster.
        peers: DLedger's peers string (`n0-host:port;n1-host:port`); None offline.
        group: the DLedger group.
        tls: mutual TLS with the members (None: plaintext); server-side TLS only
            (`TlsConfig.ca_only`) with a token.
        token: the bearer token sent with every call (None: none).
    """

    path: str | None
    peers: str | None
    group: str
    tls: TlsConfig | None = None
    token: str | None = None

    @property
    def is_live(self) -> bool:
        """True when the log is read through a cluster's gRPC service."""
        return self.peers is not None

    def peer_map(self) -> dict[str, str]:
        """{node id: address} of the peers (empty offline)."""
        return parse_peers(self.peers) if self.peers else {}


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """The options with their names lower-cased (Spark passes them so; users may not),
    unset ones left out."""
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def parse_target(options: Mapping[str, str]) -> Target:
    """The `path` / `peers` / `group` / TLS options (names lower-cased, as Spark passes
    them): exactly one of path and peers; the three TLS files together, and only with
    peers."""
    opts = {name: value.strip() for name, value in lower_keys(options).items()}
    for name in ("group", "token", *TLS_OPTIONS):  # (an empty path or peers: the messages below)
        if name.lower() in opts and not opts[name.lower()]:
            default = f" (default {DEFAULT_GROUP!r})" if name == "group" else ""
            raise OptionError(f"option {name} is empty: give it a value or leave it out{default}")
    path = opts.get("path") or None
    peers = opts.get("peers") or None
    group = opts.get("group") or DEFAULT_GROUP
    if path and peers:
        raise OptionError(
            "options path and peers are mutually exclusive: give path (a store directory, read offline) "
            "or peers (a live cluster, e.g. n0-127.0.0.1:20911;n1-127.0.0.1:20912), not both"
        )
    if not path and not peers:
        raise OptionError(
            "the dledger source needs a store directory (load(path) or option path) "
            "or a live cluster (option peers, e.g. n0-127.0.0.1:20911;n1-127.0.0.1:20912)"
        )
    if peers:
        try:
            parse_peers(peers)
        except ConfigError as exc:
            raise OptionError(f"option peers: {exc}") from None
    token = opts.get("token") or None
    return Target(path, peers, group, _tls(opts, live=bool(peers), token=bool(token)), token)


def _tls(opts: Mapping[str, str], live: bool, token: bool) -> TlsConfig | None:
    files = {name: opts.get(name.lower()) or None for name in TLS_OPTIONS}
    given = [name for name, value in files.items() if value] + (["token"] if token else [])
    if not given:
        return None
    if not live:
        raise OptionError(
            f"option {given[0]} is for a live cluster (option peers): an offline read opens the store directory"
        )
    if token:
        if not files["tlsCa"]:
            raise OptionError("option token is sent over TLS only: give option tlsCa (the members' CA) with it")
        if not files["tlsCert"] and not files["tlsKey"]:
            return TlsConfig.ca_only(files["tlsCa"])
    missing = [name for name, value in files.items() if not value]
    if missing:
        raise OptionError(
            "mutual TLS needs a client certificate, its key and the CA: "
            f"give {', '.join(TLS_OPTIONS)} together (missing {', '.join(missing)})"
        )
    return TlsConfig(files["tlsCert"] or "", files["tlsKey"] or "", files["tlsCa"] or "")


__all__ = [
    "DEFAULT_GROUP",
    "TARGET_OPTIONS",
    "TLS_OPTIONS",
    "OptionError",
    "Target",
    "lower_keys",
    "parse_target",
]
