"""Does a member speak TLS? A diagnostic for a client that reached no member.

A plaintext gRPC client that dials a member serving mutual TLS sees no TLS error: the
member drops the connection, and the client reports a timeout or "Socket closed". The
opposite mistake (TLS to a plaintext member) is as silent. `speaks_tls` asks the member
directly with a TLS handshake of its own (no certificate, nothing verified, nothing sent
after it), so a command can say which mistake it was.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from dledger.codes import DLedgerError, ResponseCode
from dledger.config import parse_address

PROBE_TIMEOUT_S = 1.0
"""How long one probe waits for a member to connect and answer the handshake."""


def speaks_tls(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool | None:
    """True when the server at `host:port` answers a TLS handshake (it completes, or the
    server refuses it with a TLS alert, as a server that requires a client certificate
    does); False when something answers that is not TLS (a plaintext gRPC server); None
    when nothing answers in time or `address` is not `host:port`."""
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
        return True
    except ssl.SSLError as exc:
        return "ALERT" in (exc.reason or "")
    except TimeoutError:
        return None
    except OSError:  # reset or closed in the middle of the handshake: not a TLS server
        return False
    finally:
        sock.close()


def tls_mismatch(
    peers: Mapping[str, str], using_tls: bool, settings: str, timeout_s: float = PROBE_TIMEOUT_S
) -> str | None:
    """A sentence naming the members whose TLS setting differs from the client's
    (`using_tls`, made with `settings`: how the user gives the client its certificate,
    key and CA), probed in parallel; None when every member that answers agrees, or
    none answers."""
    with ThreadPoolExecutor(max_workers=max(1, min(len(peers), 8))) as pool:
        found = pool.map(lambda address: speaks_tls(address, timeout_s), peers.values())
        answers = dict(zip(peers, found, strict=True))
    wrong = [member for member, tls in answers.items() if tls is not None and tls != using_tls]
    if not wrong:
        return None
    names = ", ".join(f"{member} ({peers[member]})" for member in wrong)
    if using_tls:
        return f"{names} answered in plaintext, not TLS: leave out {settings}"
    verb = "serves" if len(wrong) == 1 else "serve"
    return f"{names} {verb} TLS: pass {settings}"


def with_tls_hint(exc: DLedgerError, peers: Mapping[str, str], using_tls: bool, settings: str) -> DLedgerError:
    """`exc` with `; hint: <tls_mismatch>` added to its message when no member answered
    (TIMEOUT, NETWORK_ERROR) and some speak TLS where the client did not, or the
    reverse; else `exc` itself (also when it is a subclass, such as an indeterminate
    outcome, whose meaning a copy would lose)."""
    if type(exc) is not DLedgerError or exc.code not in (ResponseCode.TIMEOUT, ResponseCode.NETWORK_ERROR):
        return exc
    mismatch = tls_mismatch(peers, using_tls, settings)
    if mismatch is None:
        return exc
    return DLedgerError(exc.code, f"{exc.message}; hint: {mismatch}")
