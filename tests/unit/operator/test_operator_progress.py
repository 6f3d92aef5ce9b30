import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from mwms_contract.status import Progress
from mwms_kit.fake_api_server import FakeApiServer, Seen, mlflow, served
from mwms_operator.mlflow.progress import (
    ProgressReader,
    Skipped,
    Unreadable,
    fetch_progress,
    finished,
    progress_from_run,
    status_patch,
)
from mwms_operator.settings import OperatorConfig

RUN = {
    "info": {"run_id": "abc"},
    "data": {
        "metrics": [
            {"key": "loss", "value": 0.5, "step": 0},
            {"key": "loss", "value": 0.3, "step": 4},
            {"key": "accuracy", "value": 0.9, "step": 4},
        ],
        "params": [{"key": "epochs", "value": "20"}],
    },
}


def test_progress_from_run_counts_epochs_from_steps_and_their_percentage():
    assert progress_from_run(RUN, None) == {
        "runId": "abc",
        "metrics": {"loss": 0.3, "accuracy": 0.9},
        "epoch": 5,
        "epochs": 20,
        "progressPercentage": 25,
    }


def test_non_finite_metrics_are_left_out():
    run = {
        "info": {"run_id": "x"},
        "data": {
            "metrics": [
                {"key": "loss", "value": float("nan"), "step": 0},
                {"key": "acc", "value": 0.5, "step": 0},
            ]
        },
    }
    assert progress_from_run(run, 1)["metrics"] == {"acc": 0.5}


def test_progress_falls_back_to_the_spec_epochs_and_tolerates_an_empty_run():
    assert progress_from_run({"info": {"run_id": "x"}}, 7) == {"runId": "x", "metrics": {}, "epochs": 7}


def test_an_epochs_param_that_is_no_count_is_left_out():
    """User code may log its own "epochs" param (a list, a schedule): progress then shows no total."""
    run = {"info": {"run_id": "x"}, "data": {"params": [{"key": "epochs", "value": "[10, 20]"}]}}
    assert "epochs" not in progress_from_run(run, None)


@pytest.fixture
def tracking() -> Iterator[FakeApiServer]:
    """A tiny HTTP server speaking the two MLflow REST calls the operator makes."""
    with served(FakeApiServer(answer=mlflow(RUN))) as fake:
        yield fake


def test_fetch_progress_searches_the_run_by_job_uid_tag(tracking):
    assert fetch_progress(tracking.url, "my exp", "uid-1", None)["epoch"] == 5
    get, search = tracking.seen
    assert get.path == "/api/2.0/mlflow/experiments/get-by-name?experiment_name=my+exp"
    assert search.body["experiment_ids"] == ["3"]
    assert search.body["filter"] == "tags.`mwms.dev/job-uid` = 'uid-1'"


def test_an_unreachable_tracking_server_gives_no_progress_and_says_so():
    found = fetch_progress("http://127.0.0.1:9", "e", "u", None, timeout=0.5)
    assert isinstance(found, Unreadable) and found.reason == "TrackingUnreachable"
    assert found.message.startswith("MLflow at http://127.0.0.1:9 is unreachable: "), found.message


@pytest.mark.parametrize(
    "reply",
    [{"runs": "not a list"}, {"runs": [{"data": {"metrics": [{"key": "loss", "step": "x", "value": 1}]}}]},
     {"runs": [None]}, {"runs": [{"data": {"metrics": "nope"}}]}],
)  # fmt: skip
def test_a_tracking_server_answering_nonsense_gives_no_progress_and_says_so(reply):
    answer = mlflow()
    fake = FakeApiServer(answer=lambda seen: answer(seen) if seen.method == "GET" else (200, reply))
    with served(fake):
        found = fetch_progress(fake.url, "e", "u", None)
    assert isinstance(found, Unreadable) and found.reason == "TrackingBadReply"


def test_only_http_tracking_uris_are_polled(tmp_path):
    # Lay out files where urllib's file: handler would find a perfectly good answer.
    api = tmp_path / "api" / "2.0" / "mlflow"
    (api / "experiments").mkdir(parents=True)
    (api / "experiments" / "get-by-name").write_text(json.dumps({"experiment": {"experiment_id": "1"}}))
    (api / "runs").mkdir()
    (api / "runs" / "search").write_text(json.dumps({"runs": [RUN]}))
    assert fetch_progress(f"file://{tmp_path}", "e", "u", None) is None
    assert fetch_progress("sqlite:///mlflow.db", "e", "u", None) is None


def recorded(fake: FakeApiServer) -> list[tuple[str, str | None]]:
    """Each request's path and Authorization header."""
    return [(seen.path, seen.headers.get("Authorization")) for seen in fake.seen]


