"""The test kit: what every tier and the bench share, imported as a package. The TrainJob factory
(trainjobs), the in-memory fakes of the operator's and the client's API (fake_kube, fake_job_client), a fake
HTTP server for the API server and MLflow (fake_api_server), the real MLflow, S3 and auth-proxy servers,
waits typed by the contract (waits), the operator harness, and the test runner's parts: tiers (each test's
tier is its folder), shards and runner (`make test`)."""
