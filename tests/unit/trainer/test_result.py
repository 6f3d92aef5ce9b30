"""The chief's return value as the job's result: whole or a clear failure, never cut (mwms_trainer.result)."""

import pytest

from mwms_contract import names
from mwms_trainer import result
from mwms_trainer.errors import ResultError


def no_mlflow(text, artifact_file):
    return None


def test_a_small_value_travels_inline():
    assert result.summary_fields({"loss": 0.5}, no_mlflow) == {"result": {"loss": 0.5}}


def test_a_bigger_value_goes_to_the_run():
    stored = {}

    def log_text(text, artifact_file):
        stored[artifact_file] = text
        return f"runs:/r1/{artifact_file}"

    value = ["x" * 98] * 1000
    fields = result.summary_fields(value, log_text)
    assert fields["resultArtifact"] == "runs:/r1/mwms/result.json"
    assert fields["resultBytes"] == len(stored["mwms/result.json"]) > result.INLINE_BYTES
    assert "result" not in fields


def test_a_value_that_is_not_json_fails_the_job_saying_so():
    with pytest.raises(
        ResultError, match=r"not JSON \(TypeError: Object of type set is not JSON serializable\)"
    ):
        result.summary_fields({1, 2}, no_mlflow)
    assert ResultError.exit_code == names.EXIT_FAILURE


def test_a_value_above_1_mib_fails_the_job_saying_so():
    with pytest.raises(ResultError, match=r"above the 1048576 bytes \(1 MiB\) a job returns"):
        result.encode("x" * result.MAX_RESULT_BYTES)


def test_without_mlflow_a_value_above_the_message_fails_naming_the_tracking_server():
    with pytest.raises(
        ResultError, match=r"without MLflow only 3000 bytes fit .*\(spec\.mlflow\.trackingUri"
    ):
        result.summary_fields("x" * 5000, no_mlflow)
