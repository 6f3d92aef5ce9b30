import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mwms_operator.progress import fetch_progress, progress_from_run

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


def test_progress_from_run_counts_epochs_from_steps():
    assert progress_from_run(RUN, None) == {
        "runId": "abc",
        "metrics": {"loss": 0.3, "accuracy": 0.9},
        "epoch": 5,
        "epochs": 20,
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


@pytest.fixture
def tracking():
    """A tiny HTTP server speaking the two MLflow REST calls the operator makes."""
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def reply(self, body):
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802
            seen.append(self.path)
            self.reply({"experiment": {"experiment_id": "3"}})

        def do_POST(self):  # noqa: N802
            seen.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.reply({"runs": [RUN]})

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", seen
    server.shutdown()


def test_fetch_progress_searches_the_run_by_job_uid_tag(tracking):
    uri, seen = tracking
    assert fetch_progress(uri, "my exp", "uid-1", None)["epoch"] == 5
    assert seen[0] == "/api/2.0/mlflow/experiments/get-by-name?experiment_name=my+exp"
    assert seen[1]["experiment_ids"] == ["3"]
    assert seen[1]["filter"] == "tags.`mwms.dev/job-uid` = 'uid-1'"


def test_an_unreachable_tracking_server_gives_no_progress():
    assert fetch_progress("http://127.0.0.1:9", "e", "u", None, timeout=0.5) is None


@pytest.mark.parametrize(
    "reply",
    [{"runs": "not a list"}, {"runs": [{"data": {"metrics": [{"key": "loss", "step": "x", "value": 1}]}}]},
     {"runs": [None]}, {"runs": [{"data": {"metrics": "nope"}}]}],
)  # fmt: skip
def test_a_tracking_server_answering_nonsense_gives_no_progress(reply):
    class Handler(BaseHTTPRequestHandler):
        def respond(self, body):
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802
            self.respond({"experiment": {"experiment_id": "3"}})

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            self.respond(reply)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert fetch_progress(f"http://127.0.0.1:{server.server_port}", "e", "u", None) is None
    finally:
        server.shutdown()


def test_only_http_tracking_uris_are_polled(tmp_path):
    # Lay out files where urllib's file: handler would find a perfectly good answer.
    api = tmp_path / "api" / "2.0" / "mlflow"
    (api / "experiments").mkdir(parents=True)
    (api / "experiments" / "get-by-name").write_text(json.dumps({"experiment": {"experiment_id": "1"}}))
    (api / "runs").mkdir()
    (api / "runs" / "search").write_text(json.dumps({"runs": [RUN]}))
    assert fetch_progress(f"file://{tmp_path}", "e", "u", None) is None
    assert fetch_progress("sqlite:///mlflow.db", "e", "u", None) is None
