"""The images `make images` built (build/images/*.oci.tar, hack/build/build-images.sh): OCI image layouts
whose index, manifest and config say what a pod needs (name and tag, non-root numeric user, entrypoint,
env, labels), and whose root filesystems, run by runc as the kubelet's runtime would (uid 65532, read-only
root, /tmp an empty scratch volume, no capabilities, no network), start what they ship."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARCHIVES = REPO / "build" / "images"
VERSION = (REPO / "VERSION").read_text().strip()
UID = 65532
IMAGES = {
    "mwms-operator": {"module": "mwms_operator", "env": {}},
    "mwms-trainer": {"module": "mwms_trainer", "env": {"TF_USE_LEGACY_KERAS": "1", "HOME": "/tmp"}},
}
LABELS = {
    "org.opencontainers.image.source": "https://github.com/mwms-dev/mwms-operator",
    "org.opencontainers.image.licenses": "Apache-2.0",
    "org.opencontainers.image.version": VERSION,
}


@dataclass
class OciImage:
    archive: Path
    index: dict
    manifest: dict
    config: dict


def read_blob(tar: tarfile.TarFile, descriptor: dict) -> bytes:
    algorithm, digest = descriptor["digest"].split(":")
    member = tar.extractfile(f"blobs/{algorithm}/{digest}")
    assert member is not None, descriptor
    data = member.read()
    assert hashlib.sha256(data).hexdigest() == digest, f"blob {digest} does not match its digest"
    return data


def read_oci_archive(path: Path) -> OciImage:
    """index.json -> the one manifest -> config, as an OCI image layout must chain them."""
    with tarfile.open(path) as tar:
        layout = json.load(tar.extractfile("oci-layout"))  # type: ignore[arg-type]
        assert layout == {"imageLayoutVersion": "1.0.0"}
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        (descriptor,) = index["manifests"]
        assert descriptor["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
        manifest = json.loads(read_blob(tar, descriptor))
        assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
        config = json.loads(read_blob(tar, manifest["config"]))
    return OciImage(path, index, manifest, config)


def config_problems(name: str, config: dict) -> list[str]:
    """What is wrong with an image config for the pods we run; empty when nothing is."""
    want = IMAGES[name]
    problems = []
    settings = config.get("config", {})
    user = settings.get("User", "")
    if not re.fullmatch(r"\d+(:\d+)?", user) or int(user.split(":")[0]) == 0:
        problems.append(f"User {user!r} is not a non-root numeric uid (runAsNonRoot needs one)")
    if settings.get("Entrypoint") != ["python", "-m", want["module"]]:
        problems.append(f"Entrypoint {settings.get('Entrypoint')} is not python -m {want['module']}")
    env = dict(item.split("=", 1) for item in settings.get("Env", []))
    for key, value in want["env"].items():
        if env.get(key) != value:
            problems.append(f"Env {key}={env.get(key)!r}, want {value!r}")
    if not env.get("PATH", "").startswith("/opt/venv/bin:"):
        problems.append(f"PATH {env.get('PATH')!r} does not start with the venv")
    labels = settings.get("Labels") or {}
    for key, value in {**LABELS, "org.opencontainers.image.title": name}.items():
        if labels.get(key) != value:
            problems.append(f"label {key}={labels.get(key)!r}, want {value!r}")
    if (config.get("os"), config.get("architecture")) != ("linux", "amd64"):
        problems.append(f"platform {config.get('os')}/{config.get('architecture')}, want linux/amd64")
    return problems


@pytest.fixture(scope="session")
def archives() -> dict[str, Path]:
    paths = {name: ARCHIVES / f"{name}.oci.tar" for name in IMAGES}
    missing = [str(p.relative_to(REPO)) for p in paths.values() if not p.is_file()]
    if missing:
        reason = f"{', '.join(missing)} not built: run `make images`"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return paths


@pytest.fixture(scope="session")
def images(archives) -> dict[str, OciImage]:
    return {name: read_oci_archive(path) for name, path in archives.items()}


@pytest.mark.parametrize("name", IMAGES)
def test_archive_names_the_image_the_chart_uses(images, name):
    """`ctr images import` (what `kind load image-archive` runs) names the image from these annotations:
    the chart's and the operator's default references, so imagePullPolicy IfNotPresent finds it."""
    annotations = images[name].index["manifests"][0]["annotations"]
    reference = f"ghcr.io/mwms-dev/{name}:{VERSION}"
    assert annotations["io.containerd.image.name"] == reference
    assert annotations["org.opencontainers.image.ref.name"] == reference


@pytest.mark.parametrize("name", IMAGES)
def test_config_is_what_pods_need(images, name):
    assert config_problems(name, images[name].config) == []


@pytest.mark.parametrize(
    ("name", "change", "problem"),
    [
        ("mwms-trainer", {"User": "0:0"}, "User '0:0'"),
        ("mwms-trainer", {"User": "nobody"}, "User 'nobody'"),
        ("mwms-operator", {"User": ""}, "User ''"),
        ("mwms-trainer", {"Entrypoint": None}, "Entrypoint None"),
        ("mwms-operator", {"Entrypoint": ["python", "-m", "mwms_trainer"]}, "Entrypoint"),
        ("mwms-trainer", {"Env": ["PATH=/opt/venv/bin:/usr/bin", "HOME=/tmp"]}, "TF_USE_LEGACY_KERAS=None"),
        ("mwms-trainer", {"Env": ["PATH=/usr/bin", "TF_USE_LEGACY_KERAS=1", "HOME=/tmp"]}, "PATH"),
        ("mwms-operator", {"Labels": {}}, "label org.opencontainers.image.source"),
    ],
)
def test_config_check_fails_on_a_wrong_image(images, name, change, problem):
    config = copy.deepcopy(images[name].config)
    config["config"].update(change)
    assert any(problem in p for p in config_problems(name, config)), config_problems(name, config)


def test_trainer_is_much_bigger_than_operator(images):
    """The operator image has no TensorFlow: its layers are a small fraction of the trainer's."""
    size = {name: sum(layer["size"] for layer in image.manifest["layers"]) for name, image in images.items()}
    assert size["mwms-operator"] * 5 < size["mwms-trainer"], size