@pytest.fixture
def recorders() -> Iterator[Callable[..., FakeApiServer]]:
    """`recorders(redirect_to=None, require=None)`: a server that answers as MLflow would, or with
    `redirect_to` a 302 to another server, or 401 without the `require`d credentials."""
    with ExitStack() as stack:

        def make(*, redirect_to: str | None = None, require: str | None = None) -> FakeApiServer:
            as_mlflow = mlflow(RUN)

            def answer(seen: Seen) -> tuple[Any, ...]:
                if redirect_to:
                    return 302, b"", {"Location": redirect_to + seen.path}
                if require and seen.headers.get("Authorization") != require:
                    return 401, b""
                return as_mlflow(seen)

            return stack.enter_context(served(FakeApiServer(answer=answer)))

        yield make


def reader(own: str, *allowed: str, token: str = "") -> ProgressReader:
    env = {"MWMS_TRACKING_URI": own, "MWMS_ALLOWED_TRACKING_URIS": ",".join(allowed)}
    if token:
        env["MWMS_TRACKING_TOKEN"] = token
    return ProgressReader(OperatorConfig.from_env(env).tracking_access(), timeout=2)


def test_a_server_that_is_not_allowed_gets_no_request_and_the_job_is_told_once(recorders):
    outsider = recorders()
    progress = reader("http://mlflow.example:5000")
    first = progress.read("uid-1", outsider.url, "e", None)
    assert isinstance(first, Skipped) and first.reason == "TrackingServerNotAllowed"
    assert outsider.url in first.message and "operator.allowedTrackingUris" in first.message
    assert progress.read("uid-1", outsider.url, "e", None) is None  # told once per job
    assert isinstance(progress.read("uid-2", outsider.url, "e", None), Skipped)  # each job is told
    assert recorded(outsider) == []


def test_allowed_servers_are_read(recorders):
    own, listed = recorders(), recorders()
    progress = reader(own.url, listed.url)
    assert progress.read("u", own.url, "e", None)["epoch"] == 5
    assert progress.read("u", listed.url + "/", "e", None)["epoch"] == 5
    assert len(recorded(own)) == len(recorded(listed)) == 2


def test_an_allowed_server_cannot_redirect_the_operator_elsewhere(recorders):
    """A 302 to a host that is not allowed is not followed (nor are our credentials sent there)."""
    inside = recorders()
    redirecting = recorders(redirect_to=inside.url)
    progress = reader(redirecting.url, token="tok-123")
    found = progress.read("u", redirecting.url, "e", None)
    assert isinstance(found, Unreadable) and found.reason == "TrackingBadReply"
    assert "answered 302 to experiments/get-by-name" in found.message
    assert recorded(redirecting) and recorded(inside) == []


def test_credentials_reach_the_operators_server_and_no_other(recorders):
    secured = recorders(require="Bearer tok-123")
    other = recorders()
    progress = reader(secured.url, other.url, token="tok-123")
    assert progress.read("u", secured.url, "e", None)["runId"] == "abc"
    assert {auth for _, auth in recorded(secured)} == {"Bearer tok-123"}
    progress.read("u", other.url, "e", None)
    assert {auth for _, auth in recorded(other)} == {None}


@pytest.mark.parametrize(
    "added",
    ["/any/path?x=", "", "/base/other", "/base?x=1", "/base/..", "/base#top", "/Base", "/base/api/2.0"],
)
def test_a_job_uri_off_the_allowed_base_path_gets_no_request_and_no_token(recorders, added):
    """The allowlist pins the base path: the same host at another path, or with a query, is another server."""
    own = recorders()
    progress = reader(own.url + "/base", token="tok-123")
    told = progress.read("u", own.url + added, "e", None)
    assert isinstance(told, Skipped) and told.reason == "TrackingServerNotAllowed"
    assert recorded(own) == []


def test_an_allowed_base_path_gets_requests_at_mlflow_api_paths_only(recorders):
    own, team = recorders(), recorders()
    progress = reader(own.url + "/base/", team.url + "/team", token="tok-123")
    assert progress.read("u", own.url.replace("http://", "HTTP://") + "/base", "my exp", None)["epoch"] == 5
    assert isinstance(progress.read("u2", own.url + "/base/admin?drop=1", "my exp", None), Skipped)
    assert recorded(own) == [
        ("/base/api/2.0/mlflow/experiments/get-by-name?experiment_name=my+exp", "Bearer tok-123"),
        ("/base/api/2.0/mlflow/runs/search", "Bearer tok-123"),
    ]
    assert progress.read("u", team.url + "/team/", "e", None)["epoch"] == 5
    assert recorded(team) == [
        ("/team/api/2.0/mlflow/experiments/get-by-name?experiment_name=e", None),
        ("/team/api/2.0/mlflow/runs/search", None),
    ]


