"""Operator settings, read once from the environment at startup; each room is handed the few values it needs
(SpecDefaults, TrackingAccess, the leader's Timing), never this object."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mwms_contract import names
from mwms_operator import __version__
from mwms_operator.kube.leader import Timing
from mwms_operator.mlflow.access import (
    ANY,
    TrackingAccess,
    TrackingCredentials,
    server_base,
    without_userinfo,
)
from mwms_operator.render.spec import SpecDefaults

# The trainer image of this operator's own release: the two images are versioned together.
DEFAULT_TRAINER_IMAGE = f"{names.TRAINER_IMAGE}:{__version__}"
DEFAULT_TRACKING_URI = "http://mlflow:5000"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("text", "json")


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
    # Blocking API calls in flight at once, each on its own thread and keep-alive connection (kube/client.py):
    # asyncio's default pool, sized by the CPUs, would hold the reconcile workers' creates back.
    api_threads: int = 32
    log_level: str = "INFO"
    log_format: str = "text"  # or "json": one object a line, with the job's namespace and name
    # Tracking servers (base URIs) besides tracking_uri whose progress the operator may read; "*" allows any.
    allowed_tracking_uris: tuple[str, ...] = ()
    # For tracking_uri's server only; repr shows just the kind, never a value.
    tracking_credentials: TrackingCredentials = TrackingCredentials()
    # Replicas elect one leader on a Lease in this namespace (the operator's own). Off by default for a
    # process started by hand (`mwms local`, benches, tests); the chart and manifests/ turn it on.
    leader_election: bool = False
    leader_election_namespace: str = ""
    # One per release: two releases in one namespace (each watching its own namespaces) elect separately.
    leader_election_lease: str = "mwms-operator-leader"
    leader_election_timing: Timing = Timing()

    def spec_defaults(self) -> SpecDefaults:
        return SpecDefaults(tracking_uri=self.tracking_uri, image=self.trainer_image)

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
        log_format = text("MWMS_LOG_FORMAT", "text").lower()
        if log_format not in LOG_FORMATS:
            raise ConfigError(f"MWMS_LOG_FORMAT={log_format!r} must be one of {', '.join(LOG_FORMATS)}")
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
        election = text("MWMS_LEADER_ELECTION", "false").lower()
        if election not in ("true", "false"):
            raise ConfigError(f"MWMS_LEADER_ELECTION={election!r} must be true or false")
        election_namespace = text("MWMS_LEADER_ELECTION_NAMESPACE", "")
        if election == "true" and not election_namespace:
            raise ConfigError(
                "MWMS_LEADER_ELECTION_NAMESPACE is empty: set it to the operator's namespace (the chart and "
                "manifests/ set it from the pod's), or MWMS_LEADER_ELECTION=false for a single operator"
            )
        prefix = "MWMS_LEADER_ELECTION_"
        timing = Timing(
            lease_duration=number(f"{prefix}LEASE_SECONDS", 15.0, minimum=1, integer=False),
            renew_deadline=number(f"{prefix}RENEW_DEADLINE_SECONDS", 10.0, minimum=0.1, integer=False),
            retry_period=number(f"{prefix}RETRY_SECONDS", 2.0, minimum=0.1, integer=False),
        )
        # client-go's checks: the leader gives up (renew deadline) before a standby may take over (lease
        # duration), and tries more than once within the deadline.
        if not timing.retry_period < timing.renew_deadline < timing.lease_duration:
            raise ConfigError(
                "MWMS_LEADER_ELECTION_RETRY_SECONDS < MWMS_LEADER_ELECTION_RENEW_DEADLINE_SECONDS < "
                f"MWMS_LEADER_ELECTION_LEASE_SECONDS must hold (now {timing.retry_period:g}, "
                f"{timing.renew_deadline:g}, {timing.lease_duration:g})"
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
            api_threads=int(number("MWMS_API_THREADS", 32, minimum=1, integer=True)),
            log_level=log_level,
            log_format=log_format,
            allowed_tracking_uris=allowed,
            tracking_credentials=_credentials(environ),
            leader_election=election == "true",
            leader_election_namespace=election_namespace,
            leader_election_lease=text("MWMS_LEADER_ELECTION_LEASE_NAME", "mwms-operator-leader"),
            leader_election_timing=timing,
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
