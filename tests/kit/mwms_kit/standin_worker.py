"""A stand-in for the trainer in operator tests: no TensorFlow, same contract.

It checks its TF_CONFIG and the operator's other variables, reaches every peer by name over TCP (and waits
until every peer reached it), marks itself joined as the trainer does (its pod becomes Ready), then exits
like the trainer would: the chief writes the run JSON to the termination-message file, the others
{"worker": i, "status": "ok"}.

Behaviour for tests, from the environment (set through spec.template):
  STANDIN_FAIL_INDEX       only this worker fails (default: none)
  STANDIN_EXIT_CODE        its exit code (default 1)
  STANDIN_FAIL_ONCE_FILE   fail only if this file does not exist yet (it is created first): "fail once"
  STANDIN_FAIL_IN_RESTARTS fail only in these (re)starts of the group (MWMS_RESTART_COUNT), e.g. "0,1"
  STANDIN_HANG_INDEX       only this worker never begins its rendezvous (stuck before it, e.g. loading data)
  STANDIN_SLEEP_SECONDS    keep running this long after the peer check (long jobs: deadline, suspend...)
  STANDIN_LINGER_SECONDS   workers other than the chief keep running this much longer (a slow worker, a
                           sidecar): the chief succeeds first and cleanPodPolicy deletes them while they run
  STANDIN_SLEEP_IN_RESTART sleep only in this (re)start of the group (MWMS_RESTART_COUNT), e.g. "0"
  STANDIN_PEER_TIMEOUT     seconds to reach every peer (default 180: a loaded CI box starts pods slowly)
  STANDIN_MLFLOW           "1": the chief writes a real MLflow run via the REST API at MLFLOW_TRACKING_URI
                           (tagged with the job's uid, a loss metric per epoch of MWMS_TRAINER_CONFIG.epochs;
                           a restarted chief continues the run of its job, as the trainer's does); "first":
                           the same, before its sleep (the run is there while the group runs, as the
                           trainer's chief opens it at its start)
  STANDIN_EPOCH_SECONDS    pause after each such epoch (default 1)
  STANDIN_WAIT_FILE        then wait until this file exists (a test creates it with `kubectl exec`): a job
                           that ends when the test lets it, not after a guessed time
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

from mwms_contract import termination
from mwms_contract.names import MLFLOW_TAG_JOB_UID

try:
    from mwms_trainer.rendezvous import mark_joined, note_rendezvous
except ImportError:  # a previous version's trainer image (tests/e2e/test_upgrade.py) has them in startup.py
    from mwms_trainer.startup import mark_joined, note_rendezvous  # type: ignore[no-redef]

REQUIRED = (
    "MWMS_JOB_NAME",
    "MWMS_JOB_NAMESPACE",
    "MWMS_JOB_UID",
    "MWMS_RESTART_COUNT",
    "MWMS_TRAINER_CONFIG",
    "MLFLOW_TRACKING_URI",
    "MLFLOW_EXPERIMENT_NAME",
)


def log(message: str) -> None:
    print(f"standin: {message}", flush=True)


def finish(code: int, message: str) -> None:
    path = os.environ.get("MWMS_TERMINATION_LOG", "/dev/termination-log")
    try:
        with open(path, "w") as out:
            out.write(termination.encode(message))  # the trainer's own writer
    except OSError as error:
        log(f"cannot write the termination message to {path}: {error}")
    log(f"exit {code}: {message}")
    sys.exit(code)


def check_environment() -> tuple[list[str], int]:
    missing = [name for name in REQUIRED if not os.environ.get(name)]
    if missing:
        finish(1, f"missing environment: {', '.join(missing)}")
    config = json.loads(os.environ["TF_CONFIG"])
    hosts, task = config["cluster"]["worker"], config["task"]
    index = task["index"]
    if set(config["cluster"]) != {"worker"} or task["type"] != "worker" or not 0 <= index < len(hosts):
        finish(1, f"TF_CONFIG is not an MWMS worker config: {config}")
    job, namespace = os.environ["MWMS_JOB_NAME"], os.environ["MWMS_JOB_NAMESPACE"]
    expected = f"{job}-worker-{index}.{job}.{namespace}.svc"
    if not hosts[index].startswith(expected + ":") and not hosts[index].startswith(expected + "."):
        finish(1, f"TF_CONFIG names {hosts[index]} for worker {index}, expected {expected}")
    if socket.gethostname() != f"{job}-worker-{index}":
        finish(1, f"hostname {socket.gethostname()} is not {job}-worker-{index}")
    json.loads(os.environ["MWMS_TRAINER_CONFIG"])
    return hosts, index


def reach_peers(hosts: list[str], index: int, timeout: float) -> None:
    """Every worker connects to every other by name and waits until every other connected to it."""
    port = int(hosts[index].rsplit(":", 1)[1])
    heard: set[int] = set()
    server = socket.create_server(("0.0.0.0", port), reuse_port=True)
    server.settimeout(0.5)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                data = conn.recv(16).decode().strip()
                if data.isdigit():
                    heard.add(int(data))

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    for peer, address in enumerate(hosts):
        if peer == index:
            continue
        host, peer_port = address.rsplit(":", 1)
        while True:
            try:
                with socket.create_connection((host, int(peer_port)), timeout=2) as conn:
                    conn.sendall(f"{index}\n".encode())
                break
            except OSError as error:
                if time.monotonic() > deadline:
                    finish(75, f"worker {index} could not reach worker {peer} at {address}: {error}")
                note_rendezvous(f"waiting for peers: worker {peer} ({address}): {error}")
                time.sleep(0.2)
    others = set(range(len(hosts))) - {index}
    while heard != others:
        if time.monotonic() > deadline:
            finish(75, f"worker {index} heard only from {sorted(heard)} of {sorted(others)}")
        time.sleep(0.1)
    stop.set()
    thread.join()
    server.close()
    log(f"worker {index} reached all {len(hosts)} workers by name")
    mark_joined()


def mlflow_headers() -> dict[str, str]:
    """MLflow's client sends MLFLOW_TRACKING_TOKEN as a bearer token; so does the stand-in."""
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else {}


