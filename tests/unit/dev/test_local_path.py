"""The real node's volume provisioner objects (mwms_dev.local_path): kind's default class, our images."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from mwms_dev import local_path


def objects_by_kind() -> dict[str, dict]:
    objects = local_path.local_path_objects(
        "localhost/mwms/local-path-provisioner:v1",
        "localhost/mwms/busybox:debian",
        Path("/state/nodes/n1/lp"),
    )
    return {body["kind"]: body for _, body in objects}


def test_the_default_storage_class_is_standard_and_binds_where_the_pod_lands():
    storage_class = objects_by_kind()["StorageClass"]
    assert storage_class["metadata"]["name"] == "standard"
    assert storage_class["metadata"]["annotations"] == {"storageclass.kubernetes.io/is-default-class": "true"}
    assert storage_class["provisioner"] == "rancher.io/local-path"
    assert storage_class["volumeBindingMode"] == "WaitForFirstConsumer"


def test_volumes_live_under_the_node_dir_and_the_helper_runs_our_busybox_as_root():
    data = objects_by_kind()["ConfigMap"]["data"]
    (node_paths,) = json.loads(data["config.json"])["nodePathMap"]
    assert node_paths["paths"] == ["/state/nodes/n1/lp"]
    (helper,) = yaml.safe_load(data["helperPod.yaml"])["spec"]["containers"]
    assert helper["image"] == "localhost/mwms/busybox:debian"
    assert helper["securityContext"]["runAsUser"] == 0
    (provisioner,) = objects_by_kind()["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert provisioner["image"] == "localhost/mwms/local-path-provisioner:v1"