def test_without_credentials_a_secured_server_gives_no_progress_and_says_so(recorders):
    secured = recorders(require="Bearer tok-123")
    found = reader(secured.url).read("u", secured.url, "e", None)
    assert isinstance(found, Unreadable) and found.reason == "TrackingUnauthorized"
    assert "operator.trackingCredentials" in found.message
    assert recorded(secured)  # it was asked, and said no


def test_userinfo_in_a_tracking_uri_is_not_sent_in_the_url_nor_shown(recorders):
    own = recorders()
    uri = own.url.replace("http://", "http://ada:pw-in-url@")
    progress = reader(own.url)
    assert progress.read("u", uri, "e", None)["epoch"] == 5
    outsider = ProgressReader(OperatorConfig.from_env({}).tracking_access())
    told = outsider.read("u", uri, "e", None)
    assert isinstance(told, Skipped) and "pw-in-url" not in told.message


def test_the_run_goes_to_status_mlflow_as_soon_as_it_is_found():
    found = progress_from_run({**RUN, "info": {"run_id": "abc", "experiment_id": "7"}}, None)
    patch = status_patch(found, {"phase": "Running"}, "2026-12-03T12:00:00Z")
    assert patch["mlflow"] == {"runId": "abc", "experimentId": "7"}
    assert patch["progress"] == {
        "runId": "abc",
        "metrics": {"loss": 0.3, "accuracy": 0.9},
        "epoch": 5,
        "epochs": 20,
        "progressPercentage": 25,
        "updateTime": "2026-12-03T12:00:00Z",
    }
    # Once shown, nothing to write until the run moves on; the chief's final mlflow (modelUri) is kept.
    shown = {"mlflow": {"runId": "abc", "experimentId": "7", "modelUri": "m"}, "progress": patch["progress"]}
    assert status_patch(found, shown, "2026-12-03T12:00:15Z") == {}
    found["epoch"] = 6
    assert set(status_patch(found, shown, "later")) == {"progress"}


def epoch_run(epoch: int, at_ms: int, epochs: int = 60) -> dict[str, Any]:
    """A run whose last logged epoch is `epoch` (1-based), logged at `at_ms` (MLflow's milliseconds)."""
    return {
        "info": {"run_id": "abc"},
        "data": {
            "metrics": [{"key": "loss", "value": 0.1, "step": epoch - 1, "timestamp": at_ms}],
            "params": [{"key": "epochs", "value": str(epochs)}],
        },
    }


def test_the_time_left_comes_from_the_pace_of_the_groups_epochs_between_two_reads():
    """Two reads of one group give a pace (here 2 s an epoch) and the time left at it; a new group (a
    restart) starts its pace again, and the first read of a group has none."""
    runs = iter(
        [epoch_run(10, 100_000), epoch_run(20, 120_000), epoch_run(5, 500_000), epoch_run(6, 503_000)]
    )
    with served(FakeApiServer(answer=_one_run_per_search(runs))) as fake:
        reader = ProgressReader(OperatorConfig.from_env({"MWMS_TRACKING_URI": fake.url}).tracking_access())
        first = reader.read("uid-1", fake.url, "e", None, 0)
        assert first["progressPercentage"] == 16 and "estimatedRemainingSeconds" not in first
        second = reader.read("uid-1", fake.url, "e", None, 0)
        assert (second["epoch"], second["estimatedRemainingSeconds"]) == (20, 80)  # 40 epochs at 2 s
        restarted = reader.read("uid-1", fake.url, "e", None, 1)
        assert "estimatedRemainingSeconds" not in restarted, "a new group: no pace yet"
        again = reader.read("uid-1", fake.url, "e", None, 1)
        assert again["estimatedRemainingSeconds"] == 54 * 3


def _one_run_per_search(runs: Iterator[dict[str, Any]]) -> Callable[[Seen], tuple[int, Any]]:
    def answer(seen: Seen) -> tuple[int, Any]:
        if seen.route.endswith("/runs/search"):
            return 200, {"runs": [next(runs)]}
        return 200, {"experiment": {"experiment_id": "3"}}

    return answer


def test_the_last_read_of_a_succeeded_job_is_done_and_of_a_failed_one_has_no_time_left():
    found = {**progress_from_run(epoch_run(60, 1000), None), "estimatedRemainingSeconds": 12}
    done = Progress.from_dict(finished(found, "Succeeded"))
    assert (done.epoch, done.epochs, done.percentage, done.remaining_seconds) == (60, 60, 100, 0)
    failed = Progress.from_dict(finished({**found, "epoch": 30}, "Failed"))
    assert (failed.epoch, failed.remaining_seconds) == (30, None)
