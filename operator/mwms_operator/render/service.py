"""Pure: a job's headless Service, as a plain dict: it gives each worker pod the DNS name TF_CONFIG lists."""

from __future__ import annotations

from typing import Any

from mwms_contract import names
from mwms_contract.trainjob import TrainJobSpec
from mwms_operator.render.labels import job_labels, owner_reference


def service_name(job_name: str) -> str:
    return job_name


def build_service(spec: TrainJobSpec, *, job_name: str, namespace: str, uid: str) -> dict[str, Any]:
    """Headless: it exists for DNS only; publishNotReadyAddresses so peers resolve before they are Ready."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(job_name),
            "namespace": namespace,
            "labels": job_labels(job_name),
            "ownerReferences": [owner_reference(job_name, uid)],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {names.LABEL_JOB_NAME: job_name},
            "ports": [
                {"name": names.PORT_NAME, "port": spec.port, "targetPort": spec.port, "protocol": "TCP"}
            ],
        },
    }
