"""Development certificates for a mutual-TLS group (`dledger certs init`).

One self-signed CA, one certificate per member (SAN URI `dledger://<group>/<id>` plus
the DNS name `localhost`, the IP `127.0.0.1` and any extra hosts) and one per client
(SAN URI `dledger-client://<name>` and `dledger-role:<role>`). Keys are ECDSA P-256,
written with mode 0600. These are for development and tests: an operator with a real
PKI issues certificates with the same SAN URIs instead.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from dledger.bounded import read_bounded
from dledger.config_bounds import name_problem
from dledger.security.identity import ROLES, client_uri, member_uri, role_uri

CA_CERT = "ca.crt"
CA_KEY = "ca.key"


class CertsError(Exception):
    """The certificates cannot be written (existing files, bad names, I/O)."""


@dataclass(frozen=True)
class CertPlan:
    """What `write_dev_certs` makes.

    Attributes:
        group: the Raft group the member certificates name.
        members: member ids (`<id>.crt` / `<id>.key` each).
        clients: client name -> role (`client-<name>.crt` / `.key` each).
        hosts: extra DNS names or IP addresses of every member certificate.
        days: validity in days.
    """

    group: str
    members: tuple[str, ...]
    clients: dict[str, str] = field(default_factory=dict)
    hosts: tuple[str, ...] = ()
    days: int = 365

    def validate(self) -> None:
        """Raises CertsError for an empty group, bad ids or names, a role that is not
        one of ROLES, a name used twice or a validity below one day."""
        names = [self.group, *self.members, *self.clients]
        for name in names:
            if (problem := name_problem(name)) is not None:
                raise CertsError(problem)
        for host in self.hosts:
            if not _is_host(host):
                raise CertsError(
                    f"bad host {host!r}: neither an IP address nor a DNS name (letters, digits, '-', dots)"
                )
        if not self.members:
            raise CertsError("no members")
        if len(set(self.members)) != len(self.members):
            raise CertsError("a member id is given twice")
        for name, role in self.clients.items():
            if role not in ROLES:
                raise CertsError(f"client {name!r}: role {role!r} is not one of {', '.join(ROLES)}")
        if self.days < 1:
            raise CertsError("validity must be at least 1 day")

    def files(self) -> list[str]:
        """Every file name it writes."""
        out = [CA_CERT, CA_KEY]
        out += [f"{m}.{ext}" for m in self.members for ext in ("crt", "key")]
        out += [f"client-{c}.{ext}" for c in self.clients for ext in ("crt", "key")]
        return out


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "dledger-dev"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _builder(subject: str, issuer: x509.Name, public_key: object, days: int) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(public_key)  # type: ignore[arg-type]
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def _is_host(host: str) -> bool:
    """An IP address, or a DNS name of labels of 1-63 letters, digits and '-' (not at a
    label's ends; the last not all digits: `999.1.1.1`), at most 253 characters."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    labels = host.removesuffix(".").split(".")
    return (
        0 < len(host) <= 253
        and not labels[-1].isdigit()
        and all(
            0 < len(label) <= 63
            and label.isascii()
            and label.replace("-", "").isalnum()
            and label[0] != "-" != label[-1]
            for label in labels
        )
    )


def _host_names(hosts: tuple[str, ...]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    for host in hosts:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            out.append(x509.DNSName(host))
    return out


def _leaf(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    subject: str,
    sans: list[x509.GeneralName],
    usages: list[x509.ObjectIdentifier],
    days: int,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    builder = (
        _builder(subject, ca_name, key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        # key identifiers: a verifier that trusts two CAs of the same name (a CA being
        # rotated) finds the one that signed this certificate
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    return builder.sign(ca_key, hashes.SHA256()), key


def _write(path: Path, data: bytes, private: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def write_dev_certs(directory: Path, plan: CertPlan, *, force: bool = False) -> list[Path]:
    """Write a development CA and the certificates of `plan` into `directory`.

    Args:
        directory: created if missing.
        plan: what to write.
        force: overwrite existing files (otherwise any existing file is an error and
            nothing is written).

    Returns:
        The files written.

    Raises:
        CertsError: a bad plan, files that exist without `force`, or an I/O error.
    """
    plan.validate()
    existing = [name for name in plan.files() if (directory / name).exists()]
    if existing and not force:
        raise CertsError(f"{directory} already holds {', '.join(existing)} (use --force to overwrite)")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        return _write_all(directory, plan)
    except OSError as exc:
        for name in plan.files():  # nothing half-written that was not there before (an empty ca.crt
            if name not in existing:  # after a full disk made a corrected rerun need --force)
                with contextlib.suppress(OSError):
                    (directory / name).unlink()
        raise CertsError(f"cannot write certificates to {directory}: {exc}") from exc


def _write_all(directory: Path, plan: CertPlan) -> list[Path]:
    ca_key = _key()
    ca_name = _name(f"dledger dev CA ({plan.group})")
    ca_cert = (
        _builder(f"dledger dev CA ({plan.group})", ca_name, ca_key.public_key(), plan.days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    written = [directory / CA_CERT, directory / CA_KEY]
    _write(written[0], _pem(ca_cert), False)
    _write(written[1], _key_pem(ca_key), True)
    both = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    for member in plan.members:
        sans = [x509.UniformResourceIdentifier(member_uri(plan.group, member)), *_host_names(plan.hosts)]
        cert, key = _leaf(ca_key, ca_name, f"{plan.group}/{member}", sans, both, plan.days)
        written += _write_pair(directory, member, cert, key)
    for name, role in plan.clients.items():
        sans = [x509.UniformResourceIdentifier(client_uri(name)), x509.UniformResourceIdentifier(role_uri(role))]
        cert, key = _leaf(ca_key, ca_name, name, sans, [ExtendedKeyUsageOID.CLIENT_AUTH], plan.days)
        written += _write_pair(directory, f"client-{name}", cert, key)
    return written


def _write_pair(directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> list[Path]:
    crt_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    _write(crt_path, _pem(cert), False)
    _write(key_path, _key_pem(key), True)
    return [crt_path, key_path]


def issue_member_cert(directory: Path, group: str, member_id: str, *, stem: str | None = None, days: int = 365) -> Path:
    """Sign one more member certificate with the CA in `directory` (e.g. for a member
    added later), written as `<stem or member_id>.crt` / `.key`.

    Raises:
        CertsError: the CA files cannot be read, or the files exist.
    """
    try:
        ca_cert = x509.load_pem_x509_certificate(read_bounded(directory / CA_CERT))
        ca_key = serialization.load_pem_private_key(read_bounded(directory / CA_KEY), password=None)
    except (OSError, ValueError) as exc:
        raise CertsError(f"cannot read the CA in {directory}: {exc}") from exc
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise CertsError(f"{directory / CA_KEY} is not an EC key")
    name = stem or member_id
    if (directory / f"{name}.crt").exists():
        raise CertsError(f"{directory / name}.crt exists")
    CertPlan(group, (member_id,), days=days).validate()
    sans = [x509.UniformResourceIdentifier(member_uri(group, member_id)), *_host_names(())]
    usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    cert, key = _leaf(ca_key, ca_cert.subject, f"{group}/{member_id}", sans, usages, days)
    return _write_pair(directory, name, cert, key)[0]
