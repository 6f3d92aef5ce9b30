"""`python -m mwms_trainer`: what a worker pod runs.

Exit codes: 0 ok, 2 invalid config, 75 retryable, 1 anything else; 128 + N when ended by signal N (143 for
SIGTERM, also as a container's PID 1: see pid1.py), which the operator retries like 75.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mwms_contract import names, termination
from mwms_trainer import pid1, tfenv, trainer_config, worker_log
from mwms_trainer.errors import TrainerError


def main(environ: Mapping[str, str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s %(message)s")
    log = logging.getLogger("mwms_trainer")
    logging.getLogger("tensorflow").setLevel(logging.WARNING)  # per-step collective chatter at INFO
    environ = os.environ if environ is None else environ
    path = environ.get(names.ENV_TERMINATION_LOG, "").strip() or names.TERMINATION_MESSAGE_PATH
    # First, before TensorFlow: as PID 1 this process becomes a small init and the trainer its child; the
    # parent also keeps the trainer's log and puts it into the job's MLflow run at the end.
    code = pid1.fork_unless_pid1_is_taken(
        lambda code: termination.write(
            path, termination.failure(termination.RETRYABLE, f"stopped by {signal.Signals(code - 128).name}")
        ),
        worker_log.Capture(environ) if worker_log.wanted(environ) else None,
    )
    if code is not None:
        return code
    if environ.get(names.ENV_CODE_ENTRYPOINT, "").strip():
        return run_user_code(environ, path)  # the user's code imports TensorFlow when and how it wants
    # Seconds of work that the config, the data and the peers do not wait for (after the fork: never fork
    # a process with an import half done in another thread).
    tfenv.import_in_background()
    try:
        settings = trainer_config.load(environ)
        log.info(
            "worker %d of %d (%s), job %s/%s uid %s, restart %d",
            settings.cluster.rank,
            settings.cluster.num_workers,
            "chief" if settings.cluster.is_chief else "worker",
            settings.job_namespace,
            settings.job_name,
            settings.job_uid,
            settings.restart_count,
        )
        from mwms_trainer import train  # after the fork, as usercode below: the PID-1 parent loads no numpy

        summary = train.run(settings, note=lambda message: termination.write(path, message))
    except TrainerError as e:
        return trainer_error(e, path)
    except Exception as e:
        traceback.print_exc()
        termination.write(path, termination.failure(termination.FAILED, f"{type(e).__name__}: {e}"))
        return names.EXIT_FAILURE
    return success(summary, path)


def trainer_error(error: TrainerError, path: str) -> int:
    """A TrainerError's exit code, its kind and message on one line as the termination message."""
    message = termination.failure(termination.failure_kind(error.exit_code), str(error))
    logging.getLogger("mwms_trainer").error("%s", message)
    termination.write(path, message)
    return error.exit_code


def success(summary: Mapping[str, Any], path: str) -> int:
    termination.write(path, summary)
    print(json.dumps(summary), flush=True)
    return names.EXIT_SUCCESS


def run_user_code(environ: Mapping[str, str], path: str) -> int:
    """spec.code: the user's entrypoint through the runner. A user error is permanent (exit 1, not
    retried) and its last traceback line is the termination message, so it reaches the Failed condition."""
    from mwms_trainer import usercode  # after the fork (see main)

    code_dir = Path(environ.get(names.ENV_CODE_DIR) or names.CODE_MOUNT_PATH)
    try:
        summary = usercode.run(environ)
    except TrainerError as e:
        return trainer_error(e, path)
    except SystemExit as e:  # a script's sys.exit(n): n is its verdict (0 or None: success)
        if e.code in (None, 0):
            termination.write(path, {})
            return names.EXIT_SUCCESS
        code = e.code if isinstance(e.code, int) and 0 < e.code < 128 else names.EXIT_FAILURE
        exited = f"the entrypoint exited with {e.code!r}"
        termination.write(path, termination.failure(termination.FAILED, exited))
        return code
    except Exception as e:  # the user's code: syntax errors and exceptions alike
        traceback.print_exc()
        termination.write(
            path, termination.failure(termination.FAILED, usercode.last_traceback_line(e, code_dir))
        )
        return names.EXIT_FAILURE
    return success(summary, path)


if __name__ == "__main__":
    sys.exit(main())
