"""What the node agent execs for a pod: argv, env, mounts, user."""

import pytest

from mwms_dev.nodeagent_spec import (
    ConfigNotReady,
    PodSpecError,
    base_env,
    container_argv,
    container_env,
    container_mounts,
    expand,
    image_repository,
    invalid_image_name,
    projected_items,
    run_as,
    termination_message_path,
)

PY = "/venv/bin/python"


def pod(container=None, **spec):
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"app": "a"}, "annotations": {}},
        "spec": {"nodeName": "node-1", "serviceAccountName": "sa", "containers": [container or {}], **spec},
    }


def no_objects(kind, namespace, name):
    return None


@pytest.mark.parametrize(
    ("image", "repo"),
    [
        ("ghcr.io/mwms-dev/mwms-trainer:0.1.0", "ghcr.io/mwms-dev/mwms-trainer"),
        ("localhost:5000/mwms-operator", "localhost:5000/mwms-operator"),
        ("mwms-trainer@sha256:abc", "mwms-trainer"),
        ("reg:5000/a/b:1@sha256:abc", "reg:5000/a/b"),
    ],
)
def test_image_repository(image, repo):
    assert image_repository(image) == repo


def test_our_images_without_command_map_to_the_venv_entrypoint():
    assert container_argv({"image": "ghcr.io/mwms-dev/mwms-trainer:0.1.0"}, {}, PY, "c") == [
        PY,
        "-m",
        "mwms_trainer",
    ]
    argv = container_argv({"image": "x/mwms-operator:1", "args": ["--verbose"]}, {}, PY, "c")
    assert argv == [PY, "-m", "mwms_operator", "--verbose"]  # args replace CMD, not ENTRYPOINT


def test_other_images_without_command_fail_with_a_clear_reason():
    with pytest.raises(PodSpecError) as err:
        container_argv({"image": "busybox:1.36"}, {}, PY, "spec.containers[0]")
    assert err.value.reason == "ImageNotRunnableLocally"
    assert err.value.field == "spec.containers[0].command"
    assert "busybox:1.36" in str(err.value)


def test_command_and_args_expand_env_references():
    argv = container_argv(
        {"command": ["echo", "$(A)"], "args": ["$(B)", "$$(A)", "$(MISSING)"]}, {"A": "1", "B": "2"}, PY, "c"
    )
    assert argv == ["echo", "1", "2", "$(A)", "$(MISSING)"]


def test_expand():
    assert expand("$(A)-$(A)$$", {"A": "x"}) == "x-x$"


def test_env_in_order_with_field_refs_and_expansion():
    container = {
        "env": [
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "ADDR", "value": "$(IP):2222"},
            {"name": "PATH", "value": "/opt/bin:$(PATH)"},
        ]
    }
    env = container_env(
        pod(container),
        container,
        base={"PATH": "/venv/bin:/usr/bin"},
        pod_ip="10.200.0.5",
        host_ip="10.200.0.1",
        lookup=no_objects,
        field="c",
    )
    assert env["NAME"] == "p" and env["NS"] == "ns" and env["IP"] == "10.200.0.5"
    assert env["NODE"] == "node-1" and env["UID"] == "u-1" and env["APP"] == "a"
    assert env["ADDR"] == "10.200.0.5:2222"
    assert env["PATH"] == "/opt/bin:/venv/bin:/usr/bin"


def test_config_map_and_secret_refs():
    objects = {("configmap", "cm"): {"k": "v"}, ("secret", "s"): {"pw": "hunter2"}}

    def lookup(kind, namespace, name):
        assert namespace == "ns"
        return objects.get((kind, name))

    container = {
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
            {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}},
            {"name": "C", "valueFrom": {"secretKeyRef": {"name": "s", "key": "nope", "optional": True}}},
        ],
    }
    env = container_env(pod(container), container, base={}, pod_ip="", host_ip="", lookup=lookup, field="c")
    assert env == {"CM_k": "v", "A": "v", "B": "hunter2"}
    missing = {"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k"}}}]}
    with pytest.raises(ConfigNotReady, match="gone"):
        container_env(pod(missing), missing, base={}, pod_ip="", host_ip="", lookup=lookup, field="c")


