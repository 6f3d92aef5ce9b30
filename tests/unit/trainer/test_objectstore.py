"""objectstore.py without a server: which dataPath URIs are read and which refused, the S3 settings taken from
the standard AWS variables, glob matching on keys, and failures that name the URI but never a credential."""

from __future__ import annotations

import json

import pytest

from mwms_trainer import objectstore
from mwms_trainer.errors import ConfigError, RetryableError
from mwms_trainer.objectstore import S3Object
from mwms_trainer.trainer_config import parse_trainer_config


@pytest.mark.parametrize(
    ("uri", "bucket", "key"),
    [
        ("s3://data/table/", "data", "table/"),
        ("s3://data/table/part-0.parquet", "data", "table/part-0.parquet"),
        ("s3://data", "data", ""),
        ("S3://data/t/*.csv", "data", "t/*.csv"),
    ],
)
def test_s3_uris_name_a_bucket_and_a_key(uri, bucket, key):
    assert S3Object.parse(uri) == S3Object(bucket, key)


@pytest.mark.parametrize(
    ("uri", "text"),
    [
        ("gs://bucket/data/", "gs:// is not supported"),
        ("abfs://container@account.dfs.core.windows.net/data", "abfs:// is not supported"),
        ("hdfs://namenode/data", "hdfs:// is not supported"),
        ("http://example.com/data.csv", "http:// is not supported"),
        ("s3a://bucket/data/", "s3a:// and s3n:// are s3:// here"),
        ("s3://AKIAEXAMPLE:secret@bucket/data/", "credentials in the URI are refused"),
        ("s3:///data/", "names no bucket"),
    ],
)
def test_other_schemes_and_credentials_in_the_uri_are_refused_at_once(uri, text):
    raw = json.dumps({"dataset": "parquet", "dataPath": uri})
    with pytest.raises(ConfigError) as raised:
        parse_trainer_config(raw)
    assert raised.value.setting == "MWMS_TRAINER_CONFIG.dataPath"
    assert text in str(raised.value)
    assert "secret" not in str(raised.value)


def test_paths_in_the_worker_are_not_uris():
    for path in ("/data/table", "relative/part-*.csv", "C:/x", "/data/a://b"):
        objectstore.check_data_path(path)
        assert not objectstore.is_uri(path)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, {"max_attempts": 8}),
        (
            {"AWS_ENDPOINT_URL": "http://10.0.0.1:8333", "AWS_REGION": "eu-west-1", "AWS_MAX_ATTEMPTS": "3"},
            {
                "endpoint_override": "10.0.0.1:8333",
                "scheme": "http",
                "region": "eu-west-1",
                "max_attempts": 3,
            },
        ),
        (  # the S3-specific variable wins, as in boto3; AWS_DEFAULT_REGION when AWS_REGION is unset
            {
                "AWS_ENDPOINT_URL": "http://other:1",
                "AWS_ENDPOINT_URL_S3": "https://minio.storage:9000",
                "AWS_DEFAULT_REGION": "us-west-2",
            },
            {
                "endpoint_override": "minio.storage:9000",
                "scheme": "https",
                "region": "us-west-2",
                "max_attempts": 8,
            },
        ),
        (
            {"AWS_ENDPOINT_URL_S3": "s3.example.com"},
            {"endpoint_override": "s3.example.com", "scheme": "https", "max_attempts": 8},
        ),
    ],
)
def test_endpoint_region_and_retries_come_from_the_standard_aws_variables(env, expected):
    assert objectstore.s3_options(env) == expected


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"AWS_ENDPOINT_URL": "ftp://host:21"}, "AWS_ENDPOINT_URL"),
        ({"AWS_ENDPOINT_URL_S3": "http://key:secret@host:9000"}, "AWS_ENDPOINT_URL_S3"),
        ({"AWS_MAX_ATTEMPTS": "zero"}, "AWS_MAX_ATTEMPTS"),
        ({"AWS_MAX_ATTEMPTS": "0"}, "AWS_MAX_ATTEMPTS"),
    ],
)
def test_bad_aws_settings_exit_2_naming_the_variable(env, setting):
    with pytest.raises(ConfigError) as raised:
        objectstore.s3_options(env)
    assert raised.value.setting == setting
    assert "secret" not in str(raised.value)


@pytest.mark.parametrize(
    ("key", "pattern", "matches"),
    [
        ("t/part-0.csv", "t/part-*.csv", True),
        ("t/sub/part-0.csv", "t/part-*.csv", False),  # `*` stays within one segment, as glob.glob's
        ("t/sub/part-0.csv", "t/*/part-?.csv", True),
        ("t/part-10.csv", "t/part-?.csv", False),
        ("t/part-1.csv", "t/part-[01].csv", True),
    ],
)
def test_globs_match_keys_segment_by_segment(key, pattern, matches):
    assert objectstore._matches(key, pattern) is matches


ENV = {
    "AWS_ACCESS_KEY_ID": "AKIAWRONGKEY",
    "AWS_SECRET_ACCESS_KEY": "s3cr3t-value",
    "AWS_ENDPOINT_URL": "http://h:1",
}


@pytest.mark.parametrize(
    "message",
    [
        "When listing objects under key 'p' in bucket 'b': AWS Error ACCESS_DENIED during ListObjectsV2 "
        "operation: Access Denied for AKIAWRONGKEY",
        "AWS Error INVALID_ACCESS_KEY_ID during HeadObject operation: key AKIAWRONGKEY s3cr3t-value",
        "When getting information for bucket 'nope': AWS Error NO_SUCH_BUCKET during HeadBucket operation",
        "When reading information for key 'x' in bucket 'b': AWS Error UNKNOWN (HTTP status 403) during "
        "HeadObject operation: No response body.",
    ],
)
def test_a_refusal_exits_2_naming_the_uri_and_never_the_credentials(message):
    error = objectstore.failure("s3://b/p/", OSError(message), ENV)
    assert isinstance(error, ConfigError)
    assert "s3://b/p/" in str(error) and "http://h:1" in str(error)
    assert "AKIAWRONGKEY" not in str(error) and "s3cr3t-value" not in str(error)


def test_an_object_store_failing_after_the_retries_is_retryable():
    error = objectstore.failure(
        "s3://b/p/", OSError("AWS Error SLOW_DOWN during GetObject operation: Reduce your request rate"), ENV
    )
    assert isinstance(error, RetryableError) and "s3://b/p/" in str(error)


def test_a_delta_tables_directory_is_refused_not_read_with_its_removed_files(tmp_path):
    from mwms_trainer.input import readers

    (tmp_path / "events" / "_delta_log").mkdir(parents=True)
    (tmp_path / "events" / "part-00000.snappy.parquet").write_bytes(b"PAR1")
    with pytest.raises(ConfigError) as raised:
        readers.table_files(str(tmp_path / "events"), "parquet")
    assert "is a Delta table (_delta_log/)" in str(raised.value) and "write.parquet" in str(raised.value)
