"""The Reconciler: watch events -> what the watches told us (observe/) -> a queue of job keys; one worker at
a time reconciles a key (parse -> decide -> write status -> act), on an event, when one of the job's
deadlines falls due, and on a slow resync; a second queue polls MLflow for progress while a job runs."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from mwms_contract import conditions, names
from mwms_contract.conditions import PENDING, PODS_CREATED, SUSPENDED, TERMINAL, WORKLOAD_REFUSED
from mwms_contract.ownership import manager_of, own_workload
from mwms_contract.status import TrainJobStatus, format_time, parse_time, typed
from mwms_contract.tf_config import worker_hosts
from mwms_contract.trainjob import SpecError, TrainJobSpec
from mwms_operator.decide.job_status import (
    CreatePods,
    CreateService,
    Decision,
    DeleteJob,
    DeletePodGroups,
    DeletePods,
    FinishWorkload,
    JobMeta,
    KeepPostmortem,
    deferrable,
    next_due,
    unlisted_status,
)
from mwms_operator.decide.managed_by import decide_elsewhere
from mwms_operator.decide.policy import decide
from mwms_operator.decide.start import events_wanted
from mwms_operator.kube import index_holds, refusals
from mwms_operator.kube.client import Kube
from mwms_operator.kube.event_lookups import PodEventLookups
from mwms_operator.kube.group_creation import create_all, delete_pods
from mwms_operator.kube.group_remains import postmortem_of
from mwms_operator.kube.pod_groups import PodGroups
from mwms_operator.kube.workqueue import WorkQueue
from mwms_operator.mlflow.runwatch import RunWatch
from mwms_operator.observe.pod_states import as_created, worker_pod
from mwms_operator.observe.state import JobKey, State, owner_key
from mwms_operator.render.kueue_workload import build_workload, finished_status
from mwms_operator.render.labels import deletion_selector
from mwms_operator.render.pod_group import build_group, pod_group_selector
from mwms_operator.render.service import build_service
from mwms_operator.render.spec import parse_for_group
from mwms_operator.settings import OperatorConfig
from mwms_operator.telemetry import memory, metrics

log = logging.getLogger(__name__)
WORKERS = 8  # jobs reconciled at once; each mostly waits on the API server
# Pods of an earlier group still known this long after their job moved on are looked up (a missed DELETE).
LEAVING_GRACE_SECONDS = 10.0
AT_REST = (*TERMINAL, SUSPENDED)  # phases only an event can move a job out of: no resync
DUE_MARGIN_SECONDS = 0.2  # status times have whole seconds; look a little after a deadline, not just before
WORKLOAD_RETRY_SECONDS = 30.0  # a refused Workload (Kueue not installed yet, its webhook down) is tried again


class Reconciler:
    """Watch events -> the state -> a queue of job keys; each key is reconciled by one worker at a time."""

    def __init__(self, kube: Kube, config: OperatorConfig) -> None:
        self.kube, self.config = kube, config
        self.state = State()
        self.phases = metrics.PhaseBook()
        self.queue: WorkQueue[JobKey] = WorkQueue(
            self.reconcile, workers=WORKERS, name="reconcile", expected=refusals.TRANSIENT_ERRORS
        )
        self.runs = RunWatch(
            kube,
            self.state,
            self.queue.add,
            self._namespace_ending,
            access=config.tracking_access(),
            defaults=config.spec_defaults(),
            interval=config.progress_interval_seconds,
        )
        self._resync: asyncio.Task[None] | None = None
        self.lookups = PodEventLookups(kube, self.state, self.queue.add_after)
        self.pod_groups = PodGroups(kube)
        self._collections_forbidden = False  # said once: RBAC without `deletecollection` on pods

    def start(self) -> None:
        self.queue.start()
        self.runs.queue.start()
        self.runs.postmortems.start()
        self._resync = asyncio.get_running_loop().create_task(self._resync_forever(), name="resync")

    async def stop(self) -> None:
        if self._resync is not None:
            self._resync.cancel()
        await self.queue.stop()
        await self.runs.queue.stop()
        await self.runs.postmortems.stop()

    # --- watch events -> state -> queue

    def job_event(self, type_: str | None, body: Mapping[str, Any]) -> None:
        key = self.state.job_event(type_, body)
        if key is None:
            return
        if type_ == "DELETED":
            self.phases.forget(key.uid)
            self.queue.forget(key)
            self.runs.forget(key)
        elif not self.state.is_own_write(key, body):
            self.queue.add(key)

    def owned_event(self, body: Mapping[str, Any]) -> None:
        key = owner_key(body)
        if key is not None:
            self.queue.add(key)

    def pod_event(self, type_: str | None, body: Mapping[str, Any]) -> None:
        """As owned_event; a DELETED pod is parsed too, for its last state (was it disrupted?)."""
        key = owner_key(body)
        if key is None:
            return
        if type_ == "DELETED" and (pod := worker_pod(body)) is not None:
            self.state.pod_deleted(key, pod)
        self.state.observed(key, str(body.get("metadata", {}).get("uid") or ""))
        self.queue.add(key)

    def bind(self, pod_index: Mapping[Any, Any], service_index: Mapping[Any, Any]) -> None:
        """kopf hands its indexes to handlers only: the first TrainJob event brings them."""
        self.state.pod_index, self.state.service_index = pod_index, service_index

    async def _resync_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.reconcile_interval_seconds)
            self.resync()
            await asyncio.to_thread(memory.release_free_memory)  # what the last minute's work freed

    def resync(self) -> None:
        """Level-based safety net: look at every job that time can move on now and then, even if no event
        came. A suspended or finished job changes only on an event (its spec, a pod, its deletion; a TTL is
        scheduled for when it falls due), so it costs nothing here."""
        for key in list(self.state.jobs):
            if typed(self.state.status(key)).phase not in AT_REST:
                self.queue.add(key)

    # --- one reconcile

    async def reconcile(self, key: JobKey) -> None:
        body = self.state.jobs.get(key)
        if (
            body is None
            or body["metadata"].get("deletionTimestamp")
            or self.state.namespace_ending(key.namespace)
        ):
            return  # gone or going (its pods too, e.g. with its namespace): nothing to recreate
        try:
            manager = manager_of(body)
            if manager != names.CONTROLLER_NAME:
                await self._elsewhere(key, body, manager)
            elif index_holds.unlisted(key.namespace):
                await self._unlisted(key, body)
            else:
                await self._reconcile(key, body)
        except refusals.NamespaceEnding:  # a pod, the Service or an event refused (403, or 404 if gone)
            self._namespace_ending(key.namespace)
            self.queue.forget(key)  # a status write that waits too: nothing is written there any more
            self.state.settle(key)

    def _namespace_ending(self, namespace: str) -> None:
        """The namespace is being deleted or gone, and its jobs with it: leave them alone (said once)."""
        if self.state.end_namespace(namespace):
            log.info(
                "namespace %s is being deleted or gone: its TrainJobs are left alone until they are gone",
                namespace,
            )

    async def _unlisted(self, key: JobKey, body: Mapping[str, Any]) -> None:
        """Its namespace could not be listed (kube/index_holds.py): left alone, and told so once (an event,
        and the condition NamespaceUnlisted where the operator may write the job's status)."""
        if self.state.tell_once(key, conditions.NAMESPACE_UNLISTED):
            said = index_holds.unlisted(key.namespace)
            await index_holds.tell(self.kube, body, said, unlisted_status(body, said, datetime.now(UTC)))

    async def _elsewhere(self, key: JobKey, body: Mapping[str, Any], manager: str) -> None:
        """A job another controller runs (decide/managed_by.py): its status is never written here; for
        MultiKueue, its Workload is made."""
        spec = parse_for_group(body, self.config.spec_defaults())[0]
        done = key in self.state.workload_done
        decision = decide_elsewhere(manager, spec, told=self.state.told(key), workload_made=done)
        for event in decision.events:
            self.state.tell_once(key, event.reason)
            await asyncio.to_thread(self.kube.post_event, body, event.type, event.reason, event.message)
        if decision.actions and isinstance(spec, TrainJobSpec) and spec.queue_name:
            hosts = worker_hosts(
                key.name, key.namespace, spec.replicas, spec.port, self.config.cluster_domain
            )
            workload = build_workload(
                spec, spec.queue_name, job_name=key.name, namespace=key.namespace, uid=key.uid, hosts=hosts
            )
            try:
                await asyncio.to_thread(self.kube.create_workload, key.namespace, workload)
            except (refusals.Rejected, refusals.Refused, refusals.ApiError) as error:
                message = f"the API server refused the job's Kueue Workload: {error}"
                await asyncio.to_thread(self.kube.post_event, body, "Warning", WORKLOAD_REFUSED, message)
                self.queue.add_after(key, WORKLOAD_RETRY_SECONDS)
                return
            self.state.workload_done.add(key)

    async def _reconcile(self, key: JobKey, body: Mapping[str, Any]) -> None:
        started = time.monotonic()
        meta = JobMeta(key.name, key.namespace, key.uid, int(body["metadata"].get("generation") or 1))
        spec, template_error = parse_for_group(body, self.config.spec_defaults())
        previous = self.state.status(key)
        creation_refused = self.state.creation_refused(key)
        gang_served = await self.pod_groups.served()
        now = datetime.now(UTC)
        if await self._confirm_leaving(key):
            self.queue.add_after(key, LEAVING_GRACE_SECONDS)
        known = self.state.pods_of(key)
        pods = await self.lookups.with_events(key, known, events_wanted(spec, known, previous, now))
        decision = decide(
            meta,
            spec,
            pods,
            service_exists=self.state.has_service(key),
            now=now,
            previous=previous,
            refused=self.state.refused.get(key),
            creation_refused=creation_refused,
            template_error=template_error,
            disrupted=self.state.disruptions(key),
            said=self.runs.said(key),
            gang_served=gang_served,
            open_workload=None if key in self.state.workload_done else own_workload(body),
        )
        # Status first, then actions, then events: a crash in between is repaired by the next reconcile.
        if not await self._write(meta, key, decision, previous):
            return
        try:
            await self._act(body, meta, spec, decision, dry_run_first=creation_refused is not None)
        except refusals.Rejected as error:
            # e.g. an invalid spec.template: the next run (right away) fails the job with this message.
            self.state.refused[key] = str(error)
            self.queue.add(key)
        except refusals.Refused as error:
            # Quota, LimitRange, a webhook, 429/5xx, a name taken: the next run (right away) says so in status
            # and removes what was created; the run after the backoff tries again. Not an error of the
            # operator: no traceback.
            tries, delay = self.state.refuse_creation(key, error.reason, str(error))
            log.info("%s/%s: creation refused (try %d, again in %.0f s): %s", *key[:2], tries, delay, error)
            # The same message on every try: the event recorder (kube/events.py) counts repeats on one Event.
            await asyncio.to_thread(self.kube.post_event, body, "Warning", error.reason, str(error))
            self.queue.add(key)
        for event in decision.events:
            await asyncio.to_thread(self.kube.post_event, body, event.type, event.reason, event.message)
        self._schedule(key, spec, decision.new)
        if creation_refused is not None and creation_refused.wait_seconds > 0:
            self.queue.add_after(key, creation_refused.wait_seconds + DUE_MARGIN_SECONDS)
        metrics.RECONCILE.observe(time.monotonic() - started)
        phase = decision.new.phase or PENDING
        self.phases.set(key.uid, phase, key.namespace, queued=metrics.held_by_queue(phase, pods))
        if decision.all_pods_created:
            created = parse_time(body["metadata"].get("creationTimestamp"))
            if created is not None:
                metrics.POD_CREATION.observe((now - created).total_seconds())

    def _schedule(self, key: JobKey, spec: TrainJobSpec | SpecError, status: TrainJobStatus) -> None:
        due = next_due(spec, status)
        if due is not None:
            delay = (due - datetime.now(UTC)).total_seconds() + DUE_MARGIN_SECONDS
            self.queue.add_after(key, delay)
        self.runs.schedule(key, spec, status)

    async def _confirm_leaving(self, key: JobKey) -> bool:
        """Pods of an earlier group still known past a grace are looked up: a DELETE the watch missed (the
        operator was down) must not hold the new group for ever. True while some are known (look again)."""
        leaving, overdue = self.state.leaving(key, LEAVING_GRACE_SECONDS)
        for pod in overdue:
            # Gone, or replaced by a pod of the same name (a newer group): either way this one is gone.
            if await asyncio.to_thread(self.kube.pod_uid, key.namespace, pod.name) != pod.uid:
                self.state.forget_pod(key, pod)
                leaving.remove(pod)
        return bool(leaving)

    async def _write(
        self, meta: JobMeta, key: JobKey, decision: Decision, previous: Mapping[str, Any]
    ) -> bool:
        """Write the decided status if it changed; False if the TrainJob is gone. A change that may wait
        (job_status.deferrable: counts, the start's clocks) is written once its window is over (the queue's
        delayed requeue), with whatever came meanwhile."""
        patch, written = decision.status, self.state.server_status(key)
        if all(written.get(k) == v for k, v in patch.items()):
            self.state.settle(key)
            return True
        if deferrable(written, decision.new):
            wait = self.state.defer(key, patch)
            if wait > 0:
                self.queue.add_after(key, wait)
                return True
        response = await asyncio.to_thread(self.kube.patch_status, meta.namespace, meta.name, patch)
        if response is None:
            return False
        self.state.wrote(key, response)
        self.state.settle(key)
        metrics.count_transitions(meta.namespace, previous, decision.new)
        return True

    async def _act(
        self,
        body: Mapping[str, Any],
        meta: JobMeta,
        spec: TrainJobSpec | SpecError,
        decision: Decision,
        *,
        dry_run_first: bool,
    ) -> None:
        kube, key = self.kube, JobKey(meta.namespace, meta.name, meta.uid)
        for action in decision.actions:
            if isinstance(spec, TrainJobSpec) and isinstance(action, KeepPostmortem):
                if self.runs.keeps_postmortem(spec):  # else its reads (1 + a LIST of events a pod) go nowhere
                    posting = [(e.type, e.reason, e.message) for e in decision.events]
                    status = decision.new.to_dict()
                    build = await postmortem_of(kube, key, body, action.group, status, posting)
                    self.runs.keep_postmortem(key, spec, action.group, build)
            elif isinstance(action, DeletePods):
                await self._delete_doomed(key, action.names)
            elif isinstance(action, DeletePodGroups):
                await self.pod_groups.delete_earlier(key.namespace, pod_group_selector(key.uid, action.keep))
            elif isinstance(action, DeleteJob):
                await asyncio.to_thread(kube.delete_trainjob, meta.namespace, meta.name, meta.uid)
            elif isinstance(action, FinishWorkload):
                ended = finished_status(
                    action.name,
                    meta.namespace,
                    succeeded=action.succeeded,
                    message=action.message,
                    time=action.time or format_time(datetime.now(UTC)),
                )
                await asyncio.to_thread(kube.apply_workload_status, meta.namespace, action.name, ended)
                self.state.workload_done.add(key)
            elif isinstance(spec, TrainJobSpec) and isinstance(action, CreateService):
                service = build_service(spec, job_name=meta.name, namespace=meta.namespace, uid=meta.uid)
                await asyncio.to_thread(kube.create_service, meta.namespace, service)
            elif isinstance(spec, TrainJobSpec) and isinstance(action, CreatePods):
                await self._create_pods(body, meta, spec, action, dry_run_first=dry_run_first)

    async def _delete_doomed(self, key: JobKey, doomed: tuple[str, ...]) -> None:
        """The pods a decision deletes (cleanPodPolicy, a restart, a suspend), in one request whatever their
        number, by a selector that holds the job's uid (labels.deletion_selector); one by one, each by its
        uid, where an older operator made them or the operator may not delete collections (RBAC). Only pods
        the index holds as this job's, never another's that took a name."""
        pods = self.state.pods_of(key)
        selector = deletion_selector(key.uid, pods, doomed)
        if selector is not None:
            try:
                await asyncio.to_thread(self.kube.delete_pods, key.namespace, *selector)
                return
            except refusals.ApiError as error:
                if error.status != 403:
                    raise
                if not self._collections_forbidden:
                    self._collections_forbidden = True
                    log.warning("pods are deleted one by one: %s (grant `deletecollection` on pods)", error)
        await delete_pods(self.kube, key.namespace, [(p.name, p.uid) for p in pods if p.name in doomed])

    async def _create_pods(
        self,
        body: Mapping[str, Any],
        meta: JobMeta,
        spec: TrainJobSpec,
        action: CreatePods,
        *,
        dry_run_first: bool,
    ) -> None:
        """After a refusal, every pod of the group is first tried as a dry run (admission only, nothing
        stored): a group that would be refused again (its quota still full, the webhook still down) is not
        created in part only to be deleted."""
        pods, group_body = build_group(
            spec,
            job_name=meta.name,
            namespace=meta.namespace,
            uid=meta.uid,
            indices=action.indices,
            restart_count=action.restart_count,
            gang=action.gang,
            cluster_domain=self.config.cluster_domain,
        )
        if group_body is not None:  # first: a worker that names a PodGroup not there waits without a word
            await self.pod_groups.create(meta.namespace, group_body)
        if dry_run_first:
            await create_all(self.kube, meta.namespace, pods, dry_run=True)
        created = await create_all(self.kube, meta.namespace, pods, dry_run=False)
        key = JobKey(meta.namespace, meta.name, meta.uid)
        self.state.creation_accepted(key)
        self.state.expect(key, as_created(pods, dict(created)))
        if created:
            pod_names = ", ".join(name for name, _ in created)
            message = f"created worker pods {pod_names} (restart {action.restart_count})"
            await asyncio.to_thread(self.kube.post_event, body, "Normal", PODS_CREATED, message)