# A test's MLflow server on a loaded machine can stall for many seconds, and the trainer's own MLflow client
# retries for minutes: a stall must not end the stand-in's chief (exit 75 restarts the group).
MLFLOW_TIMEOUT_SECONDS = 90


def mlflow_call(base: str, method: str, payload: dict) -> dict:
    request = urllib.request.Request(
        f"{base}/api/2.0/mlflow/{method}",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", **mlflow_headers()},
    )
    with urllib.request.urlopen(request, timeout=MLFLOW_TIMEOUT_SECONDS) as response:
        return json.loads(response.read() or b"{}")


def mlflow_run() -> tuple[str, str]:
    """One run, as the trainer's chief would write it: tagged with the job uid, a metric per epoch."""
    base = os.environ["MLFLOW_TRACKING_URI"].rstrip("/")
    name = os.environ["MLFLOW_EXPERIMENT_NAME"]
    try:
        query = urllib.parse.urlencode({"experiment_name": name})
        lookup = urllib.request.Request(
            f"{base}/api/2.0/mlflow/experiments/get-by-name?{query}", headers=mlflow_headers()
        )
        with urllib.request.urlopen(lookup, timeout=MLFLOW_TIMEOUT_SECONDS) as r:
            experiment_id = json.loads(r.read())["experiment"]["experiment_id"]
    except urllib.error.HTTPError as error:
        if error.code != 404:
            raise
        experiment_id = mlflow_call(base, "experiments/create", {"name": name})["experiment_id"]
    epochs = int(json.loads(os.environ["MWMS_TRAINER_CONFIG"]).get("epochs", 3))
    job_uid = os.environ["MWMS_JOB_UID"]
    # A restarted group's chief continues the job's one run, as the trainer's does (found by its tag).
    found = mlflow_call(
        base,
        "runs/search",
        {"experiment_ids": [experiment_id], "filter": f"tags.`{MLFLOW_TAG_JOB_UID}` = '{job_uid}'"},
    ).get("runs", [])
    run = (
        found[0]["info"]["run_id"]
        if found
        else mlflow_call(
            base,
            "runs/create",
            {
                "experiment_id": experiment_id,
                "start_time": int(time.time() * 1000),
                "run_name": os.environ["MWMS_JOB_NAME"],
                "tags": [{"key": MLFLOW_TAG_JOB_UID, "value": job_uid}],
            },
        )["run"]["info"]["run_id"]
    )
    mlflow_call(base, "runs/log-parameter", {"run_id": run, "key": "epochs", "value": str(epochs)})
    for epoch in range(epochs):
        mlflow_call(
            base,
            "runs/log-metric",
            {
                "run_id": run,
                "key": "loss",
                "value": 1 / (epoch + 1),
                "timestamp": int(time.time() * 1000),
                "step": epoch,
            },
        )
        log(f"epoch {epoch + 1}/{epochs} logged")
        time.sleep(float(os.environ.get("STANDIN_EPOCH_SECONDS", "1")))
    mlflow_call(
        base, "runs/update", {"run_id": run, "status": "FINISHED", "end_time": int(time.time() * 1000)}
    )
    return run, experiment_id


