"""`python -m mwms_operator`: read the settings once, register the handlers, run kopf."""

from __future__ import annotations

import argparse
import http.server
import logging
import os
import re
import signal
import socket
import sys
import threading
from typing import TYPE_CHECKING, Any

from mwms_operator.settings import LOG_FORMATS, ConfigError, OperatorConfig
from mwms_operator.telemetry import log_format

if TYPE_CHECKING:
    from mwms_operator.kube.leader import Elector

log = logging.getLogger("mwms_operator")
# The leader could not renew its Lease in time, saw another holder, or its renewing failed: it exits at once
# (client-go's OnStoppedLeading), so that no two replicas reconcile, and its pod restarts as a standby.
EXIT_LOST_LEADERSHIP = 1
# At most this long for the last message before that exit (and never half the Lease's margin).
EXIT_LOG_GRACE_SECONDS = 1.0

# Never used by the operator, but kopf imports the `kubernetes` client whenever it is installed (for
# isinstance checks and a login the operator replaces): kept out (docs/design/own-api-client.md).
UNUSED_CLIENTS = ("kubernetes", "kubernetes_asyncio", "pykube")


class _QuietTimers(logging.Filter):
    """kopf logs each successful handler run at INFO: one line per watch event of every pod, noise."""

    NOISE = re.compile(r"Handler '(trainjob|pod|service)' succeeded\.")

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.INFO and self.NOISE.fullmatch(record.getMessage()))


def run_options(config: OperatorConfig) -> dict[str, Any]:
    """kopf.run's arguments: all namespaces, or only MWMS_WATCH_NAMESPACES (names or globs)."""
    return {
        # No kopf peering: our Lease (kube/leader.py) makes this the only replica that runs the handlers.
        "standalone": True,
        "clusterwide": not config.watch_namespaces,
        "namespaces": list(config.watch_namespaces),
        "liveness_endpoint": f"http://0.0.0.0:{config.health_port}/healthz",
        # kopf's default identity asks the passwd database for our user name, which fails for a uid the image
        # does not list (e.g. runAsUser 65532 on a slim base image).
        "identity": f"mwms-operator@{socket.gethostname()}",
    }


def keep_out_unused_clients() -> None:
    """Before kopf is imported: the operator's memory must not depend on what else shares its environment
    (a developer's venv has the `kubernetes` client for the tests; the operator image does not)."""
    for name in UNUSED_CLIENTS:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None: `import name` raises ImportError


class _StandbyHealth(http.server.BaseHTTPRequestHandler):
    """/healthz of a standby (kopf's liveness endpoint runs only inside kopf.run, once this replica leads)."""

    def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
        found = self.path.split("?", 1)[0] == "/healthz"
        body = b'{"standby": true}' if found else b""
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the signature http.server calls)
        """One line per probe would bury what matters (as aiohttp.access on the leader)."""


def wait_to_lead(config: OperatorConfig) -> Elector:
    """Block as a standby (serving /healthz and /metrics) until this replica holds the Lease; exit 0 on
    SIGTERM or SIGINT meanwhile."""
    import kopf

    from mwms_operator.kube import leader
    from mwms_operator.kube.client import Kube
    from mwms_operator.telemetry import metrics

    identity = f"{socket.gethostname()}_{os.getpid()}"  # the pod's name, and the process in it
    elector = leader.Elector(
        Kube.connect(kopf.OperatorSettings()),
        config.leader_election_namespace,
        identity,
        config.leader_election_timing,
        config.leader_election_lease,
    )
    metrics.LEADER.set(0)
    metrics.serve(config.metrics_port)
    health = http.server.ThreadingHTTPServer(("0.0.0.0", config.health_port), _StandbyHealth)
    threading.Thread(target=health.serve_forever, name="standby-health", daemon=True).start()
    stop = threading.Event()
    handlers = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    where = f"{config.leader_election_namespace}/{elector.name}"
    log.info("leader election: %s waits for the Lease %s", identity, where)
    try:
        led = elector.acquire(stop)
    finally:
        health.shutdown()
        health.server_close()  # the port is free for kopf's liveness endpoint
        for sig, previous in handlers.items():
            signal.signal(sig, previous)
    if stop.is_set():  # also when it came while this replica was becoming the leader
        if led:
            elector.release()
        log.info("leader election: stopped as a standby")
        sys.exit(0)
    log.info("leader election: %s leads (Lease %s)", identity, where)
    return elector


