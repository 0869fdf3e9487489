"""TLS settings of a member or a client: certificate, key and CA files, loaded into gRPC
credentials. Members require and verify a client certificate (mutual TLS).

A member's server reads its files again when they change (`server_credentials`: gRPC
asks before every new connection's handshake, the files are looked at no more than once
a second), so certificates, keys and CAs are rotated without a restart; a rotation half
done (a certificate whose key is not there yet) or an unreadable file keeps the files
read before, with an error logged. The member's own connections to its peers follow
(`dledger.transport.grpc_client.GrpcTransport`).

gRPC is imported only where credentials are made: a `TlsConfig` is a plain value that
Spark pickles to its executors without importing gRPC where it is unpickled."""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dledger.bounded import read_bounded
from dledger.security.watch import FileWatch

log = logging.getLogger(__name__)

ENV_CERT = "DLEDGER_TLS_CERT"
ENV_KEY = "DLEDGER_TLS_KEY"
ENV_CA = "DLEDGER_TLS_CA"
ENV_TOKEN = "DLEDGER_TOKEN"


class TlsError(ValueError):
    """TLS settings that are incomplete or files that cannot be read."""


@dataclass(frozen=True)
class TlsConfig:
    """Paths of the PEM files of one TLS identity.

    Attributes:
        cert: this side's certificate (chain); "" for a client that authenticates with
            a bearer token instead (server-side TLS only: `ca_only`).
        key: its private key ("" with no certificate).
        ca: the CA certificate(s) the other side's certificate must chain to.
    """

    cert: str
    key: str
    ca: str

    @classmethod
    def ca_only(cls, ca: str) -> TlsConfig:
        """TLS that verifies the server against `ca` and presents no certificate (a
        client that authenticates with a bearer token on a member's client port)."""
        return cls("", "", ca)

    @property
    def has_certificate(self) -> bool:
        """True when this side presents a certificate."""
        return bool(self.cert)

    @classmethod
    def from_options(
        cls, cert: str | None, key: str | None, ca: str | None, *, allow_ca_only: bool = False
    ) -> TlsConfig | None:
        """None when no option is given, a TlsConfig when all three are (or only the CA,
        with `allow_ca_only`: a bearer-token client).

        Raises:
            TlsError: some but not all are given.
        """
        given = {"cert": cert, "key": key, "ca": ca}
        if not any(given.values()):
            return None
        if allow_ca_only and ca and not cert and not key:
            return cls.ca_only(ca)
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
        """(certificate, key, CA) bytes (b"" for a certificate and key not given).

        Raises:
            TlsError: a file cannot be read or is not PEM.
        """
        out = []
        for what, path in (("certificate", self.cert), ("key", self.key), ("CA", self.ca)):
            if not path and what != "CA":
                out.append(b"")
                continue
            try:
                data = read_bounded(path)
            except OSError as exc:
                raise TlsError(f"cannot read the TLS {what} {path}: {exc.strerror or exc}") from exc
            if b"-----BEGIN " not in data:
                raise TlsError(f"the TLS {what} {path} is not a PEM file")
            out.append(data)
        return out[0], out[1], out[2]

    def read_matching(self, now: datetime.datetime | None = None) -> tuple[bytes, bytes, bytes]:
        """`read`; the key must be the certificate's (a rotation may be half done), and
        the certificate valid `now` (default: the current time): every handshake with an
        expired one fails. One that expires within EXPIRY_WARNING is logged.

        Raises:
            TlsError: a file cannot be read, is not PEM, the key does not match, or the
                certificate has expired or is not valid yet.
        """
        cert, key, ca = self.read()
        if cert and not key_matches(cert, key):
            raise TlsError(f"the TLS key {self.key} is not the key of the certificate {self.cert}")
        if cert and not issued_by(cert, ca):  # helper K: such a member started, and sat isolated
            raise TlsError(
                f"the TLS certificate {self.cert} is not signed by the CA {self.ca}: every peer that trusts this CA "
                "refuses it (give the CA that signed it, or a certificate signed by this CA)"
            )
        if cert:
            check_validity(cert, self.cert, now or datetime.datetime.now(datetime.UTC))
        return cert, key, ca

    def watch(self, clock: Callable[[], float] = time.monotonic) -> FileWatch:
        """A `FileWatch` over the files given (a `ca_only` config has no certificate or
        key to watch), to be made before they are read: a change in between is then
        seen at the first look."""
        return FileWatch([path for path in (self.cert, self.key, self.ca) if path], clock)

    def server_credentials(self, *, client_certificates: bool = True) -> Any:
        """gRPC server credentials that require a client certificate from this CA
        (`client_certificates=False`: server-side TLS, no client certificate asked for),
        taking the files again after they change (see the module docstring).

        Raises:
            TlsError: the files cannot be read now, the key does not match, or the
                certificate is not valid now (`read_matching`).
        """
        import grpc  # type: ignore[import-untyped]

        def configuration(files: tuple[bytes, bytes, bytes]) -> Any:
            cert, key, ca = files
            return grpc.ssl_server_certificate_configuration([(key, cert)], ca if client_certificates else None)

        watch = self.watch()
        initial = configuration(self.read_matching())

        def fetch() -> Any:
            if not watch.changed():
                return None
            try:
                files = self.read_matching()
            except TlsError as exc:
                log.error("%s; the TLS files read before stay in use", exc)
                return None
            log.info("read the TLS files again (%s, %s, %s)", self.cert, self.key, self.ca)
            return configuration(files)

        return grpc.dynamic_ssl_server_credentials(initial, fetch, require_client_authentication=client_certificates)

    def matching_credentials(self, token: str | None = None) -> Any:
        """`channel_credentials` from the files as they are now (`read_matching`).

        Raises:
            TlsError: a file cannot be read, is not PEM, the key does not match, or the
                certificate is not valid now.
        """
        return self.channel_credentials(token, files=self.read_matching())

    def channel_credentials(self, token: str | None = None, *, files: tuple[bytes, bytes, bytes] | None = None) -> Any:
        """gRPC channel credentials presenting this certificate (if any), trusting this
        CA, and sending `token` as `authorization: Bearer` with every call (`files`:
        what `read` gave, when the caller has read them already)."""
        import grpc

        cert, key, ca = files if files is not None else self.read()
        credentials = grpc.ssl_channel_credentials(
            root_certificates=ca, private_key=key or None, certificate_chain=cert or None
        )
        if token:
            credentials = grpc.composite_channel_credentials(credentials, grpc.access_token_call_credentials(token))
        return credentials


