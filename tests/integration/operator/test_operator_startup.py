"""The startup timeout on the real control plane and the real node (whose kubelet runs the workers' readiness
probe and posts `Unhealthy` events): workers that run but do not all join their group end the job,
naming each with the last reason its probe gave. tests/node/test_node_startup.py does the same with the real
trainer on a real kubelet."""

from __future__ import annotations

from mwms_kit.waits import condition, wait_condition


def test_workers_that_run_but_do_not_all_join_time_out_naming_each_with_its_last_reason(
    operator, make_standin, kubectl, namespace
):
    # Worker 1 hangs before its rendezvous; worker 0 runs and waits for it. 30 s: long enough, on a loaded
    # machine, that the later of the two has started and failed a readiness probe, whose output is named.
    job = make_standin("apart", 2, env={"STANDIN_HANG_INDEX": "1"}, runPolicy={"startupTimeoutSeconds": 30})
    kubectl.apply(job, "-n", namespace)
    done = wait_condition(kubectl, namespace, "apart", "Failed")
    failed = condition(done, "Failed")
    assert failed.reason == "StartupTimeout", failed
    message = failed.message
    assert "not every worker joined the group within 30s" in message, message
    said = "Unhealthy: Readiness probe failed:"
    waiting = f"worker 0 (apart-worker-0): {said} waiting for peers: worker 1 (apart-worker-1."
    hung = f"worker 1 (apart-worker-1): {said} the trainer has not begun its rendezvous yet"
    assert waiting in message and hung in message, message


def test_a_worker_whose_secret_volume_does_not_exist_ends_the_job_naming_the_mount_and_the_secret(
    operator, make_standin, kubectl, namespace
):
    """No worker ever starts: the kubelet cannot mount the Secret, and the pod sits in ContainerCreating. The
    container-error grace ends the job with the kubelet's FailedMount event, not a bare ContainerCreating."""
    job = make_standin(
        "nosecret",
        1,
        runPolicy={"containerErrorGraceSeconds": 10},
        container={"volumeMounts": [{"name": "creds", "mountPath": "/creds"}]},
        template={"spec": {"volumes": [{"name": "creds", "secret": {"secretName": "no-such-secret"}}]}},
    )
    kubectl.apply(job, "-n", namespace)
    done = wait_condition(kubectl, namespace, "nosecret", "Failed")
    failed = condition(done, "Failed")
    assert failed.reason == "ContainerError", failed
    message = failed.message
    assert message.startswith("worker nosecret-worker-0 has not started 10s after it was scheduled"), message
    assert "FailedMount: " in message and 'secret "no-such-secret" not found' in message, message
