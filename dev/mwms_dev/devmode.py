"""Development mode: the operator and trainer containers run this checkout's code, not their image's copy.

The checkout is mounted read-only (hostPath) at DEV_MOUNT and its package roots go first on PYTHONPATH, which
Python searches before the image's site-packages: a code change takes effect at the next container start,
with no image rebuild. hostPath needs a namespace whose Pod Security level is `privileged`: for developers
on the local real node only. The images tier keeps testing the built images as they are.

    python -m mwms_dev.devmode manifests/samples/minimal.yaml | kubectl apply -f -
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from mwms_contract import names
from mwms_dev.builds import built
from mwms_dev.chain import REPO, Chain
from mwms_dev.node_addons import real_node_chart_values

DEV_MOUNT = "/src/mwms"
VOLUME = "mwms-dev-src"
PACKAGE_ROOTS = ("contract", "operator", "trainer", "client")  # each holds its importable package
PRIVILEGED = "pod-security.kubernetes.io/enforce=privileged"
NOTE = (
    "dev mode: the operator and the trainer run this checkout's code ({checkout}, mounted read-only at "
    f"{DEV_MOUNT}; hostPath, so a privileged namespace); after a change, `kubectl rollout restart deployment "
    "-n {namespace} -l app.kubernetes.io/component=operator` restarts the operator; new workers pick it up. "
    "The images tier still tests the built images."
)


def dev_pythonpath() -> str:
    return ":".join(f"{DEV_MOUNT}/{root}" for root in PACKAGE_ROOTS)


def dev_mode_values(checkout: Path = REPO) -> list[str]:
    """Helm `--set` values: the chart's operator container mounts the checkout and imports from it."""
    return [
        f"extraVolumes[0].name={VOLUME}",
        f"extraVolumes[0].hostPath.path={checkout.resolve()}",
        "extraVolumes[0].hostPath.type=Directory",
        f"extraVolumeMounts[0].name={VOLUME}",
        f"extraVolumeMounts[0].mountPath={DEV_MOUNT}",
        "extraVolumeMounts[0].readOnly=true",
        "operator.extraEnv[0].name=PYTHONPATH",
        f"operator.extraEnv[0].value={dev_pythonpath()}",
    ]


def dev_mode_template(checkout: Path = REPO) -> dict[str, Any]:
    """A TrainJob's `spec.template`: the `trainer` container mounts the checkout and imports from it."""
    trainer = {
        "name": names.CONTAINER_NAME,
        "env": [{"name": "PYTHONPATH", "value": dev_pythonpath()}],
        "volumeMounts": [{"name": VOLUME, "mountPath": DEV_MOUNT, "readOnly": True}],
    }
    volume = {"name": VOLUME, "hostPath": {"path": str(checkout.resolve()), "type": "Directory"}}
    return {"spec": {"containers": [trainer], "volumes": [volume]}}


def with_dev_template(manifest: dict[str, Any], checkout: Path = REPO) -> dict[str, Any]:
    """The TrainJob with the dev template; refuses one that has its own template (merging would guess)."""
    if manifest.get("kind") != "TrainJob" or (manifest.get("spec") or {}).get("template"):
        raise ValueError("dev mode takes a TrainJob without its own spec.template")
    return {**manifest, "spec": {**manifest["spec"], "template": dev_mode_template(checkout)}}


def privileged_namespaces(chain: Chain) -> None:
    """hostPath passes Pod Security only at `privileged`: the operator's and the jobs' namespaces get it."""
    for namespace in dict.fromkeys((chain.operator_namespace, chain.job_namespace)):
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        chain.run("dev mode", [chain.kubectl, "apply", "-f", "-"], stdin=json.dumps(body))
        chain.run("dev mode", [chain.kubectl, "label", "namespace", namespace, "--overwrite", PRIVILEGED])


def tools_bin() -> Path:
    """The pinned helm and kubectl (hack/build/tools.sh)."""
    return built("tools.sh")


def install_dev_chart(kubeconfig: Path, loaded_images: list[str]) -> None:
    """The chart in `mwms-system` (privileged), its operator on this checkout's code; jobs go in `default`."""
    bins = tools_bin()
    chain = Chain(
        kubeconfig=kubeconfig,
        helm=str(bins / "helm"),
        kubectl=str(bins / "kubectl"),
        helm_values=[*real_node_chart_values(loaded_images), *dev_mode_values()],
    )
    privileged_namespaces(chain)
    chain.install_chart()
    print(NOTE.format(checkout=REPO, namespace=chain.operator_namespace), file=sys.stderr)
    print(
        "a TrainJob on it: python -m mwms_dev.devmode manifests/samples/minimal.yaml | kubectl apply -f -",
        file=sys.stderr,
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(
            "usage: python -m mwms_dev.devmode TRAINJOB.yaml (prints it with the dev template)",
            file=sys.stderr,
        )
        return 2
    try:
        print(json.dumps(with_dev_template(yaml.safe_load(Path(args[0]).read_text()))))
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"mwms_dev.devmode: {args[0]}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