def top_layer(image: OciImage) -> tuple[int, list[str]]:
    """The last layer's compressed size and the paths it holds."""
    layer = image.manifest["layers"][-1]
    algorithm, digest = layer["digest"].split(":")
    with tarfile.open(image.archive) as tar:
        blob = tar.extractfile(f"blobs/{algorithm}/{digest}")
        with tarfile.open(fileobj=blob, mode="r|*") as layer_tar:
            return layer["size"], [member.name for member in layer_tar]


CODE_LAYER_LIMIT = 2 * 1024 * 1024
SITE_PACKAGES = "opt/venv/lib/python3.11/site-packages/"
OURS = re.compile(re.escape(SITE_PACKAGES) + r"mwms_[a-z_]+(-[^/]+\.dist-info)?(/|$)")


def code_layer_problems(size: int, names: list[str]) -> list[str]:
    """Our own package must be the top layer, small and alone, over the dependencies: a new version of our
    code is then a download of kilobytes, not of TensorFlow again (and a rebuild stores only that layer)."""
    problems = []
    if not any(OURS.match(n) for n in names):
        problems.append("our package is not in the top layer")
    if size > CODE_LAYER_LIMIT:
        problems.append(f"the top layer is {size} bytes, over {CODE_LAYER_LIMIT}")
    strangers = [n for n in names if n.startswith(SITE_PACKAGES) and n != SITE_PACKAGES and not OURS.match(n)]
    if strangers:
        problems.append(f"the top layer also holds {strangers[:3]}")
    return problems


@pytest.mark.parametrize("name", IMAGES)
def test_our_code_is_a_small_layer_of_its_own(images, name):
    assert code_layer_problems(*top_layer(images[name])) == []


@pytest.mark.parametrize(
    ("name", "carries", "not_this"),
    [
        ("mwms-trainer", {"mwms_trainer", "mwms_contract"}, "mwms_operator"),
        ("mwms-operator", {"mwms_operator", "mwms_contract"}, "mwms_trainer"),
    ],
)
def test_each_image_carries_its_own_package_and_the_contract_only(images, name, carries, not_this):
    """The trainer and the operator share only mwms_contract: neither image ships the other's package."""
    names = top_layer(images[name])[1]
    packages = {n.removeprefix(SITE_PACKAGES).split("/")[0] for n in names if OURS.match(n)}
    assert carries <= packages and not_this not in packages, sorted(packages)


def test_code_layer_check_fails_on_one_venv_layer():
    """The check can fail: the old layout, our package installed into the same layer as the dependencies."""
    venv = [SITE_PACKAGES + "tensorflow/__init__.py", SITE_PACKAGES + "mwms_trainer/__init__.py"]
    problems = code_layer_problems(900_000_000, venv)
    assert any("over" in p for p in problems) and any("also holds" in p for p in problems), problems
    assert code_layer_problems(12, ["etc/motd"]) == ["our package is not in the top layer"]


# --- running the root filesystems ------------------------------------------------------------------


def unpack(image: OciImage, rootfs: Path) -> None:
    """The layers in order, as a runtime's snapshotter would stack them (these images have no whiteouts)."""
    rootfs.mkdir()
    with tarfile.open(image.archive) as tar:
        for layer in image.manifest["layers"]:
            algorithm, digest = layer["digest"].split(":")
            blob = tar.extractfile(f"blobs/{algorithm}/{digest}")
            assert blob is not None
            with tarfile.open(fileobj=blob, mode="r|*") as layer_tar:
                for member in layer_tar:
                    assert ".wh." not in member.name, f"whiteout {member.name}: not handled by this test"
                    if member.isdev():  # the runtime provides /dev
                        continue
                    layer_tar.extract(member, rootfs, filter="fully_trusted")


