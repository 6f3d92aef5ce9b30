"""mwms-operator: a kopf operator that runs TrainJob objects as TensorFlow MWMS worker groups."""

from importlib import metadata
from pathlib import Path


def _version() -> str:
    """The installed distribution's version (from the repository's VERSION file, its one source)."""
    try:
        return metadata.version("mwms-operator")
    except metadata.PackageNotFoundError:  # a source checkout on sys.path, not installed
        return (Path(__file__).resolve().parents[2] / "VERSION").read_text().strip()


__version__ = _version()
