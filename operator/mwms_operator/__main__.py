"""`python -m mwms_operator`: read the settings once, register the handlers, run kopf."""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
from typing import Any

from mwms_operator.config import ConfigError, OperatorConfig

# Never used by the operator, but kopf imports the `kubernetes` client whenever it is installed (for
# isinstance checks on its models and a login the operator replaces with its own): ~30 MiB with pydantic.
UNUSED_CLIENTS = ("kubernetes", "kubernetes_asyncio", "pykube")


class _QuietTimers(logging.Filter):
    """kopf logs each successful handler run at INFO: one line per watch event of every pod, noise."""

    NOISE = re.compile(r"Handler '(trainjob|pod|service)' succeeded\.")

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.INFO and self.NOISE.fullmatch(record.getMessage()))


def run_options(config: OperatorConfig) -> dict[str, Any]:
    """kopf.run's arguments: all namespaces, or only MWMS_WATCH_NAMESPACES (names or globs)."""
    return {
        "standalone": True,  # one replica with the Recreate strategy: no peering needed
        "clusterwide": not config.watch_namespaces,
        "namespaces": list(config.watch_namespaces),
        "liveness_endpoint": f"http://0.0.0.0:{config.health_port}/healthz",
        # kopf's default identity asks the passwd database for our user name, which fails for a uid the image
        # does not list (e.g. runAsUser 65532 on a slim base image).
        "identity": f"mwms-operator@{socket.gethostname()}",
    }


def keep_out_unused_clients() -> None:
    """Before kopf is imported: the operator's memory must not depend on what else shares its environment
    (a developer's venv has the `kubernetes` client for the tests; the operator image does not)."""
    for name in UNUSED_CLIENTS:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None: `import name` raises ImportError


def main() -> None:
    keep_out_unused_clients()
    import kopf

    from mwms_operator import handlers

    try:
        config = OperatorConfig.from_env(os.environ)
    except ConfigError as error:
        print(f"mwms-operator: invalid setting: {error}", file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_QuietTimers())
    if config.log_level != "DEBUG":  # one access line per liveness probe (every 10 s) buries what matters
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    registry = kopf.OperatorRegistry()
    handlers.register(registry, config)
    logging.getLogger("mwms_operator").info("mwms-operator starting: %s", config)
    kopf.run(registry=registry, memo=kopf.Memo(), **run_options(config))


if __name__ == "__main__":
    main()
