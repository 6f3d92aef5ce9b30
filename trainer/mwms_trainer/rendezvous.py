"""Getting the group together before a deadline: meet every peer in plain Python, then create the
strategy with a SIGALRM backstop (docs/design/strategy-registration-backstop.md).

The state kept in names.RENDEZVOUS_FILE is what the trainer container's readiness probe prints.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import math
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

from mwms_contract import names, termination
from mwms_trainer.cluster_spec import Cluster, split_host_port
from mwms_trainer.errors import RetryableError
from mwms_trainer.tfenv import tensorflow

log = logging.getLogger("mwms_trainer")
POLL_SECONDS = 0.5
STILL_WAITING_LOG_SECONDS = 60  # how often a wait without a deadline says whom it waits for
BACKSTOP_MIN_SECONDS = 15  # every peer was listening a moment ago: registration takes seconds
RENDEZVOUS_FILE = names.RENDEZVOUS_FILE


def note_rendezvous(text: str) -> None:
    """Replace the rendezvous state with one line (whole, so the probe never reads half of it). Only where the
    operator mounted its directory: elsewhere (local mode, tests) no probe reads it. Once joined it stays so
    (a second strategy in train_fn must not make a training pod unready)."""
    path = RENDEZVOUS_FILE
    if not os.path.isdir(os.path.dirname(path)) or _joined(path):
        return
    line = " ".join(text.split())  # one line: the probe reads the first
    partial = f"{path}.{os.getpid()}.tmp"
    with open(partial, "w", encoding="utf-8") as f:
        f.write(line + "\n")
    os.replace(partial, path)


def _joined(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().strip() == names.RENDEZVOUS_JOINED
    except FileNotFoundError:
        return False


def mark_joined() -> None:
    """This worker is in the group (or has no group to join): its pod becomes Ready."""
    note_rendezvous(names.RENDEZVOUS_JOINED)


def _reachable(address: str) -> str | None:
    """None when `address` resolves and accepts a TCP connection, else why not."""
    host, port = split_host_port(address)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        return f"name does not resolve ({e.strerror})"
    last = "no address"
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as s:
            s.settimeout(2)
            try:
                s.connect(sockaddr)
                return None
            except OSError as e:
                last = f"port {port} does not accept connections ({e.strerror or e})"
    return last


def _listen(port: int) -> socket.socket:
    """Dual-stack where the pod has IPv6, plain IPv4 where it does not."""
    error: OSError = OSError(f"cannot listen on port {port}")
    for family, address in ((socket.AF_INET6, "::"), (socket.AF_INET, "")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as e:
            error = e
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind((address, port))
            # Probes are never accepted: the kernel completes the handshake from the backlog, and closing
            # the listener resets them, so no connection lingers on the port gRPC binds next.
            sock.listen(128)
            return sock
        except OSError as e:
            sock.close()
            error = e
    raise error


@contextlib.contextmanager
def listening(address: str | None, deadline: float) -> Iterator[None]:
    """Accept rendezvous probes on our own port until the strategy's gRPC server takes it over."""
    if address is None:
        yield
        return
    _, port = split_host_port(address)
    while True:
        try:
            sock = _listen(port)
            break
        except OSError as e:
            if time.monotonic() > deadline:
                raise RetryableError(f"startup deadline passed: cannot listen on port {port}: {e}") from None
            time.sleep(POLL_SECONDS)
    try:
        yield
    finally:
        sock.close()


def wait_for_peers(
    cluster: Cluster,
    deadline: float | None,
    probe: Callable[[str], str | None] = _reachable,
    meanwhile: Callable[[], None] = lambda: None,
) -> None:
    """Return once every peer resolves and accepts TCP; at the deadline RetryableError names the missing.
    Without a deadline (in a pod: the operator ends a stuck group) it waits, saying whom it waits for, in the
    log and in the rendezvous state. `meanwhile()` runs every round: what it raises ends the wait."""
    waiting = {i: h for i, h in enumerate(cluster.hosts) if i != cluster.rank}
    reasons: dict[int, str] = {}
    log.info("waiting for %d peer(s)", len(waiting))
    noted = f"waiting for {len(waiting)} peer(s)"
    note_rendezvous(noted)
    next_log = time.monotonic() + STILL_WAITING_LOG_SECONDS
    while waiting:
        meanwhile()
        for i, host in list(waiting.items()):
            reason = probe(host)
            if reason is None:
                log.info("peer worker %d (%s) is reachable", i, host)
                del waiting[i]
            else:
                reasons[i] = reason
        if not waiting:
            return
        missing = "; ".join(f"worker {i} ({waiting[i]}): {reasons[i]}" for i in sorted(waiting))
        if missing != noted:  # written when it changes, not every round
            noted = missing
            note_rendezvous(f"waiting for peers: {missing}")
        if deadline is not None and time.monotonic() > deadline:
            raise RetryableError(f"startup deadline passed waiting for peers: {missing}")
        if time.monotonic() > next_log:
            log.info("still waiting for %d peer(s): %s", len(waiting), missing)
            next_log += STILL_WAITING_LOG_SECONDS
        time.sleep(POLL_SECONDS)


