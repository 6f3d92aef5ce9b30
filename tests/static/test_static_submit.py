"""What `mwms submit` and the Python client assume about the trainer image, checked against its Dockerfile."""

from __future__ import annotations

import re

from static_support import REPO

from mwms import submit


def python_minor(dockerfile: str, arg: str) -> tuple[int, int]:
    text = (REPO / dockerfile).read_text()
    match = re.search(rf"^ARG {arg}=\S*python:(\d+)\.(\d+)", text, re.MULTILINE)
    assert match, f"{dockerfile}: no {arg} with a python image"
    return int(match.group(1)), int(match.group(2))


def test_the_image_python_the_client_checks_is_the_trainer_images():
    # A pickled function is refused when the local Python differs from this: it must be the image's.
    assert python_minor("trainer/Dockerfile", "BASE_IMAGE") == submit.IMAGE_PYTHON


def test_the_custom_image_example_installs_with_the_trainer_images_python():
    text = (REPO / "docs" / "examples" / "custom-trainer.Dockerfile").read_text()
    # One stage, FROM the trainer image: its own pip and Python install the packages.
    assert re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE) == ["${TRAINER}"]
    assert "python -m pip install" in text
    site = re.search(r"/opt/venv/lib/python(\d+)\.(\d+)/site-packages", text)
    assert site and (int(site.group(1)), int(site.group(2))) == submit.IMAGE_PYTHON
    assert "/opt/venv/lib/python3.11/site-packages" in (REPO / "trainer" / "Dockerfile").read_text()
