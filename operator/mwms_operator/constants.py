"""Transitional: the shared names now live in mwms_contract.names (issue 20 moves every import there)."""

from mwms_contract.names import *  # noqa: F403