# What a lost or vanished peer looks like from inside the constructor or a collective: heartbeat timeouts,
# aborted or cancelled ops, unreachable tasks, a coordination service whose peer restarted
# (FailedPrecondition).
PEER_LOSS_ERRORS = (
    "UnavailableError",
    "AbortedError",
    "DeadlineExceededError",
    "CancelledError",
    "FailedPreconditionError",
)
REGISTRATION_BACKSTOP_NOTE = termination.failure(
    termination.RETRYABLE,
    "startup deadline passed in MultiWorkerMirroredStrategy(): a peer left during registration",
)


@contextlib.contextmanager
def peer_loss_is_retryable(during: str) -> Iterator[None]:
    """TensorFlow's peer-loss errors become RetryableError (exit 75): restarting the group may succeed."""
    tf = tensorflow()
    kinds = tuple(getattr(tf.errors, name) for name in PEER_LOSS_ERRORS)
    try:
        yield
    except kinds as e:
        first_line = (str(e).strip().splitlines() or [""])[0]
        raise RetryableError(f"lost a peer {during}: {type(e).__name__}: {first_line}") from None


@contextlib.contextmanager
def registration_backstop(deadline: float, on_backstop: Callable[[str], None]) -> Iterator[None]:
    """Around MultiWorkerMirroredStrategy(): SIGALRM ends the process at the deadline; peer loss exits 75.

    The constructor holds the GIL while it waits, so no Python code runs until it returns: the message the
    backstop leaves behind is written first, and the kernel delivers the end (exit 128+14, retried like 75).
    """
    on_backstop(REGISTRATION_BACKSTOP_NOTE)
    log.info("registering with MultiWorkerMirroredStrategy()")
    seconds = math.ceil(max(BACKSTOP_MIN_SECONDS, deadline - time.monotonic()))
    faulthandler.dump_traceback_later(seconds, exit=False)  # where it hung, on stderr
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(seconds + 1)
    try:
        with peer_loss_is_retryable("while the group registered"):
            yield
        on_backstop("training")  # registered: the backstop's message no longer applies
    finally:
        signal.alarm(0)
        faulthandler.cancel_dump_traceback_later()
        # The constructor's coordination service installs a SIGTERM handler that only takes note (a preemption
        # notifier): put the default back, so a deleted pod's worker stops at once instead of after the grace.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def meet(
    cluster: Cluster, deadline: float, peers_by: float | None, meanwhile: Callable[[], None] = lambda: None
) -> None:
    """Meet every peer (by `peers_by`, None: no limit; listening on our own port until `deadline`), then say
    so: the pod becomes Ready. Before any strategy is made, whoever makes it. See wait_for_peers."""
    if cluster.is_distributed:
        with listening(cluster.own_address, deadline):
            wait_for_peers(cluster, peers_by, meanwhile=meanwhile)
    mark_joined()


def peer_deadline(started: float, peer_wait_seconds: float | None) -> float | None:
    return None if peer_wait_seconds is None else started + peer_wait_seconds


def create_strategy(
    cluster: Cluster,
    deadline: float,
    on_backstop: Callable[[str], None],
    peers_by: float | None,
    before_registering: Callable[[], object] = lambda: None,
    meanwhile: Callable[[], None] = lambda: None,
) -> Any:
    """Rendezvous (peers by `peers_by`, None: no limit; `meanwhile()` every round), `before_registering()`
    (what raises in either ends this worker before its peers wait for it in the constructor), then
    MultiWorkerMirroredStrategy(); exit 75 (or SIGALRM) at the deadline."""
    tf = tensorflow()  # first: a worker that answers the rendezvous is ready to register at once
    meet(cluster, deadline, peers_by, meanwhile)
    before_registering()
    with registration_backstop(deadline, on_backstop):
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    log.info("strategy ready: %d worker(s), this is worker %d", strategy.num_replicas_in_sync, cluster.rank)
    return strategy


@contextlib.contextmanager
def backstopped_user_strategy(deadline: float, on_backstop: Callable[[str], None]) -> Iterator[None]:
    """While a user's train_fn runs: every MultiWorkerMirroredStrategy it creates gets the same backstop.

    The class's own __init__ is wrapped, not the name tf.distribute.MultiWorkerMirroredStrategy: the
    experimental class (a subclass) and names the user's module bound at import time reach it too.
    """
    strategy_class = tensorflow().distribute.MultiWorkerMirroredStrategy
    original = strategy_class.__dict__["__init__"]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        with registration_backstop(deadline, on_backstop):
            original(self, *args, **kwargs)

    strategy_class.__init__ = __init__
    try:
        yield
    finally:
        strategy_class.__init__ = original
