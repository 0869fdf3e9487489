"""TLS settings of a member or a client: certificate, key and CA files, loaded into gRPC
credentials. Members require and verify a client certificate (mutual TLS).

gRPC is imported only where credentials are made: a `TlsConfig` is a plain value that
Spark pickles to its executors without importing gRPC where it is unpickled."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_CERT = "DLEDGER_TLS_CERT"
ENV_KEY = "DLEDGER_TLS_KEY"
ENV_CA = "DLEDGER_TLS_CA"


class TlsError(ValueError):
    """TLS settings that are incomplete or files that cannot be read."""


@dataclass(frozen=True)
class TlsConfig:
    """Paths of the PEM files of one TLS identity.

    Attributes:
        cert: this side's certificate (chain).
        key: its private key.
        ca: the CA certificate(s) the other side's certificate must chain to.
    """

    cert: str
    key: str
    ca: str

    @classmethod
    def from_options(cls, cert: str | None, key: str | None, ca: str | None) -> TlsConfig | None:
        """None when no option is given, a TlsConfig when all three are.

        Raises:
            TlsError: some but not all are given.
        """
        given = {"cert": cert, "key": key, "ca": ca}
        if not any(given.values()):
            return None
        missing = [name for name, value in given.items() if not value]
        if missing:
            raise TlsError(f"TLS needs a certificate, a key and a CA: missing --tls-{', --tls-'.join(missing)}")
        assert cert and key and ca
        return cls(cert, key, ca)

    @classmethod
    def from_env(cls) -> TlsConfig | None:
        """From DLEDGER_TLS_CERT, DLEDGER_TLS_KEY and DLEDGER_TLS_CA (None when unset).

        Raises:
            TlsError: some but not all are set.
        """
        return cls.from_options(os.environ.get(ENV_CERT), os.environ.get(ENV_KEY), os.environ.get(ENV_CA))

    @classmethod
    def in_directory(cls, directory: str | Path, stem: str) -> TlsConfig:
        """The files `certs init` writes for `stem` (a member id or `client-<name>`)."""
        base = Path(directory)
        return cls(str(base / f"{stem}.crt"), str(base / f"{stem}.key"), str(base / "ca.crt"))

    def read(self) -> tuple[bytes, bytes, bytes]:
        """(certificate, key, CA) bytes.

        Raises:
            TlsError: a file cannot be read or is not PEM.
        """
        out = []
        for what, path in (("certificate", self.cert), ("key", self.key), ("CA", self.ca)):
            try:
                data = Path(path).read_bytes()
            except OSError as exc:
                raise TlsError(f"cannot read the TLS {what} {path}: {exc.strerror or exc}") from exc
            if b"-----BEGIN " not in data:
                raise TlsError(f"the TLS {what} {path} is not a PEM file")
            out.append(data)
        return out[0], out[1], out[2]

    def server_credentials(self) -> Any:
        """gRPC server credentials that require a client certificate from this CA."""
        import grpc  # type: ignore[import-untyped]

        cert, key, ca = self.read()
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)

    def channel_credentials(self) -> Any:
        """gRPC channel credentials presenting this certificate, trusting this CA."""
        import grpc

        cert, key, ca = self.read()
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


def is_loopback(address: str) -> bool:
    """True when `host:port` names a loopback host (127.0.0.0/8, ::1, localhost)."""
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
