"""Where the group's checkpoint is kept between groups: the volume every worker mounts, the job's MLflow run,
or an s3:// prefix. Only the chief calls a store; the other workers take the chief's state from it when the
fit begins (group_checkpoint.py; why: docs/design/checkpoint-stores.md).

A checkpoint is what tf.train.CheckpointManager writes: `ckpt-N.index`, `ckpt-N.data-*` and the `checkpoint`
file naming the latest. Publishing sends the latest's files first and the `checkpoint` file last, then removes
older files, so the store always names a complete checkpoint: the last one wholly sent.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from mwms_contract import names
from mwms_trainer import objectstore
from mwms_trainer.errors import ConfigError

log = logging.getLogger("mwms_trainer")
T = TypeVar("T")
CHIEF_DIR = "chief"  # Keras BackupAndRestore's layout: the chief's copy, the one that counts
POINTER = "checkpoint"  # CheckpointManager's state file: names the latest checkpoint (relative to its folder)
_LATEST = re.compile(r'^model_checkpoint_path:\s*"([^"]+)"', re.MULTILINE)


class Store(Protocol):
    """The chief's view of a checkpoint store. `where` names it in logs and messages."""

    where: str

    def fetch(self, local: str) -> None:
        """Make `local` hold the store's latest complete checkpoint (empty when none was published)."""
        ...

    def publish(self, local: str) -> None:
        """Send `local`'s latest checkpoint; older ones are removed once the new one is named."""
        ...

    def discard(self) -> None:
        """Remove the job's checkpoint (its model is logged: nothing is left to resume)."""
        ...


def latest_name(pointer_text: str) -> str | None:
    """The checkpoint a `checkpoint` file names (`ckpt-3`), or None."""
    match = _LATEST.search(pointer_text)
    return os.path.basename(match.group(1)) if match else None


def checkpoint_files(names_: list[str], latest: str) -> list[str]:
    """The files of checkpoint `latest` among `names_`: its index and data shards."""
    return sorted(n for n in names_ if n.startswith(latest + "."))


class VolumeStore:
    """The volume every worker mounts (the job's folder on it): the checkpoint is written in place, nothing
    travels. Its `chief` folder is the checkpoint; the rest (kept.py's fitted model) is not this store's."""

    def __init__(self, directory: str) -> None:
        self.where = directory
        self._directory = directory

    def fetch(self, local: str) -> None:
        pass

    def publish(self, local: str) -> None:
        pass

    def discard(self) -> None:
        shutil.rmtree(os.path.join(self._directory, CHIEF_DIR), ignore_errors=True)


class RemoteStore:
    """A store reached through four calls on its files (by bare name): list, get, put, delete."""

    where = ""

    def _list(self) -> list[str]:
        raise NotImplementedError

    def _get(self, name: str, path: str) -> None:
        raise NotImplementedError

    def _put(self, path: str, name: str) -> None:
        raise NotImplementedError

    def _delete(self, name: str) -> None:
        raise NotImplementedError

    def fetch(self, local: str) -> None:
        shutil.rmtree(local, ignore_errors=True)  # a scratch copy: the store is what counts
        os.makedirs(local)
        stored = self._list()
        if POINTER not in stored:
            return
        with tempfile.TemporaryDirectory() as tmp:
            pointer = os.path.join(tmp, POINTER)
            self._get(POINTER, pointer)
            with open(pointer, encoding="utf-8") as f:
                latest = latest_name(f.read())
            files = checkpoint_files(stored, latest) if latest else []
            if not files:
                log.warning(
                    "%s names checkpoint %s, which it does not hold: starting afresh", self.where, latest
                )
                return
            for name in files:
                self._get(name, os.path.join(local, name))
            shutil.move(pointer, os.path.join(local, POINTER))  # last: `local` is complete once it is there

    def publish(self, local: str) -> None:
        with open(os.path.join(local, POINTER), encoding="utf-8") as f:
            latest = latest_name(f.read())
        if latest is None:
            raise ValueError(f"{local}/{POINTER} names no checkpoint")
        for name in checkpoint_files(os.listdir(local), latest):
            self._put(os.path.join(local, name), name)
        self._put(os.path.join(local, POINTER), POINTER)
        for name in self._list():
            if name != POINTER and not name.startswith(latest + "."):
                self._delete(name)

    def discard(self) -> None:
        for name in self._list():
            if name != POINTER:
                self._delete(name)
        if POINTER in self._list():
            self._delete(POINTER)


