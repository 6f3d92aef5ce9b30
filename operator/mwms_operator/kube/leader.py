"""Leader election on a coordination.k8s.io/v1 Lease with client-go's rules (docs/design/leader-election.md):
of several operator replicas exactly one reconciles, and a standby takes over when it goes."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from mwms_contract import names
from mwms_operator.kube.refusals import TRANSIENT_ERRORS

if TYPE_CHECKING:
    from mwms_operator.kube.client import Kube

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Timing:
    """Leader election's durations in seconds, as client-go's (defaults: kube-controller-manager's)."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


class LeaseLost(Exception):
    """The leader must stop reconciling at once: the message says what became of the Lease."""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def claimed_spec(spec: dict[str, Any], identity: str, lease_seconds: int) -> dict[str, Any]:
    """The Lease's spec once `identity` holds (or renews) it: pure, a transition counted on a change of
    holder."""
    renewing = spec.get("holderIdentity") == identity
    now = _now()
    return {
        **spec,
        "holderIdentity": identity,
        "leaseDurationSeconds": lease_seconds,
        "acquireTime": spec.get("acquireTime") if renewing and spec.get("acquireTime") else now,
        "renewTime": now,
        "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if renewing else 1),
    }


def released_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """As client-go's release: no holder and a 1 s duration, so any standby takes it at its next try."""
    now = _now()
    return {**spec, "holderIdentity": None, "leaseDurationSeconds": 1, "acquireTime": now, "renewTime": now}


class Elector:
    """One replica's side of the election. `try_acquire_or_renew` is a standby's round, `renew` the leader's;
    `acquire` and `keep_renewing` are client-go's two loops. Blocking calls: run them in a thread."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        identity: str,
        timing: Timing,
        name: str,
    ) -> None:
        self.kube, self.namespace, self.identity = kube, namespace, identity
        self.timing, self.name = timing, name
        self._clock = time.monotonic
        self._observed: tuple[Any, ...] | None = None  # the holder and renewTime we last saw
        self._observed_at = 0.0  # when (our clock) we saw them change
        self._expires_at = 0.0  # when (our clock) the Lease we last saw held by another may be taken
        self.renewed_at = 0.0  # when (our clock) the last round that wrote the Lease as ours began

    def _lease_body(self, spec: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}

    def _claim(self, lease: dict[str, Any], timeout: Callable[[], float], began: float) -> bool:
        spec = dict(lease.get("spec") or {})
        seconds = max(1, round(self.timing.lease_duration))
        body = self._lease_body(claimed_spec(spec, self.identity, seconds), dict(lease["metadata"]))
        written = self.kube.update_lease(self.namespace, body, timeout=timeout())
        if written:
            self.renewed_at = began
        return written

    def try_acquire_or_renew(self) -> bool:
        """A standby's round: True if we hold the Lease now. API errors count as a failed round (logged)."""
        began = self._clock()
        timeout = self.timing.retry_period
        try:
            lease = self.kube.get_lease(self.namespace, self.name, timeout=timeout)
            if lease is None:
                metadata = {
                    "name": self.name,
                    "namespace": self.namespace,
                    "labels": {names.LABEL_MANAGED_BY: names.MANAGED_BY},
                }
                seconds = max(1, round(self.timing.lease_duration))
                body = self._lease_body(claimed_spec({}, self.identity, seconds), metadata)
                created = self.kube.create_lease(self.namespace, body, timeout=timeout)
                if created:
                    self.renewed_at = began
                return created
            spec = dict(lease.get("spec") or {})
            seen = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseDurationSeconds"))
            if seen != self._observed:
                self._observed, self._observed_at = seen, self._clock()
            holder = spec.get("holderIdentity") or ""
            duration = float(spec.get("leaseDurationSeconds") or self.timing.lease_duration)
            self._expires_at = self._observed_at + duration
            if holder and holder != self.identity and self._clock() < self._expires_at:
                return False  # held by another, and renewed within its duration
            return self._claim(lease, lambda: timeout, began)
        except TRANSIENT_ERRORS as error:
            where = f"{self.namespace}/{self.name}"
            log.warning("leader election: Lease %s not read or written: %s", where, error)
            return False

    def renew(self, deadline: float) -> bool:
        """The leader's round, all of it before `deadline` (our clock): True if renewed, False if it failed
        (an API error, logged; a 409). LeaseLost if the Lease is gone or another holds it; any other error
        is raised."""
        began = self._clock()

        def timeout() -> float:  # what is left of the deadline, at most a retry period, for each call
            left = min(self.timing.retry_period, deadline - self._clock())
            if left <= 0:
                raise LeaseLost(self._late())
            return left

        try:
            lease = self.kube.get_lease(self.namespace, self.name, timeout=timeout())
            if lease is None:
                raise LeaseLost("was deleted")
            holder = (lease.get("spec") or {}).get("holderIdentity") or ""
            if holder != self.identity:
                raise LeaseLost(f"is held by {holder or 'nobody'}, not by this replica")
            return self._claim(lease, timeout, began)
        except TRANSIENT_ERRORS as error:
            where = f"{self.namespace}/{self.name}"
            log.warning("leader election: Lease %s not renewed: %s", where, error)
            return False

    def acquire(self, stop: threading.Event) -> bool:
        """Try every retry period (from the start of one try to the next), or when the Lease we watch
        expires if that is sooner, until we lead (True) or `stop` is set (False)."""
        while True:
            began = self._clock()
            if self.try_acquire_or_renew():
                return True
            now = self._clock()
            wake = began + self.timing.retry_period
            if self._expires_at > now:  # (none seen, or past: the next retry period)
                wake = min(wake, self._expires_at)
            if stop.wait(max(0.0, wake - now)):
                return False

    def keep_renewing(self, stop: threading.Event) -> None:
        """Renew every retry period until `stop` is set (return). Raises LeaseLost when no round succeeded
        within the renew deadline of the last successful one's start, or another holds the Lease; a round's
        unexpected error is raised as is. Either way the caller must stop reconciling at once.

        Each round runs in a worker thread and is waited for only until the deadline: a call that hangs past
        its socket timeouts (a slow answer, a re-login) cannot keep this replica leading."""
        worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="lease-renew")
        try:
            while True:
                deadline = self.renewed_at + self.timing.renew_deadline
                if stop.wait(max(0.0, min(self.timing.retry_period, deadline - self._clock()))):
                    return
                left = deadline - self._clock()
                if left <= 0:
                    break
                try:
                    worker.submit(self.renew, deadline).result(timeout=left)
                except concurrent.futures.TimeoutError:
                    break
        finally:
            worker.shutdown(wait=False, cancel_futures=True)
        raise LeaseLost(self._late())

    def _late(self) -> str:
        return f"was not renewed within {self.timing.renew_deadline:g} s (the renew deadline)"

    def release(self) -> bool:
        """Give the Lease up if we hold it (a graceful stop): True if released."""
        timeout = self.timing.retry_period
        try:
            lease = self.kube.get_lease(self.namespace, self.name, timeout=timeout)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return False
            body = self._lease_body(released_spec(dict(lease["spec"])), dict(lease["metadata"]))
            return self.kube.update_lease(self.namespace, body, timeout=timeout)
        except TRANSIENT_ERRORS as error:
            log.warning("leader election: Lease not released (a standby takes it when it expires): %s", error)
            return False
