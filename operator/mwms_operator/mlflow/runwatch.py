"""The job's MLflow run, watched on a queue of its own: status.progress while the job runs, and once the job
has ended, its last progress and that its run has ended too (a run the chief left RUNNING is ended by the
operator); on a queue of their own, the post-mortems of groups that ended, written into the run (keeper.py).
What a look learns that the conditions must say (ProgressUnavailable, MlflowRunEnded, PostmortemKept) goes to
the next decision (`said`), which writes it and posts one event when its reason changes: the conditions have
one writer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from mwms_contract.conditions import (
    MLFLOW_RUN_ENDED,
    PROGRESS_FLOWING,
    PROGRESS_UNAVAILABLE,
    RUNNING,
    TERMINAL,
)
from mwms_contract.status import TrainJobStatus, format_time, typed
from mwms_contract.trainjob import SpecError, TrainJobSpec
from mwms_operator.kube import refusals
from mwms_operator.kube.client import Kube
from mwms_operator.kube.workqueue import WorkQueue
from mwms_operator.mlflow.access import TrackingAccess
from mwms_operator.mlflow.keeper import FINAL_REASONS, keep_postmortem
from mwms_operator.mlflow.progress import ProgressReader, Skipped, Unreadable, finished, status_patch
from mwms_operator.observe.findings import Said
from mwms_operator.observe.state import JobKey, State
from mwms_operator.render.spec import SpecDefaults, parse_for_group

# A run the operator could not end is tried again this many times, one progress interval apart (and once more
# after an operator restart): a server that is down for minutes is not tried for ever.
RUN_END_TRIES = 10
# A group's post-mortem, or what reads the rest of it and builds it (the reconciler's, awaited once).
Postmortem = Mapping[str, Any] | Callable[[], Awaitable[Mapping[str, Any]]]


class RunWatch:
    def __init__(
        self,
        kube: Kube,
        state: State,
        reconcile: Callable[[JobKey], None],
        namespace_ending: Callable[[str], None],
        *,
        access: TrackingAccess,
        defaults: SpecDefaults,
        interval: float,
    ) -> None:
        """`access`: the tracking servers that may be called; `defaults`: the spec's; `interval`: seconds
        between two looks at a running job's progress."""
        self.kube, self.state, self.defaults, self.interval = kube, state, defaults, interval
        self._reconcile, self._namespace_ending = reconcile, namespace_ending
        self.queue: WorkQueue[JobKey] = WorkQueue(
            self.poll, workers=2, name="progress", expected=refusals.TRANSIENT_ERRORS
        )
        self.reader = ProgressReader(access)
        self._said: dict[JobKey, dict[str, Said]] = {}
        self._end_tries: dict[JobKey, int] = {}
        self.access = access
        # Post-mortems to write, by (job, group): (tracking URI, experiment, the document or how to build it,
        # tries so far). A job deleted meanwhile keeps its own: `mwms describe --run` reads it after the job
        # is gone. One worker: one group's reads (a LIST of events an object) at a time.
        self._postmortems: dict[tuple[JobKey, int], tuple[str, str, Postmortem, int]] = {}
        self.postmortems: WorkQueue[tuple[JobKey, int]] = WorkQueue(
            self._keep, workers=1, name="postmortem", expected=refusals.TRANSIENT_ERRORS
        )

    def said(self, key: JobKey) -> tuple[Said, ...]:
        """What the last looks learned, for the decision to write."""
        return tuple(self._said.get(key, {}).values())

    def forget(self, key: JobKey) -> None:
        self.queue.forget(key)
        self.reader.forget(key.uid)
        self._said.pop(key, None)
        self._end_tries.pop(key, None)

    def schedule(
        self, key: JobKey, spec: TrainJobSpec | SpecError, status: TrainJobStatus | Mapping[str, Any]
    ) -> None:
        """After a reconcile: poll a running job's progress; look once at an ended job's run."""
        if not isinstance(spec, TrainJobSpec) or not spec.tracking_uri.startswith(("http://", "https://")):
            return
        now = typed(status)
        if now.phase == RUNNING and not self.queue.scheduled(key):
            self.queue.add_after(key, self.interval)
        elif now.phase in TERMINAL and key not in self._end_tries and not now.holds(MLFLOW_RUN_ENDED):
            self._end_tries[key] = 0
            self.queue.add(key)

    @staticmethod
    def keeps_postmortem(spec: TrainJobSpec) -> bool:
        """Whether a group's post-mortem has a run to go to: a tracking server the operator can call."""
        return spec.tracking_uri.startswith(("http://", "https://"))

    def keep_postmortem(self, key: JobKey, spec: TrainJobSpec, group: int, document: Postmortem) -> None:
        """Write a group's post-mortem (or what builds it, awaited once, here) into the job's run (tried
        again, as a run's end is, while the tracking server fails); only for a spec that keeps_postmortem
        accepts, which the caller asks before reading."""
        item = (key, group)
        self._postmortems[item] = (spec.tracking_uri, spec.experiment, document, 0)
        self.postmortems.add(item)

    async def _keep(self, item: tuple[JobKey, int]) -> None:
        pending = self._postmortems.get(item)
        if pending is None:
            return
        uri, experiment, document, tries = pending
        if callable(document):
            document = await document()
            self._postmortems[item] = (uri, experiment, document, tries)
        key = item[0]
        said = await asyncio.to_thread(keep_postmortem, self.access, key.uid, uri, experiment, document)
        if said.reason in FINAL_REASONS or tries + 1 >= RUN_END_TRIES:
            del self._postmortems[item]
        else:
            self._postmortems[item] = (uri, experiment, document, tries + 1)
            self.postmortems.add_after(item, self.interval)
        if key in self.state.jobs:
            self._tell(key, said)

    def _tell(self, key: JobKey, said: Said) -> None:
        """Keep what the decision should say; a new status or reason needs a decision now."""
        known = self._said.setdefault(key, {})
        before = known.get(said.type)
        known[said.type] = said
        if before is None or (before.status, before.reason) != (said.status, said.reason):
            self._reconcile(key)

    async def poll(self, key: JobKey) -> None:
        body = self.state.jobs.get(key)
        if body is None or self.state.namespace_ending(key.namespace):
            return  # gone or going
        status = typed(self.state.status(key))
        spec, _ = parse_for_group(body, self.defaults)
        if isinstance(spec, SpecError):
            return
        if status.phase == RUNNING:
            self.queue.add_after(key, self.interval)
            await self._progress(key, body, spec, status)
        elif status.phase in TERMINAL and not status.holds(MLFLOW_RUN_ENDED) and not self._run_ended(key):
            if key not in self._end_tries or self._end_tries[key] == 0:  # the epochs up to the end
                await self._progress(key, body, spec, status, final=True)
            await self._end_run(key, spec, status)
        # Otherwise (pending, restarting, suspended): no polling until it runs again.

    def _run_ended(self, key: JobKey) -> bool:
        """A look already ended the run or found it ended. A second look (a poll queued while the job ran)
        before the decision has written that would find the run the operator ended no longer RUNNING, and
        credit the chief with it."""
        said = self._said.get(key, {}).get(MLFLOW_RUN_ENDED)
        return said is not None and said.status

    async def _progress(
        self,
        key: JobKey,
        body: Mapping[str, Any],
        spec: TrainJobSpec,
        status: TrainJobStatus,
        *,
        final: bool = False,
    ) -> None:
        """Read status.progress; `final`: once the job has ended, the epochs up to its end (a job shorter than
        a progress interval is read only then), and a failed read is the run end's to name."""
        epochs = spec.trainer.get("epochs")
        found = await asyncio.to_thread(
            self.reader.read,
            key.uid,
            spec.tracking_uri,
            spec.experiment,
            epochs if isinstance(epochs, int) else None,
            status.restarts,
        )
        if final:  # a failed last read is the run end's to name
            if not isinstance(found, dict):
                return
            found = finished(found, status.phase or "")
        if isinstance(found, Skipped):  # a tracking server the administrator does not allow: said once
            try:
                await asyncio.to_thread(self.kube.post_event, body, "Warning", found.reason, found.message)
            except refusals.NamespaceEnding:
                self._namespace_ending(key.namespace)
            return
        if isinstance(found, Unreadable):
            message = f"status.progress is not read from MLflow: {found.message}"
            self._tell(key, Said(PROGRESS_UNAVAILABLE, True, found.reason, message, warning=True))
            return
        # Cleared once something was said (here, or before an operator restart: in the status).
        said = PROGRESS_UNAVAILABLE in self._said.get(key, {}) or status.holds(PROGRESS_UNAVAILABLE)
        if found is not None or said:
            self._tell(key, Said(PROGRESS_UNAVAILABLE, False, PROGRESS_FLOWING, "status.progress is read"))
        if found:  # status.progress, and status.mlflow's run as soon as the chief opened it
            await self._patch(key, status_patch(found, status, _now()))

    async def _patch(self, key: JobKey, patch: Mapping[str, Any]) -> None:
        if patch:
            response = await asyncio.to_thread(self.kube.patch_status, key.namespace, key.name, patch)
            if response is not None:
                self.state.wrote(key, response)

    async def _end_run(self, key: JobKey, spec: TrainJobSpec, status: TrainJobStatus) -> None:
        run_id = status.mlflow.run_id if status.mlflow is not None else None
        before = MLFLOW_RUN_ENDED in self._said.get(key, {}) or status.condition(MLFLOW_RUN_ENDED) is not None
        said = await asyncio.to_thread(
            self.reader.end_run,
            key.uid,
            spec.tracking_uri,
            spec.experiment,
            status.phase or "",
            run_id,
            before,
        )
        tries = self._end_tries[key] = self._end_tries.get(key, 0) + 1
        if said is None:
            return  # no allowed server, or no run: nothing to end
        self._tell(key, said)
        if not said.status and tries < RUN_END_TRIES:
            self.queue.add_after(key, self.interval)


def _now() -> str:
    return format_time(datetime.now(UTC))
