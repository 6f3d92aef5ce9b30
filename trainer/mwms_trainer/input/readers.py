"""csv/parquet tables for both input paths: which files a dataPath names, reading them, checking their rows.

A file the parser refuses, a missing column or a value that is not a finite number exits 2 naming it.
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from mwms_contract import names
from mwms_trainer import objectstore
from mwms_trainer.errors import ConfigError
from mwms_trainer.objectstore import S3Object
from mwms_trainer.trainer_config import TrainerConfig

_SETTING = names.ENV_TRAINER_CONFIG

DataFile = Path | S3Object  # a file in the worker, or an object in a bucket (objectstore.py)


def table_files(data_path: str, dataset: str) -> list[DataFile]:
    """The files a csv/parquet dataPath names: a file; a directory's `*.<dataset>` files (Spark's output
    layout: its `_SUCCESS` and `.crc` markers are skipped); or a glob; the same in a bucket for an s3:// URI.
    Sorted by name, so every worker reads the rows in the same order."""
    if objectstore.is_uri(data_path):
        return list(objectstore.list_files(data_path, dataset))
    path = Path(data_path)
    if path.is_file():
        return [path]
    if path.is_dir():
        if (path / objectstore.DELTA_LOG).is_dir():
            raise ConfigError(f"{_SETTING}.dataPath", objectstore.delta_table(data_path))
        files = [f for f in path.glob(f"*.{dataset}") if f.is_file() and not f.name.startswith(("_", "."))]
        where = f"directory {data_path!r} holds no *.{dataset} files"
    else:
        files = [Path(f) for f in glob.glob(data_path) if Path(f).is_file()]
        where = f"{data_path!r} is not a readable file, directory or glob of files"
    if not files:
        raise ConfigError(f"{_SETTING}.dataPath", where)
    return list(sorted(files))


@contextlib.contextmanager
def source(file: DataFile, dataset: str) -> Iterator[Any]:
    """What the parsers read `file` from: its path, or an object's pyarrow file (streamed, not staged)."""
    if isinstance(file, S3Object):
        with objectstore.opened(file, dataset) as handle:
            yield handle
    else:
        yield file


def read_file(file: DataFile, dataset: str, chunk_rows: int | None = None) -> Iterator[Any]:
    """A csv/parquet file as pandas frames: the whole file, or chunks of `chunk_rows` rows streamed from disk
    or the bucket (sharding: files)."""
    import pandas as pd  # heavy: loaded only when a table is read

    with source(file, dataset) as where, readable(file, dataset):
        if chunk_rows is None:
            yield pd.read_csv(where) if dataset == "csv" else pd.read_parquet(where)
        elif dataset == "csv":
            yield from pd.read_csv(where, chunksize=chunk_rows)
        else:
            import pyarrow.parquet as pq

            for batch in pq.ParquetFile(where).iter_batches(batch_size=chunk_rows):
                yield batch.to_pandas()


@contextlib.contextmanager
def readable(file: DataFile, dataset: str) -> Iterator[None]:
    """Around a parser's read of `file`: a file the parser refuses exits 2 naming it (an object store's
    failure mid-read is what it means: objectstore.failure)."""
    try:
        yield
    except OSError as e:
        if isinstance(file, S3Object):
            raise objectstore.failure(str(file), e, os.environ) from None
        raise ConfigError(f"{_SETTING}.dataPath", f"cannot read {str(file)!r} as {dataset}: {e}") from None
    except Exception as e:  # the parsers raise many types; all mean "not a usable file"
        raise ConfigError(f"{_SETTING}.dataPath", f"cannot read {str(file)!r} as {dataset}: {e}") from None


def _arrow_type(arrow: Any) -> str:
    """The MLflow type of a parquet column; others by name."""
    import pyarrow as pa

    if pa.types.is_boolean(arrow):
        return "boolean"
    if pa.types.is_integer(arrow):
        return "long"
    if pa.types.is_floating(arrow):
        return "double"
    return str(arrow)  # not numeric: table_rows refuses it as a feature


def file_columns(file: DataFile, dataset: str) -> dict[str, str]:
    """A file's columns and their types, from its header alone (parquet: the footer's declared types)."""
    with source(file, dataset) as where, readable(file, dataset):
        if dataset == "parquet":
            import pyarrow.parquet as pq

            return {field.name: _arrow_type(field.type) for field in pq.read_schema(where)}
        import pandas as pd

        # csv declares no types (pandas guesses per chunk): "double", which MLflow takes whole numbers for.
        return {str(name): "double" for name in pd.read_csv(where, nrows=0).columns}


def table_rows(frame: Any, cfg: TrainerConfig, where: str) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Feature rows (float64), 0/1 labels and feature names of one table frame."""
    import pandas as pd

    if cfg.labelColumn not in frame.columns:
        raise ConfigError(
            f"{_SETTING}.labelColumn",
            f"{cfg.labelColumn!r} is not a column of {where!r}: {list(frame.columns)}",
        )
    features = frame.drop(columns=[cfg.labelColumn])
    non_numeric = [c for c in features.columns if not pd.api.types.is_numeric_dtype(features[c])]
    if non_numeric or features.shape[1] == 0:
        raise ConfigError(
            f"{_SETTING}.dataPath", f"feature columns must be numeric; not numeric: {non_numeric}"
        )
    labels = frame[cfg.labelColumn].to_numpy()
    if not set(np.unique(labels)).issubset({0, 1}):
        raise ConfigError(f"{_SETTING}.labelColumn", f"{cfg.labelColumn!r} must hold 0/1 labels")
    return features.to_numpy(dtype=np.float64), labels, tuple(str(c) for c in features.columns)


def check_finite(x: np.ndarray, feature_names: tuple[str, ...]) -> None:
    """Exit 2 before any peer is waited for: a NaN or an infinity trains a NaN model (also a float64 value
    beyond float32's range, which the model's float32 input turns into an infinity)."""
    with np.errstate(over="ignore"):
        bad = ~np.isfinite(x.astype(np.float32))
    if bad.any():
        columns = [feature_names[i] for i in np.flatnonzero(bad.any(axis=0))]
        shown = ", ".join(map(repr, columns[:10])) + (
            f" and {len(columns) - 10} more" if len(columns) > 10 else ""
        )
        raise ConfigError(
            f"{_SETTING}.dataPath",
            f"{int(bad.any(axis=1).sum())} of {len(x)} rows hold values that are not finite numbers "
            f"(NaN, empty, infinite or beyond float32's range) in column(s) {shown}; drop or fill them",
        )
