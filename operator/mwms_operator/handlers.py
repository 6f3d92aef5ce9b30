"""kopf handlers only: watch TrainJobs and the pods and Services we own and hand each event to the Reconciler.

No timers, daemons or on-create/on-delete handlers: those make kopf put a finalizer on every TrainJob, and a
finalizer makes every delete wait for the operator (see docs/design/no-finalizer.md).
"""

from __future__ import annotations

from typing import Any

import kopf

from mwms_contract import names
from mwms_operator.kube.client import Kube, use_api_threads
from mwms_operator.kube.credentials import login
from mwms_operator.observe.pod_states import worker_pod
from mwms_operator.observe.state import owner_key
from mwms_operator.reconciler import Reconciler
from mwms_operator.settings import OperatorConfig
from mwms_operator.telemetry import metrics

TRAINJOBS = (names.GROUP, names.VERSION, names.PLURAL)
KOPF_PREFIX = "kopf.mwms.dev"
# The finalizer older versions left on every TrainJob: named as kopf's own, kopf takes it off at each object's
# first event, as no handler here needs one.
LEGACY_FINALIZER = "mwms.dev/kopf-finalizer"


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    """Registered here, not at import, so the handlers see the config read at startup."""

    kopf.on.login(id="login", registry=registry)(login)

    @kopf.on.startup(id="startup", registry=registry)
    async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
        settings.persistence.diffbase_storage = NoDiffBase()
        settings.persistence.finalizer = LEGACY_FINALIZER
        # Server-side: the API server sends only our pods and Services (a `labels=` filter on a handler would
        # still receive, parse and drop every pod of the cluster).
        for resource in ("pods", "services"):
            settings.watching.label_selectors[resource] = names.LABEL_JOB_NAME
        use_api_threads(config.api_threads)
        memo.reconciler = Reconciler(Kube.connect(settings), config)
        memo.reconciler.start()
        metrics.serve(config.metrics_port)

    @kopf.on.cleanup(id="cleanup", registry=registry)
    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        await memo.reconciler.stop()

    # Every handler is async: kopf runs a sync one in a thread pool (two thread hops per watch event, and
    # the reconciler's queue and state are the event loop's, not thread-safe). None of them waits on I/O.
    # Indexes, not on.event stores: kopf fills every index before any other handler runs (observe/state.py).
    @kopf.index("pods", id="job_pods", registry=registry)
    async def job_pods(body: kopf.Body, **_: Any) -> dict[Any, Any] | None:
        key, pod = owner_key(body), worker_pod(body)
        return {(key.namespace, key.uid): pod} if key and pod else None

    @kopf.index("services", id="job_services", registry=registry)
    async def job_services(body: kopf.Body, name: str, **_: Any) -> dict[Any, Any] | None:
        key = owner_key(body)
        return {(key.namespace, key.uid): name} if key else None

    @kopf.on.event(*TRAINJOBS, id="trainjob", registry=registry)  # type: ignore[arg-type]  # indexes as kwargs
    async def trainjob_event(
        type: str,
        body: kopf.Body,
        memo: kopf.Memo,
        job_pods: kopf.Index[Any, Any],
        job_services: kopf.Index[Any, Any],
        **_: Any,
    ) -> None:
        metrics.count_watch_event("trainjobs", type)
        memo.reconciler.bind(job_pods, job_services)
        memo.reconciler.job_event(type, body)

    # A pod or Service event (its index already updated) means: look at its job again.
    @kopf.on.event("pods", id="pod", registry=registry)
    async def pod_event(type: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        metrics.count_watch_event("pods", type)
        memo.reconciler.pod_event(type, body)

    @kopf.on.event("services", id="service", registry=registry)
    async def service_event(type: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        metrics.count_watch_event("services", type)
        memo.reconciler.owned_event(body)


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf deep-copies every object it watches, on every event (each pod's), to diff it against the last
    state it handled: that is for on.create/on.update handlers, and this operator has none. Nothing is built,
    fetched or stored."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None
