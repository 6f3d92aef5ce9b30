"""kopf handlers only: index the pods and Services we own, reconcile every TrainJob on a timer from what
exists (parse -> decide -> write status -> act), and poll MLflow for progress while a job runs."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from typing import Any

import kopf

from mwms_operator import builders, constants, k8s, metrics
from mwms_operator.config import OperatorConfig
from mwms_operator.progress import ProgressReader, Skipped, status_patch
from mwms_operator.spec import SpecError, TrainJobSpec, parse_trainjob
from mwms_operator.status import (
    RUNNING,
    CreatePods,
    CreateService,
    Decision,
    DeleteJob,
    DeletePods,
    JobMeta,
    decide,
    format_time,
    parse_time,
    worker_pod,
)
from mwms_operator.tf_config import worker_hosts

TRAINJOBS = (constants.GROUP, constants.VERSION, constants.PLURAL)
OWNED = {constants.LABEL_JOB_NAME: kopf.PRESENT}
KOPF_PREFIX = "kopf.mwms.dev"
FINALIZER = "mwms.dev/kopf-finalizer"


def _owner_uid(body: Any) -> str | None:
    for ref in body.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == constants.KIND and ref.get("controller"):
            return ref.get("uid")
    return None


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    """Registered here, not at import, so timer intervals come from the config read at startup."""

    kopf.on.login(id="login", registry=registry)(k8s.login)

    @kopf.on.startup(id="startup", registry=registry)
    def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        # kopf's bookkeeping lives in annotations, so the CRD's status schema holds only our fields.
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=KOPF_PREFIX)
        settings.persistence.finalizer = FINALIZER
        memo.kube = k8s.Kube.connect()
        memo.phases = metrics.PhaseBook()
        memo.written = {}  # uid -> (resourceVersion, status) of our last status write, newer than the watch
        memo.progress = ProgressReader(config.tracking_access())
        metrics.serve(config.metrics_port)

    # Pods and Services are indexed by their owner's uid: a reconcile reads memory, not the API server.
    @kopf.index("pods", id="job_pods", labels=OWNED, registry=registry)
    def job_pods(body: kopf.Body, namespace: str | None, **_: Any) -> dict[Any, Any] | None:
        owner, pod = _owner_uid(body), worker_pod(body)
        return {(namespace, owner): pod} if owner and pod else None

    @kopf.index("services", id="job_services", labels=OWNED, registry=registry)
    def job_services(body: kopf.Body, namespace: str | None, name: str, **_: Any) -> dict[Any, Any] | None:
        owner = _owner_uid(body)
        return {(namespace, owner): name} if owner else None

    # A failed reconcile (API error) is simply tried again on the next tick.
    @kopf.timer(  # type: ignore[arg-type]  # kopf passes the indexes as extra keyword arguments
        *TRAINJOBS,
        id="reconcile",
        interval=config.reconcile_interval_seconds,
        backoff=config.reconcile_interval_seconds,
        registry=registry,
    )
    async def reconcile(
        body: kopf.Body,
        name: str,
        namespace: str,
        uid: str,
        job_pods: kopf.Index[Any, Any],
        job_services: kopf.Index[Any, Any],
        memo: Any,
        logger: logging.Logger | logging.LoggerAdapter[Any],
        **_: Any,
    ) -> None:
        if body.metadata.get("deletionTimestamp"):
            return  # going away (its pods too, e.g. with its namespace): nothing to recreate
        started = time.monotonic()
        key = (namespace, uid)
        meta = JobMeta(name, namespace, uid, int(body.metadata.get("generation") or 1))
        spec = _parse(body, config)
        previous = _previous_status(memo, uid, body)
        now = datetime.now(UTC)
        decision = decide(
            meta,
            spec,
            list(job_pods.get(key, [])),
            service_exists=key in job_services,
            now=now,
            previous=previous,
        )
        # Status first, then actions, then events: a crash in between is repaired by the next reconcile.
        if not await _write(memo, meta, decision, previous):
            return
        events = list(decision.events)
        try:
            await _act(memo.kube, body, meta, spec, decision, config)
        except k8s.Rejected as error:
            # A pod or Service the API server refuses (e.g. an invalid spec.template) fails the job.
            logger.warning("the API server refused a worker object: %s", error)
            refused = SpecError("spec.template", f"the API server refused a worker object: {error}")
            previous = _previous_status(memo, uid, body)
            decision = decide(meta, refused, [], service_exists=True, now=now, previous=previous)
            await _write(memo, meta, decision, previous)
            events += decision.events
        for event in events:
            await asyncio.to_thread(memo.kube.post_event, body, event.type, event.reason, event.message)
        metrics.RECONCILE.observe(time.monotonic() - started)
        memo.phases.set(uid, decision.status["phase"], namespace)
        if decision.all_pods_created:
            created = parse_time(body.metadata.get("creationTimestamp"))
            if created is not None:
                metrics.PODS_CREATED.observe((now - created).total_seconds())

    @kopf.on.event(*TRAINJOBS, id="forget", registry=registry)
    def forget(type: str, uid: str, memo: kopf.Memo, **_: Any) -> None:
        if type == "DELETED":
            memo.phases.forget(uid)
            memo.written.pop(uid, None)

    @kopf.timer(
        *TRAINJOBS,
        id="progress",
        interval=config.progress_interval_seconds,
        backoff=config.progress_interval_seconds,
        field="status.phase",
        value=RUNNING,
        registry=registry,
    )
    async def progress(
        body: kopf.Body, name: str, namespace: str | None, uid: str, memo: Any, **_: Any
    ) -> None:
        spec = _parse(body, config)
        if isinstance(spec, SpecError):
            return
        epochs = spec.trainer.get("epochs")
        found = await asyncio.to_thread(
            memo.progress.read,
            uid,
            spec.tracking_uri,
            spec.experiment,
            epochs if isinstance(epochs, int) else None,
        )
        if isinstance(found, Skipped):  # a tracking server the administrator does not allow: say so once
            await asyncio.to_thread(memo.kube.post_event, body, "Warning", found.reason, found.message)
            return
        patch = status_patch(found, body.get("status") or {}, format_time(datetime.now(UTC))) if found else {}
        if patch:  # status.progress, and status.mlflow's run as soon as the chief opened it
            response = await asyncio.to_thread(memo.kube.patch_status, namespace, name, patch)
            version = int(response["metadata"]["resourceVersion"]) if response else 0
            if version > memo.written.get(uid, (0,))[0]:  # the reconcile starts from it: mlflow is kept
                memo.written[uid] = (version, response.get("status") or {})


def _parse(body: kopf.Body, config: OperatorConfig) -> TrainJobSpec | SpecError:
    try:
        return parse_trainjob(body, config)
    except SpecError as error:
        return error


def _previous_status(memo: kopf.Memo, uid: str, body: kopf.Body) -> dict[str, Any]:
    """The newer of the watched status and our last write (the watch may lag behind our own patch)."""
    seen = int(body.metadata.get("resourceVersion") or 0)
    written = memo.written.get(uid)
    if written is not None and written[0] > seen:
        return dict(written[1])
    return dict(body.get("status") or {})


async def _write(memo: kopf.Memo, meta: JobMeta, decision: Decision, previous: dict[str, Any]) -> bool:
    """Write the decided status if it changed; False if the TrainJob is gone."""
    if any(previous.get(k) != v for k, v in decision.status.items()):
        response = await asyncio.to_thread(memo.kube.patch_status, meta.namespace, meta.name, decision.status)
        if response is None:
            return False  # the TrainJob is gone
        memo.written[meta.uid] = (int(response["metadata"]["resourceVersion"]), response.get("status") or {})
        metrics.count_transitions(meta.namespace, previous, decision.status)
    return True


async def _act(
    kube: k8s.Kube,
    body: kopf.Body,
    meta: JobMeta,
    spec: TrainJobSpec | SpecError,
    decision: Decision,
    config: OperatorConfig,
) -> None:
    for action in decision.actions:
        if isinstance(action, DeletePods):
            await asyncio.gather(
                *(asyncio.to_thread(kube.delete_pod, meta.namespace, n) for n in action.names)
            )
        elif isinstance(action, DeleteJob):
            await asyncio.to_thread(kube.delete_trainjob, meta.namespace, meta.name)
        elif isinstance(spec, TrainJobSpec) and isinstance(action, CreateService):
            service = builders.build_service(spec, job_name=meta.name, namespace=meta.namespace, uid=meta.uid)
            await asyncio.to_thread(kube.create_service, meta.namespace, service)
        elif isinstance(spec, TrainJobSpec) and isinstance(action, CreatePods):
            hosts = worker_hosts(meta.name, meta.namespace, spec.replicas, spec.port, config.cluster_domain)
            pods = [
                builders.build_worker_pod(
                    spec,
                    job_name=meta.name,
                    namespace=meta.namespace,
                    uid=meta.uid,
                    index=i,
                    hosts=hosts,
                    restart_count=action.restart_count,
                )
                for i in action.indices
            ]
            created = await asyncio.gather(
                *(asyncio.to_thread(kube.create_pod, meta.namespace, pod) for pod in pods)
            )
            # Only what was really created (409 = a retried or lagging reconcile): no event spam.
            names = [pod["metadata"]["name"] for pod, new in zip(pods, created, strict=True) if new]
            if names:
                message = f"created worker pods {', '.join(names)} (restart {action.restart_count})"
                await asyncio.to_thread(kube.post_event, body, "Normal", "CreatedPods", message)
