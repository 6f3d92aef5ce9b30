"""Hostile TrainJobs against the real API server and the running operator (as its ServiceAccount).

Property: every generated body is either refused by the API server with the offending field named, or
accepted and then handled by the operator (a phase in status; Failed only with a reason and a message) —
while the operator process stays alive, logs no unhandled error, and leaves a bystander job in another
namespace alone. Shell-meaningful strings in env and args reach the worker process byte for byte (there is
no shell between a TrainJob and exec). Examples are derandomized and bounded, so CI runs the same ones.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import kubernetes
import pytest
from hypothesis import HealthCheck, Phase, event, example, given, settings
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException

from mwms_contract.names import GROUP, PLURAL, RESERVED_ENV, VERSION
from mwms_kit.shards import namespace_name
from mwms_kit.trainjobs import trainjob
from mwms_kit.waits import condition, wait_condition

PHASES = {"Pending", "Running", "Restarting", "Succeeded", "Failed", "Suspended"}
HANDLED_TIMEOUT = 45  # seconds for the operator to write a status for an accepted body
SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: each example costs seconds of a real cluster
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Pieces that mean something to a shell. None ends in "$" and none is "$(" + a defined variable, so the
# Kubernetes $(VAR) expansion (which the kubelet implements) leaves them alone.
SHELL_FRAGMENTS = [
    "$(id)", "`id`", "; rm -rf /tmp/x", "&& touch /tmp/pwned", "| cat /etc/passwd", "'", '"', "\\", "$HOME",
    "${PATH}", "$((1+1))", "\n", " ", "*", "?", "~", "#", "<", ">", "!", "%s", "{a,b}", "\t", "$(rm -rf /)",
    "x=1", "--help", "-c", "'; exec sh -c 'id", "\u00e9\u4e2d", "\\$(id)",
]  # fmt: skip
# Names the API server must refuse (the CRD limits names to a DNS label of at most 52 characters).
BAD_NAMES = ["a;b", "$(id)", "a b", "a`id`", "Upper", "-lead", "trail-", "a.b", "x" * 53, "a_b", "ü", "a/b"]


def shell_text() -> st.SearchStrategy[str]:
    plain = st.text(
        alphabet=st.characters(codec="utf-8", exclude_characters="$\x00", exclude_categories=["Cs"]),
        max_size=6,
    )
    return st.lists(st.one_of(st.sampled_from(SHELL_FRAGMENTS), plain), min_size=1, max_size=5).map("".join)


@dataclass(frozen=True)
class Mutation:
    """Set `path` (keys into the body) to `value`; a refusal must name `field`."""

    path: tuple[str | int, ...]
    value: Any
    field: str


def at(path: str, values: st.SearchStrategy[Any], field: str | None = None) -> st.SearchStrategy[Mutation]:
    keys = tuple(int(k) if k.isdigit() else k for k in path.split("."))
    return values.map(lambda v: Mutation(keys, v, field or path))


WRONG_TYPES = st.one_of(
    st.text(max_size=5),
    st.floats(allow_nan=False, allow_infinity=False),  # JSON has no NaN or infinity
    st.booleans(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
HUGE = st.sampled_from([-(2**63), -1, 0, 2**31, 2**53 + 1, 2**63 - 1, 10**30])
TRAINER_CONTAINER = "spec.template.spec.containers.0"

# Values the CRD schema refuses: wrong types, out of range, unknown fields. The refusal must name the field.
REFUSED = st.one_of(
    at("spec.replicas", st.one_of(HUGE, WRONG_TYPES, st.just(None))),
    at("spec.port", st.one_of(HUGE, WRONG_TYPES)),
    at("spec.image", st.one_of(WRONG_TYPES, st.just(""))),
    at("spec.runPolicy.backoffLimit", st.one_of(HUGE, WRONG_TYPES)),
    at("spec.runPolicy.activeDeadlineSeconds", st.one_of(HUGE, WRONG_TYPES)),
    at("spec.runPolicy.startupTimeoutSeconds", st.one_of(HUGE, WRONG_TYPES)),
    at("spec.runPolicy.cleanPodPolicy", shell_text()),
    at("spec.runPolicy.suspend", WRONG_TYPES),
    at("spec.trainer.epochs", st.one_of(HUGE, WRONG_TYPES)),
    at("spec.trainer.dataset", shell_text()),
    at("spec.trainer.learningRate", st.one_of(st.floats(allow_nan=False, allow_infinity=False), WRONG_TYPES)),
    at("spec.trainer.hiddenUnits", st.lists(st.one_of(HUGE, st.text(max_size=2)), min_size=1, max_size=3)),
    at("spec.trainer.globalBatchSize", HUGE),
    at("spec.mlflow.trackingUri", st.one_of(st.just(""), WRONG_TYPES)),
    at("spec.mlflow.experiment", st.sampled_from(["", "x" * 501])),
    at(
        "spec.checkpoint",
        st.sampled_from([{}, {"hostPath": {"path": "/tmp"}, "nfs": {"server": "a", "path": "/"}}]),
    ),
    at("spec.template.metadata.labels", st.dictionaries(st.just("app"), WRONG_TYPES, min_size=1)),
    # Unknown fields: refused by name (the client asks for strict field validation, as kubectl does).
    st.sampled_from(["spec.bogus", "spec.runPolicy.restartEverything", "spec.mlflow.password"]).map(
        lambda p: Mutation(tuple(p.split(".")), "x", p)
    ),
)
# Values the schema lets through: shell-meaningful strings, reserved or odd env names, a pod spec the API
# server may refuse when the operator creates the pods (then the job fails naming spec.template).
ACCEPTED = st.one_of(
    at("spec.replicas", st.integers(1, 2)),
    at("spec.port", st.integers(1024, 65535)),
    at("spec.image", shell_text()),
    at("spec.runPolicy.backoffLimit", st.integers(0, 3)),
    at("spec.runPolicy.ttlSecondsAfterFinished", st.integers(0, 5)),
    at("spec.runPolicy.cleanPodPolicy", st.sampled_from(["All", "None", "Running"])),
    at("spec.runPolicy.suspend", st.booleans()),
    at("spec.trainer.epochs", st.integers(1, 5)),
    at("spec.trainer.dataset", st.sampled_from(["synthetic", "breast_cancer"])),
    at("spec.trainer.hiddenUnits", st.lists(st.integers(1, 8), max_size=3)),
    at("spec.mlflow.trackingUri", shell_text()),
    at("spec.mlflow.experiment", shell_text()),
    at("spec.mlflow.registeredModelName", shell_text()),
    at("spec.checkpoint", st.just({"hostPath": {"path": "/tmp/mwms-hostile"}})),
    at(
        f"{TRAINER_CONTAINER}.env",
        st.lists(
            st.fixed_dictionaries(
                {
                    "name": st.sampled_from(
                        sorted(RESERVED_ENV) + ["PATH", "LD_PRELOAD", "A B", "1X", "HOSTILE_A"]
                    ),
                    "value": shell_text(),
                }
            ),
            min_size=1,
            max_size=3,
        ),
        "spec.template",
    ),
    at(f"{TRAINER_CONTAINER}.args", st.lists(shell_text(), max_size=3), "spec.template"),
    at(f"{TRAINER_CONTAINER}.imagePullPolicy", shell_text(), "spec.template"),
    at(
        f"{TRAINER_CONTAINER}.resources",
        st.sampled_from(
            [{"requests": {"cpu": "1e9"}}, {"limits": {"memory": "-1"}}, {"requests": {"cpu": "$(id)"}}]
        ),
        "spec.template",
    ),
    at(
        "spec.template.spec.nodeSelector",
        st.dictionaries(st.sampled_from(["a", "kubernetes.io/os", "b;c"]), shell_text(), max_size=2),
        "spec.template",
    ),
    at(
        "spec.template.metadata.labels",
        st.dictionaries(
            st.sampled_from(["mwms.dev/job-name", "app", "x"]), shell_text(), min_size=1, max_size=2
        ),
        "spec.template",
    ),
)
# Mostly what gets through: those exercise the operator, not only the schema.
MUTATIONS = st.tuples(st.integers(0, 3), ACCEPTED, REFUSED).map(lambda t: t[2] if t[0] == 0 else t[1])
NAMES = st.tuples(st.integers(0, 9), st.sampled_from(BAD_NAMES)).map(lambda t: t[1] if t[0] == 0 else None)


def standin_job(name: str, standin: dict[str, Any]) -> dict[str, Any]:
    """A 1-worker TrainJob running the stand-in worker (no TensorFlow): accepted bodies finish in seconds."""
    return trainjob(name, 1, container=standin)


def mutate(body: dict[str, Any], mutation: Mutation) -> None:
    node: Any = body
    for key in mutation.path[:-1]:
        node = node[key] if isinstance(key, int) else node.setdefault(key, {})
    node[mutation.path[-1]] = mutation.value


@dataclass
class Hostile:
    api: kubernetes.client.CustomObjectsApi
    core: kubernetes.client.CoreV1Api
    namespace: str
    bystander_ns: str
    bystander_pods: dict[str, str]
    standin: dict[str, Any]  # the stand-in worker's container fields (image, command)
    count: int = 0

    def create(self, body: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
        """(the created object, "") or (None, the API server's message)."""
        try:
            created = self.api.create_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, body, field_validation="Strict", _request_timeout=30
            )
        except ApiException as error:
            assert error.status in (400, 422), f"refused with {error.status}, not as invalid: {error.body}"
            return None, json.loads(error.body).get("message", "")
        return created, ""

    def get(self, name: str) -> dict[str, Any]:
        return self.api.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    def delete(self, name: str) -> None:
        """Delete and wait until it is gone, so a job left failing cannot spill errors into the next check."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                self.api.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
            except ApiException as error:
                if error.status != 404:
                    raise
                return
            time.sleep(0.3)

    def bystander_unchanged(self) -> None:
        pods = self.core.list_namespaced_pod(self.bystander_ns, label_selector="mwms.dev/job-name=bystander")
        assert {p.metadata.name: p.metadata.uid for p in pods.items} == self.bystander_pods
        job = self.api.get_namespaced_custom_object(GROUP, VERSION, self.bystander_ns, PLURAL, "bystander")
        assert job["status"]["phase"] == "Running" and job["status"]["restarts"] == 0, job["status"]


@pytest.fixture(scope="module")
def hostile(cluster, kubectl, operator, make_standin, standin, wait_for) -> Iterator[Hostile]:
    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    namespace, bystander_ns = namespace_name("hostile"), namespace_name("bystander")
    for ns in (namespace, bystander_ns):
        kubectl("create", "namespace", ns)
        wait_for(
            lambda ns=ns: kubectl("get", "sa", "default", "-n", ns, check=False).returncode == 0, timeout=30
        )
    kubectl.apply(make_standin("bystander", 2, env={"STANDIN_SLEEP_SECONDS": "3600"}), "-n", bystander_ns)
    wait_condition(kubectl, bystander_ns, "bystander", "Running", timeout=90)
    core = kubernetes.client.CoreV1Api(client)
    pods = core.list_namespaced_pod(bystander_ns, label_selector="mwms.dev/job-name=bystander").items
    state = Hostile(
        kubernetes.client.CustomObjectsApi(client), core, namespace, bystander_ns,
        {p.metadata.name: p.metadata.uid for p in pods},
        standin,
    )  # fmt: skip
    assert len(state.bystander_pods) == 2
    yield state
    for ns in (namespace, bystander_ns):
        kubectl("delete", "trainjobs", "--all", "-n", ns, "--wait=true", "--timeout=60s", check=False)
        kubectl("delete", "namespace", ns, "--wait=false", check=False)


def assert_operator_healthy(operator, log_from: int) -> None:
    assert operator.process is not None and operator.process.poll() is None, "the operator process died"
    new = operator.log()[log_from:]
    assert "Traceback" not in new, "the operator logged an unhandled error:\n" + new[-4000:]


def wait_handled(hostile: Hostile, name: str) -> dict[str, Any]:
    """The operator wrote a status for this generation; Failed only with a reason and a message."""
    deadline = time.monotonic() + HANDLED_TIMEOUT
    while True:
        job = hostile.get(name)
        status = job.get("status") or {}
        current = status.get("observedGeneration") == job["metadata"]["generation"]
        if status.get("phase") in PHASES and current:
            return job
        assert time.monotonic() < deadline, f"{name} not handled after {HANDLED_TIMEOUT}s: {json.dumps(job)}"
        time.sleep(0.3)


def settle(hostile: Hostile, name: str, seconds: float = 6) -> dict[str, Any]:
    """Until the job finished, or a few more reconciles (1 s apart in these tests) have run on it."""
    deadline = time.monotonic() + seconds
    while True:
        job = hostile.get(name)
        if job["status"].get("phase") in ("Succeeded", "Failed") or time.monotonic() > deadline:
            return job
        time.sleep(0.3)


def check_handled(job: dict[str, Any]) -> None:
    status = job["status"]
    if status["phase"] == "Failed":
        failed = condition(job, "Failed")
        assert failed is not None and failed.true and failed.reason and failed.message, failed
        if failed.reason == "InvalidSpec":
            assert "spec." in failed.message, f"no field named: {failed}"


@contextlib.contextmanager
def submitted(hostile: Hostile, body: dict[str, Any]) -> Iterator[tuple[dict[str, Any] | None, str]]:
    """Create the TrainJob; delete it afterwards whatever happened."""
    created, message = hostile.create(body)
    try:
        yield created, message
    finally:
        if created is not None:
            hostile.delete(created["metadata"]["name"])


@SETTINGS
@given(
    # Mostly valid names, so most bodies get as far as the operator.
    name=NAMES,  # None: a valid one
    mutations=st.lists(MUTATIONS, max_size=3),
)
def test_every_body_is_refused_with_its_field_named_or_handled(operator, hostile, name, mutations):
    hostile.count += 1
    job_name = f"h{hostile.count}"
    body = standin_job(name if name is not None else job_name, hostile.standin)
    for mutation in mutations:
        mutate(body, mutation)
    log_from = len(operator.log())

    with submitted(hostile, body) as (created, message):
        if created is None:
            event("refused by the API server")
            fields = [m.field for m in mutations] + (["metadata.name"] if name is not None else [])
            assert fields, f"a body without mutations was refused: {message}"
            assert any(field in message for field in fields), f"none of {fields} named in: {message}"
        else:
            assert name is None, f"the name {name!r} was accepted"
            job = wait_handled(hostile, job_name)
            job = settle(hostile, job_name)
            event(f"accepted, then {job['status']['phase']}")
            check_handled(job)
    assert_operator_healthy(operator, log_from)
    hostile.bystander_unchanged()


# A template whose pod spec has the wrong shape where the CRD cannot type it (spec.template.spec is passed
# through to the API server): the operator must fail the job naming the field, not crash its reconcile.
MALFORMED_TEMPLATES = {
    "port-not-an-object": {"containers": [{"name": "trainer", "ports": ["2222"]}]},
    "volumes-not-a-list": {"containers": [{"name": "trainer"}], "volumes": 5},
    "volume-mounts-not-a-list": {"containers": [{"name": "trainer", "volumeMounts": 5}]},
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(MALFORMED_TEMPLATES))
def test_a_malformed_pod_template_fails_the_job_not_the_reconcile(operator, hostile, case):
    name = f"malformed-{case}"[:52].rstrip("-")
    body = standin_job(name, hostile.standin)
    body["spec"]["template"]["spec"] = MALFORMED_TEMPLATES[case]
    body["spec"]["checkpoint"] = {"hostPath": {"path": "/tmp"}}  # the operator appends a volume and a mount
    log_from = len(operator.log())
    with submitted(hostile, body) as (created, message):
        assert created is not None, message
        job = wait_handled(hostile, name)
        assert job["status"]["phase"] == "Failed", job["status"]
        check_handled(job)
        assert "spec.template" in condition(job, "Failed").message, job["status"]
    assert_operator_healthy(operator, log_from)
    hostile.bystander_unchanged()


# What the CRD does type in spec.template.spec (container and env names, for its reserved-env rule): the API
# server refuses it, naming the field, and nothing reaches the operator.
SCHEMA_REFUSED_TEMPLATES = {
    "env-name-not-a-string": (
        {"containers": [{"name": "trainer", "env": [{"name": ["TF_CONFIG"]}]}]},
        "spec.template.spec.containers[0].env[0].name",
    ),
    "container-name-not-a-string": ({"containers": [{"name": 7}]}, "spec.template.spec.containers[0].name"),
}


@pytest.mark.parametrize("case", sorted(SCHEMA_REFUSED_TEMPLATES))
def test_a_pod_template_the_schema_types_is_refused_naming_the_field(operator, hostile, case):
    template, field = SCHEMA_REFUSED_TEMPLATES[case]
    body = standin_job(f"refused-{case}"[:52].rstrip("-"), hostile.standin)
    body["spec"]["template"]["spec"] = template
    with submitted(hostile, body) as (created, message):
        assert created is None, f"accepted: {created}"
        assert field in message, message
    hostile.bystander_unchanged()


# Writes its env (HOSTILE_*) and argv to the termination message as JSON, then exits 0: what the process
# got, byte for byte. One worker, so it is the chief and its exit 0 is the job's success.
ECHO = (
    "import json, os, sys\n"
    "env = {k: v for k, v in os.environ.items() if k.startswith('HOSTILE_')}\n"
    "seen = {'env': env, 'argv': sys.argv[1:]}\n"
    "open(os.environ.get('MWMS_TERMINATION_LOG', '/dev/termination-log'), 'w').write(json.dumps(seen))\n"
)


@settings(SETTINGS, max_examples=6)
@given(values=st.lists(shell_text(), min_size=1, max_size=4), args=st.lists(shell_text(), max_size=4))
@example(values=["$(id)", "`id`; rm -rf / && echo pwned | sh", "'\"\\"], args=["$(id)", "a;b", "*", "$HOME"])
def test_shell_strings_reach_the_worker_verbatim(operator, hostile, values, args):
    hostile.count += 1
    name = f"echo{hostile.count}"
    env = {f"HOSTILE_{i}": value for i, value in enumerate(values)}
    body = standin_job(name, hostile.standin)
    container = body["spec"]["template"]["spec"]["containers"][0]
    container.update(
        command=["python", "-c", ECHO],
        args=args,
        env=[{"name": k, "value": v} for k, v in env.items()],
    )
    body["spec"]["runPolicy"] = {"cleanPodPolicy": "None"}
    with submitted(hostile, body) as (created, message):
        assert created is not None, message
        deadline = time.monotonic() + 60
        while (phase := (hostile.get(name).get("status") or {}).get("phase")) != "Succeeded":
            assert phase != "Failed" and time.monotonic() < deadline, hostile.get(name)
            time.sleep(0.3)
        pod = hostile.core.read_namespaced_pod(f"{name}-worker-0", hostile.namespace)
        seen = json.loads(pod.status.container_statuses[0].state.terminated.message)
        assert seen == {"env": env, "argv": args}


@pytest.mark.parametrize(
    "field", ["activeDeadlineSeconds", "startupTimeoutSeconds", "ttlSecondsAfterFinished"]
)
def test_huge_durations_are_refused_or_run_normally(operator, hostile, field):
    """The CRD bounds these below only; 2**62 seconds must not overflow the operator's date arithmetic
    (it would fail every reconcile of the job, which then never runs or finishes)."""
    name = f"huge-{field.lower()}"
    body = standin_job(name, hostile.standin)
    body["spec"]["runPolicy"] = {field: 2**62}
    log_from = len(operator.log())
    with submitted(hostile, body) as (created, message):
        if created is None:
            assert f"spec.runPolicy.{field}" in message, message
        else:
            deadline = time.monotonic() + HANDLED_TIMEOUT
            while (hostile.get(name).get("status") or {}).get("phase") != "Succeeded":
                assert time.monotonic() < deadline, f"{name} did not succeed: {hostile.get(name)}"
                time.sleep(0.3)
            time.sleep(3)  # a few more reconciles of the finished job (the TTL check)
    assert_operator_healthy(operator, log_from)