def chief_run() -> tuple[str, str]:
    """The chief's run (STANDIN_MLFLOW) or a made-up run id."""
    if os.environ.get("STANDIN_MLFLOW") not in ("1", "first"):
        return uuid.uuid4().hex, "0"
    try:
        return mlflow_run()
    except OSError as error:
        finish(75, f"MLflow unavailable: {error}")
        raise


def main() -> None:
    hosts, index = check_environment()
    log(f"worker {index} of {len(hosts)}, restart {os.environ['MWMS_RESTART_COUNT']}")
    # Fail before the peer check: the others then wait for this worker, as MWMS workers would.
    restarts = os.environ.get("STANDIN_FAIL_IN_RESTARTS")
    in_restart = restarts is None or os.environ["MWMS_RESTART_COUNT"] in restarts.split(",")
    if os.environ.get("STANDIN_FAIL_INDEX") == str(index) and in_restart:
        once = os.environ.get("STANDIN_FAIL_ONCE_FILE")
        if not once or not os.path.exists(once):
            if once:
                with open(once, "w") as marker:
                    marker.write("failed once\n")
            finish(int(os.environ.get("STANDIN_EXIT_CODE", "1")), f"standin worker {index} told to fail")
    if os.environ.get("STANDIN_HANG_INDEX") == str(index):
        log(f"worker {index} told to hang before its rendezvous")
        threading.Event().wait()
    reach_peers(hosts, index, float(os.environ.get("STANDIN_PEER_TIMEOUT", "180")))
    opened = chief_run() if index == 0 and os.environ.get("STANDIN_MLFLOW") == "first" else None
    sleep_in = os.environ.get("STANDIN_SLEEP_IN_RESTART")
    if sleep_in is None or sleep_in == os.environ["MWMS_RESTART_COUNT"]:
        time.sleep(float(os.environ.get("STANDIN_SLEEP_SECONDS", "0")))
    wait_file = os.environ.get("STANDIN_WAIT_FILE")
    if wait_file:
        log(f"worker {index} waits for {wait_file}")
        while not os.path.exists(wait_file):
            time.sleep(0.5)
    if index != 0:
        time.sleep(float(os.environ.get("STANDIN_LINGER_SECONDS", "0")))
    if index == 0:
        run_id, experiment_id = opened or chief_run()
        log(f"run id {run_id}")
        message = {
            "runId": run_id,
            "experimentId": experiment_id,
            "modelUri": f"runs:/{run_id}/model",
            "metrics": {"accuracy": 1.0},
        }
        finish(0, json.dumps(message))
    finish(0, json.dumps({"worker": index, "status": "ok"}))


if __name__ == "__main__":
    main()
