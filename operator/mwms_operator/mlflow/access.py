"""Pure: which tracking servers the operator may call, and with which credentials. Only the administrator's
servers, each a base URI, never one a job author names (that would let anyone who can create a TrainJob send
the operator's requests to internal hosts); nothing of a job's path or query is sent.
"""

from __future__ import annotations

import base64
import urllib.parse
from dataclasses import dataclass, field

ANY = "*"  # an allowlist entry that allows every http(s) server: the old, trusting behaviour
DEFAULT_PORTS = {"http": 80, "https": 443}


def server_base(uri: str) -> str | None:
    """`scheme://host:port/path` of an http(s) tracking server (scheme and host lower-cased, the default port
    filled in, userinfo and trailing slashes dropped); None for other schemes and for a URI with a query or a
    fragment: a tracking server is a base path, and anything else would be a request the job author chose."""
    try:
        parts = urllib.parse.urlsplit(uri.strip())
        port = parts.port
    except ValueError:  # a port that is not a number, or out of range
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or parts.query or parts.fragment:
        return None
    host = parts.hostname.lower()
    if ":" in host:  # IPv6: urlsplit gives it without brackets
        host = f"[{host}]"
    return f"{scheme}://{host}:{port or DEFAULT_PORTS[scheme]}{parts.path.rstrip('/')}"


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
    """The servers progress may be read from: the operator's tracking URI plus the allowlist, as base URIs.

    A job's URI is allowed only when its base is one of them exactly (`http://mlflow:5000/base` allows that
    base, not `/base/other` nor `/`), so a job cannot steer the operator's requests to another path."""

    own_base: str | None
    allowed_bases: frozenset[str] = frozenset()
    allow_any: bool = False
    credentials: TrackingCredentials = TrackingCredentials()

    def server(self, uri: str) -> str | None:
        """The base the operator calls for a job's tracking URI, or None: not allowed, no request."""
        found = server_base(uri)
        if found is None:
            return None
        return found if self.allow_any or found == self.own_base or found in self.allowed_bases else None

    def allows(self, uri: str) -> bool:
        return self.server(uri) is not None

    def headers(self, uri: str) -> dict[str, str]:
        """Credentials only for the operator's own server: another allowed server (another team's, say), or
        another path of the same host, must not receive them."""
        authorization = self.credentials.authorization()
        if authorization and self.own_base is not None and server_base(uri) == self.own_base:
            return {"Authorization": authorization}
        return {}
