"""Which tracking servers the operator may call, and with which credentials (pure; config reads the env).

A TrainJob names its own `spec.mlflow.trackingUri`. The operator must not call any server a job author
names (that would let anyone who can create a TrainJob make the operator send requests to internal hosts):
it reads progress only from the administrator's servers, compared by origin (scheme, host, port).
"""

from __future__ import annotations

import base64
import urllib.parse
from dataclasses import dataclass, field

ANY = "*"  # an allowlist entry that allows every http(s) server: the old, trusting behaviour
DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(uri: str) -> str | None:
    """`scheme://host:port` of an http(s) URI (lower-cased, default port filled in); None for others."""
    try:
        parts = urllib.parse.urlsplit(uri.strip())
        port = parts.port
    except ValueError:  # a port that is not a number, or out of range
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    host = parts.hostname.lower()
    if ":" in host:  # IPv6: urlsplit gives it without brackets
        host = f"[{host}]"
    return f"{scheme}://{host}:{port or DEFAULT_PORTS[scheme]}"


def without_userinfo(uri: str) -> str:
    """The URI without `user:password@`: credentials go in a header, never in a URL that may be logged."""
    parts = urllib.parse.urlsplit(uri.strip())
    netloc = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@dataclass(frozen=True)
class TrackingCredentials:
    """Credentials for the operator's own tracking server, from a Secret the administrator names.

    Never shown: repr says only which kind is set, since the settings are logged at startup."""

    token: str = field(default="", repr=False)
    username: str = field(default="", repr=False)
    password: str = field(default="", repr=False)

    def __repr__(self) -> str:
        kind = "bearer token" if self.token else "username/password" if self.username else "none"
        return f"TrackingCredentials({kind})"

    def authorization(self) -> str | None:
        """The Authorization header MLflow's own client would send: Bearer for a token, else Basic."""
        if self.token:
            return f"Bearer {self.token}"
        if self.username:
            pair = f"{self.username}:{self.password}".encode()
            return f"Basic {base64.b64encode(pair).decode()}"
        return None


@dataclass(frozen=True)
class TrackingAccess:
    """The servers progress may be read from: the operator's tracking URI plus the allowlist."""

    own_origin: str | None
    allowed_origins: frozenset[str] = frozenset()
    allow_any: bool = False
    credentials: TrackingCredentials = TrackingCredentials()

    def allows(self, uri: str) -> bool:
        found = origin(uri)
        if found is None:
            return False
        return self.allow_any or found == self.own_origin or found in self.allowed_origins

    def headers(self, uri: str) -> dict[str, str]:
        """Credentials only for the operator's own server: another allowed server (another team's, say) must
        not receive them."""
        authorization = self.credentials.authorization()
        if authorization and self.own_origin is not None and origin(uri) == self.own_origin:
            return {"Authorization": authorization}
        return {}