def say_lost(elector: Elector, why: str, trace: bool) -> None:
    log.error(
        "leader election: the Lease %s/%s %s; exiting so that a standby takes over and this pod "
        "restarts as one",
        elector.namespace,
        elector.name,
        why,
        exc_info=trace,
    )
    logging.shutdown()


def renew_in_background(elector: Elector, stop: threading.Event) -> threading.Thread:
    """Renew the Lease until `stop`; whatever else ends the renewing (the deadline, another holder, any
    error at all) exits the process at once."""
    from mwms_operator.kube.leader import LeaseLost

    def renew() -> None:
        try:
            elector.keep_renewing(stop)
            return
        except LeaseLost as lost:
            why, trace = str(lost), False
        except BaseException as error:  # noqa: BLE001 (a thread that ended silently would leave two leaders)
            why, trace = f"could not be renewed: {error!r}", True
        # Exit first: the message gets a short grace in a thread of its own, so a log write that blocks (a
        # full stderr pipe) cannot keep this replica reconciling past the Lease's expiry.
        timing = elector.timing
        said = threading.Thread(
            target=say_lost, args=(elector, why, trace), name="leader-lost-log", daemon=True
        )
        said.start()
        said.join(min(EXIT_LOG_GRACE_SECONDS, (timing.lease_duration - timing.renew_deadline) / 2))
        # The handlers run in the main thread: only this stops them at once.
        os._exit(EXIT_LOST_LEADERSHIP)

    thread = threading.Thread(target=renew, name="leader-renew", daemon=True)
    thread.start()
    return thread


def main() -> None:
    keep_out_unused_clients()
    import kopf

    from mwms_operator import handlers
    from mwms_operator.kube import index_holds
    from mwms_operator.telemetry import memory, metrics

    parser = argparse.ArgumentParser(
        prog="python -m mwms_operator", description="Settings: MWMS_* variables."
    )
    parser.add_argument("--log-format", choices=LOG_FORMATS, help="text (default) or json; MWMS_LOG_FORMAT")
    args = parser.parse_args()
    environ = {**os.environ, **({"MWMS_LOG_FORMAT": args.log_format} if args.log_format else {})}
    try:
        config = OperatorConfig.from_env(environ)
    except ConfigError as error:
        print(f"mwms-operator: invalid setting: {error}", file=sys.stderr)
        sys.exit(2)
    log_format.configure(config.log_level, config.log_format)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_QuietTimers())
    if config.log_level != "DEBUG":  # one access line per liveness probe (every 10 s) buries what matters
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    if not index_holds.release_with_their_watchers():
        log.warning("kopf %s: one watched namespace gone or refused may hold every job", kopf.__version__)
    if not memory.slim_watch_events():
        log.info("kopf %s parses its watch events itself: they keep their managedFields", kopf.__version__)
    registry = kopf.OperatorRegistry()
    handlers.register(registry, config)
    log.info("mwms-operator starting: %s", config)
    elector = wait_to_lead(config) if config.leader_election else None
    metrics.LEADER.set(1)
    stop = threading.Event()
    renewing = renew_in_background(elector, stop) if elector is not None else None
    try:
        kopf.run(registry=registry, memo=kopf.Memo(), **run_options(config))
    finally:
        if elector is not None and renewing is not None:
            stop.set()
            renewing.join()
            # kopf has stopped: hand over now instead of after the lease duration (a rolling update).
            if elector.release():
                log.info("leader election: released the Lease %s/%s", elector.namespace, elector.name)


if __name__ == "__main__":
    main()
