"""dataPath in object storage: `s3://bucket/prefix/` listed and read through pyarrow.fs.S3FileSystem,
set up from the standard AWS variables (why pyarrow: docs/design/s3-through-pyarrow.md).

A refusal a restart cannot fix exits 2 naming the URI, never a credential; a store still failing after the
SDK's retries exits 75.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from mwms_contract import names
from mwms_trainer.errors import ConfigError, RetryableError, TrainerError

_SETTING = f"{names.ENV_TRAINER_CONFIG}.dataPath"
SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
GLOB = re.compile(r"[*?\[]")
DEFAULT_MAX_ATTEMPTS = 8
SECRET_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# The SDK's error names (pyarrow's "AWS Error <NAME> during <operation>") that a restart cannot fix.
PERMANENT = re.compile(
    r"AWS Error (ACCESS_DENIED|INVALID_ACCESS_KEY_ID|SIGNATURE_DOES_NOT_MATCH|NO_SUCH_BUCKET|NO_SUCH_KEY|"
    r"RESOURCE_NOT_FOUND|UNRECOGNIZED_CLIENT|MISSING_AUTHENTICATION_TOKEN|INVALID_CLIENT_TOKEN_ID|"
    r"EXPIRED_TOKEN|INCOMPLETE_SIGNATURE|INVALID_SIGNATURE|NOT_INITIALIZED)|HTTP status 40[034]"
)


def scheme_of(data_path: str) -> str | None:
    """The URI scheme of a dataPath (lower case), or None for a path inside the worker."""
    match = SCHEME.match(data_path)
    return match.group(1).lower() if match else None


def check_data_path(data_path: str) -> None:
    """Exit 2 for a URI the trainer cannot read: only s3:// is supported (and tested), without credentials."""
    if scheme_of(data_path) is not None:
        check_uri(data_path, _SETTING)


def check_uri(uri: str, setting: str) -> None:
    """Exit 2 naming `setting` unless `uri` is s3://bucket[/key] without credentials."""
    scheme = scheme_of(uri)
    if scheme not in names.DATA_PATH_SCHEMES:
        hint = " (Spark's s3a:// and s3n:// are s3:// here)" if scheme in ("s3a", "s3n") else ""
        raise ConfigError(
            setting,
            f"{scheme}:// is not supported{hint}; use a path inside the worker (a volume from spec.template) "
            f"or one of: {', '.join(s + '://' for s in names.DATA_PATH_SCHEMES)}",
        )
    location = urlsplit(uri)
    if "@" in location.netloc:
        raise ConfigError(
            setting,
            "credentials in the URI are refused (they would be in the spec for anyone to read): give them to "
            "the workers as AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY from a Secret, or a service account",
        )
    if not location.netloc:
        raise ConfigError(setting, f"{uri!r} names no bucket (s3://bucket/prefix/)")


@dataclass(frozen=True, order=True)
class S3Object:
    """One object (or, as a URI's parse, a key prefix or glob) in a bucket."""

    bucket: str
    key: str

    @classmethod
    def parse(cls, uri: str) -> S3Object:
        check_data_path(uri)
        location = urlsplit(uri)
        return cls(location.netloc, location.path.lstrip("/"))

    @property
    def path(self) -> str:
        """pyarrow's name of it: bucket/key."""
        return f"{self.bucket}/{self.key}".rstrip("/")

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def is_uri(data_path: str) -> bool:
    return scheme_of(data_path) is not None


def s3_options(env: Mapping[str, str]) -> dict[str, Any]:
    """S3FileSystem's settings: the endpoint (AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL; given to pyarrow
    itself, so buckets are addressed path-style), AWS_REGION (else AWS_DEFAULT_REGION) and AWS_MAX_ATTEMPTS.
    No credentials: the SDK's default chain finds those itself."""
    options: dict[str, Any] = {}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        parsed = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        if parsed.scheme not in ("http", "https") or not parsed.netloc or "@" in parsed.netloc:
            raise ConfigError(
                "AWS_ENDPOINT_URL_S3" if env.get("AWS_ENDPOINT_URL_S3") else "AWS_ENDPOINT_URL",
                "must be an http:// or https:// URL of the S3 endpoint without credentials, "
                f"e.g. http://minio.storage:9000; got a {parsed.scheme or 'schemeless'} URL",
            )
        options["endpoint_override"] = parsed.netloc
        options["scheme"] = parsed.scheme
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        options["region"] = region
    attempts = env.get("AWS_MAX_ATTEMPTS", "")
    if attempts and (not attempts.isdigit() or int(attempts) < 1):
        raise ConfigError("AWS_MAX_ATTEMPTS", f"must be a positive integer, got {attempts!r}")
    options["max_attempts"] = int(attempts) if attempts else DEFAULT_MAX_ATTEMPTS
    return options


