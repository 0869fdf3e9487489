"""Security of a group: TLS files and credentials (`tls`), caller identities and roles
(`identity`), and development certificates (`certs`, needs the `cryptography` package).

See docs/OPERATIONS.md, "Security model".
"""

from dledger.security.identity import ROLES, Identity, identity_from_uris, identity_of
from dledger.security.tls import TlsConfig, TlsError, is_loopback

__all__ = ["ROLES", "Identity", "TlsConfig", "TlsError", "identity_from_uris", "identity_of", "is_loopback"]
