"""Does a member speak TLS? A diagnostic for a client that reached no member.

A plaintext gRPC client that dials a member serving mutual TLS sees no TLS error: the
member drops the connection, and the client reports a timeout or "Socket closed". The
opposite mistake (TLS to a plaintext member) is as silent, and so is a bearer-token
client (no certificate) dialing a member's mutual-TLS port instead of its client port.
`speaks_tls` asks the member directly with a TLS handshake of its own (no certificate,
nothing verified, nothing sent after it), and `wants_certificate` whether it then drops
a connection without a certificate, so a command can say which mistake it was.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from dledger.codes import DLedgerError, ResponseCode
from dledger.config import parse_address
from dledger.security.tls import TlsConfig

PROBE_TIMEOUT_S = 1.0
"""How long one probe waits for a member to connect and answer the handshake."""


def speaks_tls(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool | None:
    """True when the server at `host:port` answers a TLS handshake (it completes, or the
    server refuses it with a TLS alert, as a server that requires a client certificate
    does); False when something answers that is not TLS (a plaintext gRPC server); None
    when nothing answers in time or `address` is not `host:port`."""
    return _probe(address, timeout_s, after_handshake=False)


def wants_certificate(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool | None:
    """True when the TLS server at `host:port` drops a connection that presented no
    client certificate (a member's mutual-TLS port); False when it goes on to speak
    (HTTP/2 settings: a client port); None when it does not answer, or not in TLS."""
    return _probe(address, timeout_s, after_handshake=True)


def _probe(address: str, timeout_s: float, after_handshake: bool) -> bool | None:
    try:
        host, port = parse_address(address)
        sock = socket.create_connection((host.strip("[]"), port), timeout=timeout_s)
    except (OSError, ValueError):  # ValueError: dledger.config.ConfigError
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        with context.wrap_socket(sock, do_handshake_on_connect=False) as tls:
            tls.do_handshake()
            if not after_handshake:
                return True
            try:
                return not tls.recv(1)  # b"": closed on us (TLS 1.3 checks the certificate now)
            except ssl.SSLError:
                return True  # an alert (certificate required)
    except ssl.SSLError as exc:
        if after_handshake:
            return True if "CERTIFICATE" in (exc.reason or "") else None
        return "ALERT" in (exc.reason or "")
    except TimeoutError:
        return None
    except OSError:  # reset or closed in the middle of the handshake: not a TLS server
        return None if after_handshake else False
    finally:
        sock.close()


def tls_mismatch(
    peers: Mapping[str, str],
    using_tls: bool,
    settings: str,
    timeout_s: float = PROBE_TIMEOUT_S,
    *,
    with_certificate: bool = True,
) -> str | None:
    """A sentence naming the members whose TLS setting differs from the client's
    (`using_tls`, made with `settings`: how the user gives the client its certificate,
    key and CA; `with_certificate=False`: TLS without a client certificate, as a
    bearer-token client speaks), probed in parallel; None when every member that answers
    agrees, or none answers."""
    answers = _ask(peers, speaks_tls, timeout_s)
    wrong = [member for member, tls in answers.items() if tls is not None and tls != using_tls]
    if wrong and using_tls:
        return f"{_names(peers, wrong)} answered in plaintext, not TLS: leave out {settings}"
    if wrong:
        return f"{_names(peers, wrong)} {'serves' if len(wrong) == 1 else 'serve'} TLS: pass {settings}"
    if using_tls and not with_certificate:
        wanting = [member for member, wants in _ask(peers, wants_certificate, timeout_s).items() if wants]
        if wanting:
            return (
                f"{_names(peers, wanting)} {'wants' if len(wanting) == 1 else 'want'} a client certificate: a bearer "
                "token is taken on the members' client ports (`dledger server --client-address`); list those, or "
                f"use a certificate ({settings})"
            )
    return None


def _ask(
    peers: Mapping[str, str], probe: Callable[[str, float], bool | None], timeout_s: float
) -> dict[str, bool | None]:
    with ThreadPoolExecutor(max_workers=max(1, min(len(peers), 8))) as pool:
        found = pool.map(lambda address: probe(address, timeout_s), peers.values())
        return dict(zip(peers, found, strict=True))


def _names(peers: Mapping[str, str], members: list[str]) -> str:
    return ", ".join(f"{member} ({peers[member]})" for member in members)


def with_tls_hint(exc: DLedgerError, peers: Mapping[str, str], tls: TlsConfig | None, settings: str) -> DLedgerError:
    """`exc` with `; hint: <tls_mismatch>` added to its message when no member answered
    (TIMEOUT, NETWORK_ERROR) and some speak TLS where the client (TLS settings `tls`,
    None: plaintext) did not, or the reverse, or want a certificate the client does not
    have; else `exc` itself (also when it is a subclass, such as an indeterminate
    outcome, whose meaning a copy would lose)."""
    if type(exc) is not DLedgerError or exc.code not in (ResponseCode.TIMEOUT, ResponseCode.NETWORK_ERROR):
        return exc
    with_certificate = tls is None or tls.has_certificate
    mismatch = tls_mismatch(peers, tls is not None, settings, with_certificate=with_certificate)
    if mismatch is None:
        return exc
    return DLedgerError(exc.code, f"{exc.message}; hint: {mismatch}")