def test_unsupported_env_source_names_the_field():
    container = {"env": [{"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]}
    with pytest.raises(PodSpecError) as err:
        container_env(
            pod(container),
            container,
            base={},
            pod_ip="",
            host_ip="",
            lookup=no_objects,
            field="spec.containers[0]",
        )
    assert err.value.field == "spec.containers[0].env[0].valueFrom"


def test_base_env_points_the_in_cluster_client_at_the_api_server():
    env = base_env(pod(), venv_bin="/venv/bin", api_host="10.200.0.1", api_port=6443, run_as_root=True)
    assert env["KUBERNETES_SERVICE_HOST"] == "10.200.0.1" and env["KUBERNETES_SERVICE_PORT"] == "6443"
    assert env["PATH"].startswith("/venv/bin:")
    assert env["HOSTNAME"] == "p"


def test_volume_mounts_map_to_host_paths():
    volumes = [
        {"name": "scratch", "emptyDir": {}},
        {"name": "data", "hostPath": {"path": "/srv/data/"}},
        {"name": "ckpt", "persistentVolumeClaim": {"claimName": "shared"}},
        {"name": "kube-api-access-x", "projected": {"sources": []}},
    ]
    container = {
        "volumeMounts": [
            {"name": "ckpt", "mountPath": "/mwms/checkpoint"},
            {"name": "scratch", "mountPath": "/tmp/s"},
            {"name": "data", "mountPath": "/data", "readOnly": True, "subPath": "train"},
            {"name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
        ]
    }
    mounts = container_mounts(
        pod(container, volumes=volumes), container, pod_dir="/s/p", state_dir="/s", field="c"
    )
    by_target = {m.target: m for m in mounts}
    assert by_target["/mwms/checkpoint"].source == "/s/pvc/ns/shared"
    assert by_target["/tmp/s"].source == "/s/p/volumes/scratch"
    assert by_target["/data"].source == "/srv/data/train" and by_target["/data"].read_only
    assert (
        by_target["/var/run/secrets/kubernetes.io/serviceaccount"].source == "/s/p/volumes/kube-api-access-x"
    )
    assert [m.target.count("/") for m in mounts] == sorted(m.target.count("/") for m in mounts)


@pytest.mark.parametrize(
    ("volumes", "mounts", "field"),
    [
        ([{"name": "v", "nfs": {"server": "x"}}], [], "spec.volumes[0]"),
        ([{"name": "v", "emptyDir": {}}], [{"name": "w", "mountPath": "/x"}], "c.volumeMounts[0].name"),
        ([{"name": "v", "emptyDir": {}}], [{"name": "v", "mountPath": "rel"}], "c.volumeMounts[0].mountPath"),
        (
            [{"name": "v", "emptyDir": {}}],
            [{"name": "v", "mountPath": "/x", "subPath": "../etc"}],
            "c.volumeMounts[0].subPath",
        ),
    ],
)
def test_bad_volumes_name_the_field(volumes, mounts, field):
    container = {"volumeMounts": mounts}
    with pytest.raises(PodSpecError) as err:
        container_mounts(pod(container, volumes=volumes), container, pod_dir="/p", state_dir="/s", field="c")
    assert err.value.field == field


def test_projected_service_account_volume():
    volume = {
        "name": "kube-api-access-abc",
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {
                    "downwardAPI": {
                        "items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]
                    }
                },
            ]
        },
    }
    tokens = []

    def token(audience, seconds):
        tokens.append((audience, seconds))
        return "TOKEN"

    files = projected_items(
        volume,
        pod=pod(),
        pod_ip="",
        host_ip="",
        token=token,
        field="v",
        lookup=lambda kind, ns, name: (
            {"ca.crt": "PEM"} if (kind, name) == ("configmap", "kube-root-ca.crt") else None
        ),
    )
    assert files == {"token": "TOKEN", "ca.crt": "PEM", "namespace": "ns"}
    assert tokens == [(None, 3607)]


def test_run_as_container_overrides_pod():
    p = pod({}, securityContext={"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000})
    assert run_as(p, {"securityContext": {"runAsUser": 1001}}) == (1001, 1000, [2000])
    assert run_as(pod(), {}) == (None, None, [])


def test_termination_message_path_default_and_custom():
    assert termination_message_path({}, "c") == "/dev/termination-log"
    assert termination_message_path({"terminationMessagePath": "/tmp/msg"}, "c") == "/tmp/msg"


@pytest.mark.parametrize(
    "image",
    ["busybox", "ghcr.io/mwms-dev/mwms-trainer:0.1.0", "localhost:5000/a/b:v1", "x/y@sha256:" + "a" * 64],
)
def test_image_references_the_kubelet_parses(image):
    assert invalid_image_name(image) is None


@pytest.mark.parametrize("image", ["ghcr.io/MWMS/Trainer:1", "a b", "name:", "-lead"])
def test_image_references_the_kubelet_calls_invalid(image):
    assert "invalid reference format" in invalid_image_name(image)
