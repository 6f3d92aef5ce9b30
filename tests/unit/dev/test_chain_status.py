"""The end-to-end chain reads a TrainJob's status through the contract's typed status."""

from __future__ import annotations

import pytest

from mwms_dev.chain import ChainError, check_mlflow


@pytest.mark.parametrize(
    "status",
    [None, {"phase": "Succeeded"}, {"mlflow": {"runId": "r1"}}, {"mlflow": {"modelUri": "models:/m-1"}}],
)
def test_a_job_whose_status_names_no_run_and_model_is_refused_before_mlflow_is_asked(status):
    job = {"metadata": {"uid": "u-1"}, **({"status": status} if status is not None else {})}
    # An address nothing answers at: the check must fail on the status alone, before any request.
    with pytest.raises(ChainError, match="status.mlflow lacks runId/modelUri"):
        check_mlflow("http://127.0.0.1:9", job)