@functools.cache
def filesystem() -> Any:
    """One S3FileSystem per process, from this process's environment."""
    from pyarrow import fs  # heavy (the AWS SDK): loaded only for an s3:// dataPath

    options = s3_options(os.environ)
    retry = fs.AwsStandardS3RetryStrategy(max_attempts=options.pop("max_attempts"))
    return fs.S3FileSystem(retry_strategy=retry, **options)


def mask(text: str, env: Mapping[str, str]) -> str:
    """`text` with the value of every credential variable replaced by ***."""
    for variable in SECRET_VARIABLES:
        value = env.get(variable)
        if value:
            text = text.replace(value, "***")
    return text


def failure(uri: str, error: OSError, env: Mapping[str, str], setting: str = _SETTING) -> TrainerError:
    """The trainer error for an object store's refusal of `uri` (named by `setting`): permanent (exit 2) for
    what a restart cannot fix, else retryable (the SDK has already retried it with backoff)."""
    detail = mask(str(error), env).rstrip(".")
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or "AWS S3"
    if isinstance(error, FileNotFoundError) or PERMANENT.search(detail):
        verb = "read" if setting == _SETTING else "use"
        return ConfigError(
            setting,
            f"cannot {verb} {uri!r} at {endpoint}: {detail}. Check the bucket and prefix, and the workers' "
            "credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY from a Secret through spec.template, or a "
            "service account's web identity)",
        )
    return RetryableError(f"{setting}: the object store at {endpoint} failed for {uri!r}: {detail}")


@contextmanager
def reading(uri: str, setting: str = _SETTING) -> Iterator[None]:
    """Around a request for `uri`: the object store's refusal becomes the trainer error it means."""
    try:
        yield
    except OSError as e:
        raise failure(uri, e, os.environ, setting) from None


def _matches(key: str, pattern: str) -> bool:
    """glob.glob's rule for a key: `*`, `?` and `[...]` match within one path segment."""
    keys, patterns = key.split("/"), pattern.split("/")
    return len(keys) == len(patterns) and all(
        fnmatch.fnmatchcase(k, p) for k, p in zip(keys, patterns, strict=True)
    )


def _listing(location: S3Object, recursive: bool) -> list[S3Object]:
    """The objects under a prefix; a Delta table's directory exits 2 (see data.DELTA_LOG)."""
    from pyarrow import fs

    selector = fs.FileSelector(location.path, recursive=recursive)
    with reading(str(location)):
        infos = filesystem().get_file_info(selector)
    if any(info.base_name == DELTA_LOG and info.type == fs.FileType.Directory for info in infos):
        raise ConfigError(_SETTING, delta_table(str(location)))
    return [
        S3Object(location.bucket, info.path.split("/", 1)[1])
        for info in infos
        if info.type == fs.FileType.File
    ]


DELTA_LOG = "_delta_log"


def delta_table(where: str) -> str:
    """Why a Delta table's directory is refused: it keeps files its log has removed, which a listing reads."""
    return (
        f"{where!r} is a Delta table ({DELTA_LOG}/): its directory also holds the parquet files of older "
        "versions, which reading every file would train on; write the version you want as plain parquet "
        "(spark.read.format('delta').load(...).write.parquet(...)) and give that path"
    )


def list_files(data_path: str, dataset: str) -> list[S3Object]:
    """The objects an s3:// dataPath names, as data.table_files does for paths: an object; a prefix's
    `*.<dataset>` objects directly under it (Spark's layout: `_SUCCESS` and hidden names skipped); or a glob.
    Sorted by key. Only names are listed here: each worker opens only its own objects."""
    from pyarrow import fs

    location = S3Object.parse(data_path)
    if GLOB.search(location.key):
        fixed = GLOB.split(location.key, 1)[0].rsplit("/", 1)
        base = S3Object(location.bucket, fixed[0] if len(fixed) == 2 else "")
        found = [
            o
            for o in _listing(base, recursive=True)
            if _matches(o.key, location.key) and not o.name.startswith(".")
        ]
        where = f"{data_path!r} matches no objects"
    else:
        info = None
        if location.key and not location.key.endswith("/"):
            with reading(data_path):
                info = filesystem().get_file_info(location.path)
            if info.type == fs.FileType.File:
                return [location]
            if info.type == fs.FileType.NotFound:
                raise ConfigError(_SETTING, f"{data_path!r}: no such object or prefix")
        found = [
            o
            for o in _listing(location, recursive=False)
            if o.name.endswith(f".{dataset}") and not o.name.startswith(("_", "."))
        ]
        where = f"prefix {data_path!r} holds no *.{dataset} objects"
    if not found:
        raise ConfigError(_SETTING, where)
    return sorted(found)


@contextmanager
def opened(obj: S3Object, dataset: str) -> Iterator[Any]:
    """A pyarrow file of the object: random access for parquet (ranged reads of the footer and row groups),
    a sequential stream for csv."""
    with reading(str(obj)):
        handle = (
            filesystem().open_input_file(obj.path)
            if dataset == "parquet"
            else filesystem().open_input_stream(obj.path)
        )
    try:
        yield handle
    finally:
        handle.close()
