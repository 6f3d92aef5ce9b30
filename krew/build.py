"""Builds the archive krew/mwms.yaml names (the kubectl-mwms shim and the LICENSE), byte for byte the same on
every machine, and prints its sha256: `python krew/build.py build/krew`. The release attaches it; the static
test (tests/static/test_static_krew.py) rebuilds it and checks the manifest's sha256 and version."""

from __future__ import annotations

import gzip
import hashlib
import io
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MEMBERS = {"kubectl-mwms": HERE / "kubectl-mwms", "LICENSE": REPO / "LICENSE"}


def archive_name() -> str:
    return f"kubectl-mwms-v{(REPO / 'VERSION').read_text().strip()}.tar.gz"


def archive() -> bytes:
    """The tar.gz, with fixed times, owners and modes."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, path in MEMBERS.items():
            data = path.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o755 if name.startswith("kubectl-") else 0o644
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), compresslevel=9, mtime=0)


def main(out: str) -> None:
    data = archive()
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / archive_name()).write_bytes(data)
    print(hashlib.sha256(data).hexdigest())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(REPO / "build" / "krew"))
