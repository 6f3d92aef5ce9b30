"""Transitional: TF_CONFIG and host naming now live in mwms_contract.tf_config."""

from mwms_contract.tf_config import tf_config, worker_hosts  # noqa: F401