class RunStore(RemoteStore):
    """The job's MLflow run: its artifacts under names.CHECKPOINT_ARTIFACT_DIR, through the chief's tracking
    server and credentials (the artifact proxy, or the run's own artifact store), each call retried as every
    call of the chief's to MLflow is."""

    def __init__(
        self, run_id: str, tracking_uri: str, retry: Callable[[str, Callable[[], Any]], Any]
    ) -> None:
        import mlflow
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        self._retry = retry
        client = mlflow.MlflowClient(tracking_uri)
        artifact_uri = retry("run lookup", lambda: client.get_run(run_id).info.artifact_uri)
        self._repo = get_artifact_repository(artifact_uri, tracking_uri=tracking_uri)
        self._dir = names.CHECKPOINT_ARTIFACT_DIR
        self.where = f"runs:/{run_id}/{self._dir}"

    def _list(self) -> list[str]:
        infos = self._retry("checkpoint listing", lambda: self._repo.list_artifacts(self._dir))
        return [os.path.basename(i.path) for i in infos if not i.is_dir]

    def _get(self, name: str, path: str) -> None:
        def get() -> None:
            with tempfile.TemporaryDirectory(dir=os.path.dirname(path)) as tmp:
                got = self._repo.download_artifacts(f"{self._dir}/{name}", dst_path=tmp)
                shutil.move(got, path)

        self._retry(f"checkpoint download of {name}", get)

    def _put(self, path: str, name: str) -> None:
        self._retry(f"checkpoint upload of {name}", lambda: self._repo.log_artifact(path, self._dir))

    def _delete(self, name: str) -> None:
        self._retry(
            f"checkpoint removal of {name}", lambda: self._repo.delete_artifacts(f"{self._dir}/{name}")
        )


class S3Store(RemoteStore):
    """An s3:// prefix, the job's checkpoint under `<prefix>/<job uid>/`, through pyarrow's S3FileSystem (the
    SDK's retries, then exit 75; a refusal a restart cannot fix exits 2 naming MWMS_CHECKPOINT_STORE)."""

    def __init__(self, uri: str, job_uid: str) -> None:
        objectstore.check_uri(uri, names.ENV_CHECKPOINT_STORE)
        self._root = objectstore.S3Object.parse(f"{uri.rstrip('/')}/{job_uid}")
        self.where = str(self._root)

    def _call(self, call: Callable[[], T]) -> T:
        with objectstore.reading(self.where, names.ENV_CHECKPOINT_STORE):
            return call()

    def _path(self, name: str) -> str:
        return f"{self._root.path}/{name}"

    def _list(self) -> list[str]:
        from pyarrow import fs

        selector = fs.FileSelector(self._root.path, allow_not_found=True)
        infos = self._call(lambda: objectstore.filesystem().get_file_info(selector))
        return [i.base_name for i in infos if i.type == fs.FileType.File]

    def _get(self, name: str, path: str) -> None:
        def get() -> None:
            with objectstore.filesystem().open_input_stream(self._path(name)) as src, open(path, "wb") as dst:
                shutil.copyfileobj(src, dst, 8 << 20)

        self._call(get)

    def _put(self, path: str, name: str) -> None:
        def put() -> None:
            with (
                open(path, "rb") as src,
                objectstore.filesystem().open_output_stream(self._path(name)) as dst,
            ):
                shutil.copyfileobj(src, dst, 8 << 20)

        self._call(put)

    def _delete(self, name: str) -> None:
        self._call(lambda: objectstore.filesystem().delete_file(self._path(name)))


class ChiefsStore:
    """What the other workers hold of a store: its name. They save with the group and send nothing."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fetch(self, local: str) -> None:
        pass

    def publish(self, local: str) -> None:
        pass

    def discard(self) -> None:
        pass


def open_store(store: str | None, directory: str, job_uid: str, tracker: Any, is_chief: bool) -> Store:
    """The chief's store: the volume (`directory`) when `store` is None, the job's run, or an s3:// prefix;
    the others' ChiefsStore."""
    if store is None:
        return VolumeStore(directory)
    if not is_chief:
        return ChiefsStore(store)
    if store == names.CHECKPOINT_STORE_RUN:
        if tracker.run_id is None:
            raise ConfigError(names.ENV_CHECKPOINT_STORE, "the run store needs the chief's MLflow run")
        return RunStore(tracker.run_id, tracker.tracking_uri, tracker.retry)
    return S3Store(store, job_uid)
