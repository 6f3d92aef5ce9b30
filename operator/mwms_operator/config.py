"""Operator settings, read once from the environment at startup."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mwms_operator import __version__, constants
from mwms_operator.tracking import ANY, TrackingAccess, TrackingCredentials, server_base, without_userinfo

# The trainer image of this operator's own release: the two images are versioned together.
DEFAULT_TRAINER_IMAGE = f"{constants.TRAINER_IMAGE}:{__version__}"
DEFAULT_TRACKING_URI = "http://mlflow:5000"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class ConfigError(ValueError):
    """A setting in the environment is invalid; the message names the variable."""


@dataclass(frozen=True)
class OperatorConfig:
    trainer_image: str = DEFAULT_TRAINER_IMAGE
    tracking_uri: str = DEFAULT_TRACKING_URI
    # "" gives <pod>.<svc>.<ns>.svc; "cluster.local" gives <pod>.<svc>.<ns>.svc.cluster.local
    cluster_domain: str = ""
    # Empty: all namespaces (cluster-wide).
    watch_namespaces: tuple[str, ...] = ()
    metrics_port: int = 8000
    health_port: int = 8080
    progress_interval_seconds: float = 15.0
    # Events drive reconciles; this slow resync of every running or pending TrainJob is only a safety net.
    reconcile_interval_seconds: float = 60.0
    log_level: str = "INFO"
    # Tracking servers (base URIs) besides tracking_uri whose progress the operator may read; "*" allows any.
    allowed_tracking_uris: tuple[str, ...] = ()
    # For tracking_uri's server only; repr shows just the kind, never a value.
    tracking_credentials: TrackingCredentials = TrackingCredentials()

    def tracking_access(self) -> TrackingAccess:
        bases = frozenset(b for b in map(server_base, self.allowed_tracking_uris) if b is not None)
        return TrackingAccess(
            own_base=server_base(self.tracking_uri),
            allowed_bases=bases,
            allow_any=ANY in self.allowed_tracking_uris,
            credentials=self.tracking_credentials,
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> OperatorConfig:
        def text(name: str, default: str) -> str:
            value = environ.get(name, "").strip()
            return value or default

        def number(name: str, default: float, *, minimum: float, integer: bool) -> float:
            raw = environ.get(name, "").strip()
            if not raw:
                return default
            try:
                value = int(raw) if integer else float(raw)
            except ValueError:
                kind = "an integer" if integer else "a number"
                raise ConfigError(f"{name}={raw!r} is not {kind}") from None
            if value < minimum:
                raise ConfigError(f"{name}={raw!r} must be at least {minimum:g}")
            return value

        def port(name: str, default: int) -> int:
            value = int(number(name, default, minimum=1, integer=True))
            if value > 65535:
                raise ConfigError(f"{name}={value} is not a TCP port (1-65535)")
            return value

        log_level = text("MWMS_LOG_LEVEL", "INFO").upper()
        if log_level not in LOG_LEVELS:
            raise ConfigError(f"MWMS_LOG_LEVEL={log_level!r} must be one of {', '.join(LOG_LEVELS)}")
        namespaces = tuple(
            ns.strip() for ns in environ.get("MWMS_WATCH_NAMESPACES", "").split(",") if ns.strip()
        )
        allowed = tuple(
            uri.strip() for uri in environ.get("MWMS_ALLOWED_TRACKING_URIS", "").split(",") if uri.strip()
        )
        for uri in allowed:
            if uri != ANY and server_base(uri) is None:
                raise ConfigError(
                    f"MWMS_ALLOWED_TRACKING_URIS: {uri!r} is not an http(s) URI with a host and no query or "
                    f"fragment (or {ANY!r} for any)"
                )
        tracking_uri = text("MWMS_TRACKING_URI", DEFAULT_TRACKING_URI)
        if tracking_uri.lower().startswith(("http://", "https://")) and server_base(tracking_uri) is None:
            raise ConfigError(
                f"MWMS_TRACKING_URI={without_userinfo(tracking_uri)!r}: an http(s) tracking server is a host "
                "and a base path, without a query or fragment"
            )
        return cls(
            trainer_image=text("MWMS_TRAINER_IMAGE", DEFAULT_TRAINER_IMAGE),
            tracking_uri=tracking_uri,
            cluster_domain=text("MWMS_CLUSTER_DOMAIN", "").strip("."),
            watch_namespaces=namespaces,
            metrics_port=port("MWMS_METRICS_PORT", 8000),
            health_port=port("MWMS_HEALTH_PORT", 8080),
            progress_interval_seconds=number(
                "MWMS_PROGRESS_INTERVAL_SECONDS", 15.0, minimum=0.1, integer=False
            ),
            reconcile_interval_seconds=number(
                "MWMS_RECONCILE_INTERVAL_SECONDS", 60.0, minimum=0.1, integer=False
            ),
            log_level=log_level,
            allowed_tracking_uris=allowed,
            tracking_credentials=_credentials(environ),
        )


def _credentials(environ: Mapping[str, str]) -> TrackingCredentials:
    """MWMS_TRACKING_TOKEN, or MWMS_TRACKING_USERNAME with MWMS_TRACKING_PASSWORD (the names MLflow's client
    reads, prefixed); the errors name the variables, never their values."""
    token = environ.get("MWMS_TRACKING_TOKEN", "").strip()
    username = environ.get("MWMS_TRACKING_USERNAME", "").strip()
    password = environ.get("MWMS_TRACKING_PASSWORD", "")
    if bool(username) != bool(password):
        raise ConfigError("MWMS_TRACKING_USERNAME and MWMS_TRACKING_PASSWORD must be set together")
    if token and username:
        raise ConfigError(
            "set either MWMS_TRACKING_TOKEN or MWMS_TRACKING_USERNAME/MWMS_TRACKING_PASSWORD, not both"
        )
    return TrackingCredentials(token=token, username=username, password=password)
