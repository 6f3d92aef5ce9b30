"""The test kit: what every tier and the bench share (the TrainJob factory, fake API servers, the MLflow, S3
and auth-proxy servers, the operator harness, the integration tier's shards), imported as a package."""
