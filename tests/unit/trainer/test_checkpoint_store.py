"""The pure parts of a checkpoint store and of where a group resumes: a store always names a checkpoint it
holds whole, and the step after the one saved is where the next group starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from mwms_trainer.checkpoint_store import POINTER, RemoteStore
from mwms_trainer.group_checkpoint import ResumePoint, resume_point


class FolderStore(RemoteStore):
    """A RemoteStore on a local folder: the four file calls the run and S3 stores make remotely."""

    def __init__(self, root: Path) -> None:
        self.root, self.where = root, str(root)
        root.mkdir(exist_ok=True)

    def _list(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir())

    def _get(self, name: str, path: str) -> None:
        Path(path).write_bytes((self.root / name).read_bytes())

    def _put(self, path: str, name: str) -> None:
        (self.root / name).write_bytes(Path(path).read_bytes())

    def _delete(self, name: str) -> None:
        (self.root / name).unlink()


def _checkpoint(local: Path, n: int) -> None:
    """What tf.train.CheckpointManager leaves after its n-th save (max_to_keep=1)."""
    for old in local.glob("ckpt-*"):
        old.unlink()
    local.mkdir(exist_ok=True)
    (local / f"ckpt-{n}.index").write_text(f"index {n}")
    (local / f"ckpt-{n}.data-00000-of-00001").write_text(f"data {n}")
    (local / POINTER).write_text(f'model_checkpoint_path: "ckpt-{n}"\n')


def test_a_published_checkpoint_is_fetched_whole_and_older_ones_are_removed(tmp_path):
    store, local = FolderStore(tmp_path / "store"), tmp_path / "chief"
    _checkpoint(local, 1)
    store.publish(str(local))
    _checkpoint(local, 2)
    store.publish(str(local))
    assert store._list() == [POINTER, "ckpt-2.data-00000-of-00001", "ckpt-2.index"]
    fetched = tmp_path / "new-pod"
    store.fetch(str(fetched))
    assert sorted(p.name for p in fetched.iterdir()) == store._list()
    assert (fetched / "ckpt-2.index").read_text() == "index 2"
    store.discard()
    assert store._list() == []


def test_a_store_whose_pointer_names_files_it_lacks_is_a_fresh_start(tmp_path):
    store = FolderStore(tmp_path / "store")
    (store.root / POINTER).write_text('model_checkpoint_path: "ckpt-7"\n')  # its files never arrived
    fetched = tmp_path / "new-pod"
    store.fetch(str(fetched))
    assert list(fetched.iterdir()) == []


@pytest.mark.parametrize(
    ("saved", "expected"),
    [
        ((-1, -1), ResumePoint()),  # no checkpoint
        ((0, -1), ResumePoint(1, 0, True)),  # an epoch-end save of BackupAndRestore's own (no step)
        ((2, 86), ResumePoint(3, 0, True)),  # the epoch's last step: the next epoch
        ((2, 33), ResumePoint(2, 34, True)),  # mid-epoch: the step after
    ],
)
def test_a_group_resumes_at_the_step_after_the_one_saved(saved, expected):
    assert resume_point(*saved, steps_per_epoch=87) == expected