EXPIRY_WARNING = datetime.timedelta(days=14)
"""A certificate read with less than this left is logged as a warning (once a process:
a member reads its files twice at start, a Spark executor once a task)."""
_warned: set[tuple[str, datetime.datetime]] = set()


def check_validity(cert_pem: bytes, path: str, now: datetime.datetime) -> None:
    """Refuse a certificate (its first one) that is not valid at `now`; log a warning
    when it expires within EXPIRY_WARNING (once per file and expiry time).

    Raises:
        TlsError: expired, not valid yet, or not a certificate.
    """
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise TlsError(f"the TLS certificate {path} is not a certificate: {exc}") from None
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    if now > end:
        raise TlsError(f"the TLS certificate {path} expired at {end:%Y-%m-%d %H:%M} UTC")
    if now < start:
        raise TlsError(
            f"the TLS certificate {path} is not valid before {start:%Y-%m-%d %H:%M} UTC (is this clock right?)"
        )
    if end - now < EXPIRY_WARNING and (path, end) not in _warned:
        _warned.add((path, end))
        left = (end - now).total_seconds() / 86400
        log.warning("the TLS certificate %s expires at %s UTC, in %.1f days", path, f"{end:%Y-%m-%d %H:%M}", left)


def key_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    """Whether `key_pem` (PEM private key) is the key of `cert_pem` (PEM certificate,
    its first one); False for data neither parses as."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    public = serialization.PublicFormat.SubjectPublicKeyInfo
    try:
        cert_key = x509.load_pem_x509_certificate(cert_pem).public_key()
        private = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    encoding = serialization.Encoding.DER
    return bool(cert_key.public_bytes(encoding, public) == private.public_key().public_bytes(encoding, public))


def issued_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    """Whether the first certificate of `cert_pem` is signed by a certificate of `ca_pem`
    or by one that follows it in `cert_pem` (an intermediate sent along); False for data
    that does not parse."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature

    try:
        leaf, *chain = x509.load_pem_x509_certificates(cert_pem)
        issuers = x509.load_pem_x509_certificates(ca_pem) + chain
    except ValueError:
        return False
    for issuer in issuers:
        try:
            leaf.verify_directly_issued_by(issuer)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return True
    return False


def is_loopback(address: str) -> bool:
    """True when `host:port` names a loopback host (127.0.0.0/8, ::1, localhost)."""
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
