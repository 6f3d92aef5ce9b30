"""The images' lock files (requirements/*.lock.txt, written by hack/build/lock.sh): every package pinned with
its hashes, pyproject's pins and ranges honoured, and the Dockerfiles installing from them alone."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from static_support import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
EXTRAS = PYPROJECT["project"]["optional-dependencies"]
LOCKS = {  # lock file -> the extras it is compiled from
    "operator.lock.txt": ["operator"],
    "trainer.lock.txt": ["trainer", "mlflow-s3"],
    "trainer-gpu.lock.txt": ["trainer", "mlflow-s3", "gpu"],
}
ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def read_lock(path: Path) -> dict[str, tuple[str, int]]:
    """{canonical name: (version, number of hashes)} of a pip-compile/uv style lock file."""
    entries: dict[str, tuple[str, int]] = {}
    current = None
    for line in path.read_text().splitlines():
        match = ENTRY.match(line)
        if match:
            current = canonicalize_name(match.group(1))
            assert current not in entries, f"{path.name}: {current} twice"
            entries[current] = (match.group(2), 0)
        elif current and line.strip().startswith("--hash=sha256:"):
            version, hashes = entries[current]
            entries[current] = (version, hashes + 1)
        elif line.strip() and not line.lstrip().startswith("#"):
            raise AssertionError(f"{path.name}: unexpected line {line!r}")
    return entries


def lock_problems(entries: dict[str, tuple[str, int]], requirements: list[str]) -> list[str]:
    problems = [f"{name}=={version} has no hash" for name, (version, hashes) in entries.items() if not hashes]
    for text in requirements:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        if name not in entries:
            problems.append(f"{text}: not in the lock")
        elif not requirement.specifier.contains(entries[name][0], prereleases=True):
            problems.append(f"{text}: the lock has {entries[name][0]}")
    return problems


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_lock_honours_pyproject(lock):
    requirements = [r for extra in LOCKS[lock] for r in EXTRAS[extra]]
    assert not lock_problems(read_lock(REPO / "requirements" / lock), requirements)


def test_build_lock_honours_build_system():
    entries = read_lock(REPO / "requirements" / "build.lock.txt")
    assert not lock_problems(entries, PYPROJECT["build-system"]["requires"])
    assert list(entries) == ["setuptools"]


def test_the_check_catches_a_wrong_pin_a_missing_package_and_a_missing_hash():
    entries = read_lock(REPO / "requirements" / "trainer.lock.txt")
    assert lock_problems({**entries, "tensorflow": ("2.20.0", 3)}, EXTRAS["trainer"]) == [
        "tensorflow==2.21.0: the lock has 2.20.0"
    ]
    without = {k: v for k, v in entries.items() if k != "mlflow"}
    assert lock_problems(without, EXTRAS["trainer"]) == ["mlflow==3.17.2: not in the lock"]
    assert lock_problems({**entries, "numpy": (entries["numpy"][0], 0)}, []) == [
        f"numpy=={entries['numpy'][0]} has no hash"
    ]


def test_gpu_lock_has_cuda_wheels_and_the_same_tensorflow():
    cpu = read_lock(REPO / "requirements" / "trainer.lock.txt")
    gpu = read_lock(REPO / "requirements" / "trainer-gpu.lock.txt")
    assert any(name.startswith("nvidia-cudnn") for name in gpu)
    assert not any(name.startswith("nvidia-") for name in cpu)
    assert gpu["tensorflow"][0] == cpu["tensorflow"][0]


@pytest.mark.parametrize("image", ["operator", "trainer"])
def test_dockerfile_installs_only_hash_checked_locks(image):
    """Every pip install of a requirement file checks hashes and resolves nothing itself."""
    text = (REPO / image / "Dockerfile").read_text().replace("\\\n", " ")
    installs = re.findall(r"pip install ([^&\n]*)", text)
    from_locks = [i for i in installs if " -r " in f" {i}"]
    assert from_locks, "the Dockerfile installs no lock file"
    for options in from_locks:
        assert "--require-hashes" in options and "--no-deps" in options, options
        assert re.search(r"-r \S*requirements/\S+\.lock\.txt|-r \"\$lock\"", options), options
    # Anything else is our own wheel, built in the image, without dependencies.
    for options in set(installs) - set(from_locks):
        assert "--no-deps" in options and "/tmp/dist/" in options, options
