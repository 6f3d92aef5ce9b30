"""Dev mode's values (mwms_dev.devmode): each PYTHONPATH entry is a package root of the checkout, so the
mounted code shadows the image's copy of every package the images hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from mwms_dev.devmode import DEV_MOUNT, dev_mode_template, dev_pythonpath, with_dev_template
from mwms_kit.trainjobs import trainjob

REPO = Path(__file__).resolve().parents[3]


def test_pythonpath_holds_the_root_of_each_package_the_images_install():
    roots = {entry.removeprefix(f"{DEV_MOUNT}/") for entry in dev_pythonpath().split(":")}
    for package in ("contract/mwms_contract", "operator/mwms_operator", "trainer/mwms_trainer"):
        assert (REPO / package / "__init__.py").is_file()
        assert package.split("/")[0] in roots


def test_template_mounts_the_checkout_into_the_trainer_container_read_only():
    (container,) = dev_mode_template(REPO)["spec"]["containers"]
    assert container["name"] == "trainer"
    assert container["volumeMounts"][0] == {"name": "mwms-dev-src", "mountPath": DEV_MOUNT, "readOnly": True}
    assert {"name": "PYTHONPATH", "value": dev_pythonpath()} in container["env"]


def test_a_job_with_its_own_template_is_refused_rather_than_merged_by_guess():
    job = trainjob("own-template", 1, template={"spec": {"nodeSelector": {"a": "b"}}})
    with pytest.raises(ValueError, match="without its own spec.template"):
        with_dev_template(job)