@pytest.fixture(scope="session")
def rootfs(images, tmp_path_factory) -> Iterator[dict[str, Path]]:
    if shutil.which("runc") is None or os.geteuid() != 0:
        reason = "running the images needs root and runc (apt-get install runc; .ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("rootfs")
    paths = {}
    for name, image in images.items():
        paths[name] = base / name
        unpack(image, paths[name])
    yield paths
    shutil.rmtree(base, ignore_errors=True)


def run_in(image: OciImage, rootfs: Path, args: list[str], tmp_path: Path, timeout: float = 300):
    """Run `args` in the image's root filesystem with runc: its env and user, the root read-only, /tmp a
    tmpfs (a pod's emptyDir), no capabilities, no new privileges, a network namespace of its own."""
    subprocess.run(["runc", "spec", "--bundle", str(tmp_path)], check=True)
    spec = json.loads((tmp_path / "config.json").read_text())
    uid, gid = (int(x) for x in image.config["config"]["User"].split(":"))
    spec["root"] = {"path": str(rootfs), "readonly": True}
    spec["process"].update(
        terminal=False,
        args=args,
        env=image.config["config"]["Env"],
        cwd="/",
        user={"uid": uid, "gid": gid},
        noNewPrivileges=True,
        capabilities={key: [] for key in ("bounding", "effective", "permitted", "ambient")},
    )
    spec["mounts"].append(
        {
            "destination": "/tmp",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "nodev", "mode=1777"],
        },
    )
    (tmp_path / "config.json").write_text(json.dumps(spec))
    container = f"mwms-images-test-{os.getpid()}-{tmp_path.name}"[:60]
    state = tmp_path / "runc-state"
    try:
        return subprocess.run(
            ["runc", "--root", str(state), "run", "--bundle", str(tmp_path), container],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    finally:
        subprocess.run(["runc", "--root", str(state), "delete", "--force", container], capture_output=True)


TRAINER_IMPORTS = """
import os, sys
assert (os.getuid(), os.getgid()) == (65532, 65532), (os.getuid(), os.getgid())
import mwms_trainer.train, tf_keras, mlflow
import importlib.util
assert importlib.util.find_spec("mwms_operator") is None, "the operator is in the trainer image"
assert importlib.util.find_spec("pip"), "no pip: spec.code.requirements could not install anything"
import tensorflow as tf
assert tf.keras.__name__.startswith("tf_keras"), tf.keras  # TF_USE_LEGACY_KERAS took effect
try:
    open("/opt/venv/written", "w")
except OSError as e:
    print("root fs refused a write:", e.strerror)
open("/tmp/scratch", "w").write("ok")
print("trainer imports ok", tf.__version__)
"""

OPERATOR_IMPORTS = """
import importlib.util, os, sys
assert os.getuid() == 65532, os.getuid()
import kopf, mwms_operator.handlers
assert importlib.util.find_spec("tensorflow") is None, "TensorFlow is in the operator image"
assert "tensorflow" not in sys.modules
print("operator imports ok", mwms_operator.__version__)
"""


def test_trainer_imports_as_65532_on_a_read_only_root(images, rootfs, tmp_path):
    image = images["mwms-trainer"]
    result = run_in(image, rootfs["mwms-trainer"], ["python", "-c", TRAINER_IMPORTS], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "root fs refused a write: Read-only file system" in result.stdout
    assert "trainer imports ok 2.21.0" in result.stdout


def test_trainer_entrypoint_runs_and_names_the_missing_setting(images, rootfs, tmp_path):
    """The image's own ENTRYPOINT, with no settings: exit 2 (invalid configuration) naming the variable."""
    image = images["mwms-trainer"]
    result = run_in(image, rootfs["mwms-trainer"], image.config["config"]["Entrypoint"], tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "invalid configuration: MLFLOW_TRACKING_URI" in result.stdout


def test_operator_imports_without_tensorflow(images, rootfs, tmp_path):
    result = run_in(
        images["mwms-operator"], rootfs["mwms-operator"], ["python", "-c", OPERATOR_IMPORTS], tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"operator imports ok {VERSION}" in result.stdout


def test_run_check_fails_when_uid_65532_cannot_read_the_venv(images, rootfs, tmp_path):
    """The runtime check can fail: the same run fails when uid 65532 cannot read the venv."""
    venv = rootfs["mwms-operator"] / "opt" / "venv"
    mode = venv.stat().st_mode
    venv.chmod(0o700)
    try:
        result = run_in(
            images["mwms-operator"], rootfs["mwms-operator"], ["python", "-c", OPERATOR_IMPORTS], tmp_path
        )
    finally:
        venv.chmod(mode)
    assert result.returncode != 0
    assert "operator imports ok" not in result.stdout
