"""mwms-operator: a kopf operator that runs TrainJob objects as TensorFlow MWMS worker groups."""

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _version() -> str:
    """The version (from the repository's VERSION file, its one source): installed, the name of the
    distribution's .dist-info beside the package says it; in a source checkout, VERSION. importlib.metadata is
    the last resort: its imports (email, zipfile, csv) cost memory for one string."""
    for info in _PACKAGE.parent.glob("mwms_operator-*.dist-info"):
        return info.name.removeprefix("mwms_operator-").removesuffix(".dist-info")
    checkout = _PACKAGE.parents[1] / "VERSION"
    if checkout.is_file():
        return checkout.read_text().strip()
    from importlib import metadata

    return metadata.version("mwms-operator")


__version__ = _version()
