"""The look at an ended job's MLflow run (runwatch.RunWatch): who ended the run is said as first found."""

from __future__ import annotations

import asyncio

from mwms_contract.conditions import MLFLOW_RUN_ENDED, RUN_ENDED_BY_CHIEF, RUN_ENDED_BY_OPERATOR
from mwms_kit.trainjobs import trainjob
from mwms_operator.mlflow.runwatch import RunWatch
from mwms_operator.observe.findings import Said
from mwms_operator.observe.state import State, job_key
from mwms_operator.render.spec import parse_for_group
from mwms_operator.settings import OperatorConfig


class RunServer:
    """Stands in for the tracking server's one run: RUNNING until someone ends it."""

    def __init__(self) -> None:
        self.ended_by: str | None = None
        self.looks = 0

    def read(self, job_uid, tracking_uri, experiment, epochs, group):
        return None  # the last read of progress: no run data here

    def end_run(self, job_uid, tracking_uri, experiment, phase, run_id, said_before):
        self.looks += 1
        if self.ended_by is not None:
            return Said(MLFLOW_RUN_ENDED, True, RUN_ENDED_BY_CHIEF, "MLflow run r1 is FAILED")
        self.ended_by = "operator"
        return Said(MLFLOW_RUN_ENDED, True, RUN_ENDED_BY_OPERATOR, "the operator set it FAILED", warning=True)


def test_a_second_look_before_the_status_says_so_does_not_credit_the_chief_with_the_operators_end():
    """A poll queued while the job ran can fire after the first look ended the run and before the decision
    wrote MlflowRunEnded: it must not look again and find the run the operator ended no longer RUNNING."""
    body = trainjob(
        "abandoned",
        2,
        namespace="ns",
        metadata={"uid": "u-1", "resourceVersion": "5"},
        mlflow={"trackingUri": "http://mlflow.example:5000", "experiment": "e"},
        status={"phase": "Failed", "mlflow": {"runId": "r1"}},
    )
    state = State()
    key = job_key(body)
    state.jobs[key] = body
    reconciles: list = []
    config = OperatorConfig.from_env({})
    watch = RunWatch(
        None,
        state,
        reconciles.append,
        lambda namespace: None,
        access=config.tracking_access(),
        defaults=config.spec_defaults(),
        interval=config.progress_interval_seconds,
    )
    server = watch.reader = RunServer()

    watch.schedule(key, *_spec_and_status(body))
    asyncio.run(watch.poll(key))
    asyncio.run(watch.poll(key))  # the earlier delayed poll, the status still without the condition

    (said,) = watch.said(key)
    assert (said.type, said.reason) == (MLFLOW_RUN_ENDED, RUN_ENDED_BY_OPERATOR)
    assert server.looks == 1
    assert reconciles == [key]


def _spec_and_status(body):
    spec, _ = parse_for_group(body, OperatorConfig.from_env({}).spec_defaults())
    return spec, body["status"]
