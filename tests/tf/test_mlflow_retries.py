"""Which MLflow failures the trainer retries: against a real `mlflow server`, no TensorFlow involved.

A refusal (4xx: a bad value, a name taken, a missing object) fails at once and permanently; only an
unreachable or failing server (connection refused, 5xx) is retried and then handed to the operator as exit 75.
"""

from __future__ import annotations

import uuid

import pytest

from mwms_contract import names
from mwms_trainer.errors import MlflowRefusedError, RetryableError
from mwms_trainer.local import free_ports
from mwms_trainer.retries import with_retries

DELAYS = (0.01, 0.01, 0.01)


def _counted(call):
    calls = []

    def counted():
        calls.append(1)
        return call()

    return counted, calls


REFUSALS = ["RESOURCE_ALREADY_EXISTS", "INVALID_PARAMETER_VALUE", "RESOURCE_DOES_NOT_EXIST"]


@pytest.mark.parametrize("refusal", REFUSALS)
def test_a_refused_request_is_not_retried_and_fails_permanently(mlflow_server, mlflow_client, refusal):
    name = f"retries-{uuid.uuid4().hex[:8]}"
    experiment_id = mlflow_client.create_experiment(name)
    run_id = mlflow_client.create_run(experiment_id).info.run_id
    mlflow_client.log_param(run_id, "epochs", "3")
    requests = {
        "RESOURCE_ALREADY_EXISTS": lambda: mlflow_client.create_experiment(name),
        "INVALID_PARAMETER_VALUE": lambda: mlflow_client.log_param(run_id, "epochs", "4"),  # params are fixed
        "RESOURCE_DOES_NOT_EXIST": lambda: mlflow_client.get_run(uuid.uuid4().hex),
    }
    call, calls = _counted(requests[refusal])
    with pytest.raises(MlflowRefusedError, match=refusal) as refused:
        with_retries("the request", mlflow_server.url, call, DELAYS)
    assert len(calls) == 1
    assert refused.value.exit_code == names.EXIT_FAILURE
    assert str(refused.value).startswith(f"MLflow at {mlflow_server.url} refused the request")


def test_an_unreachable_server_is_retried_then_retryable(monkeypatch):
    import mlflow

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # count our retries, not the client's

    url = f"http://127.0.0.1:{free_ports(1)[0]}"  # nothing listens there
    call, calls = _counted(lambda: mlflow.MlflowClient(url).get_experiment_by_name("anything"))
    with pytest.raises(RetryableError, match=f"MLflow at {url} is unavailable"):
        with_retries("experiment lookup", url, call, DELAYS)
    assert len(calls) == len(DELAYS) + 1


def test_an_error_of_the_model_itself_is_not_retried_but_mlflows_are():
    """User code's models: a layer that cannot be saved is the user's error (exit 1, its own traceback), not
    an MLflow outage to retry and hand to the operator as exit 75."""
    from mlflow.exceptions import MlflowException

    from mwms_trainer.retries import came_from_mlflow

    def unsavable():
        raise NotImplementedError("Layer MyLayer has no get_config()")

    call, calls = _counted(unsavable)
    with pytest.raises(NotImplementedError, match="get_config"):
        with_retries("log_model of 'm'", "http://mlflow", call, DELAYS, retried_if=came_from_mlflow)
    assert len(calls) == 1

    def outage():
        raise MlflowException("API request failed: too many 503 error responses")

    call, calls = _counted(outage)
    with pytest.raises(RetryableError, match="log_model of 'm' failed 4 times"):
        with_retries("log_model of 'm'", "http://mlflow", call, DELAYS, retried_if=came_from_mlflow)
    assert len(calls) == len(DELAYS) + 1
