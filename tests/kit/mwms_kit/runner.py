"""`make test`'s runner (hack/ci/run-tests.py): the test tiers in two lanes side by side, then one table of
every tier.

The `cluster` lane runs the tiers on a real cluster (integration, node, e2e, kind, multikueue: they wait on
pods, and one real node runs per machine); the `compute` lane runs the CPU-bound tiers (unit, images, tf,
scale, static) at a lower CPU priority. The Go builds a few tests need (and the kind node image) and the
MLflow-S3 environment are built meanwhile; their tests wait on the build's lock. The integration tier runs in
shards on one shared cluster (mwms_kit.shards), then its `exclusive` tests alone; `--shards 1` runs it as one
session.

Each pytest session's output is streamed with its name in front and kept in build/test-results/<name>.log,
its tiers' counts in <name>.json (mwms_kit.tiers). Exit status 0 only if every session and build passed; a
session whose thread crashed counts as failed. Extra arguments go to every pytest session (`-x`, `-k name`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from pathlib import Path

from mwms_kit.shards import SHARDS
from mwms_kit.tiers import table, under_ci

REPO = Path(__file__).resolve().parents[3]
RESULTS = REPO / "build" / "test-results"
TEMP_ROOT = Path("/tmp") / f"mwms-{hashlib.sha1(str(REPO).encode()).hexdigest()[:6]}"  # one per checkout

LANES = ("cluster", "compute")
CLUSTER_NICE, COMPUTE_NICE = 0, 10
# Each starts its own cluster(s), after the shared one stopped (one real node at a time; kind's node is a
# container of Docker's).
AFTER_INTEGRATION = ["tests/node", "tests/e2e", "tests/kind", "tests/multikueue"]
# The tests that wait on a background build (the S3 server, KWOK, promtool) run after all these, in this order
COMPUTE_TIERS = ["tests/unit", "tests/images", "tests/tf", "tests/scale", "tests/static"]
# make targets, two at a time in this order: Kueue, the longest, beside the S3 server that three tiers' tests
# wait for, then the rest. Their tests run last in their session (the `waits_for_build` marker).
BACKGROUND_BUILDS = [
    "versitygw",
    "kueue",
    "mlflow-s3",
    "kwok",
    "promtool",
    "oci-tools",
    "previous",
    "kind-node",
]
SHARED_CLUSTER_START_SECONDS = 1200  # a cold node unpacks the images once: minutes on 2 cores
CRASHED = 3  # the exit code of a session or lane whose thread raised (as pytest's "internal error")
print_lock = threading.Lock()


def say(line: str) -> None:
    with print_lock:
        print(line, flush=True)


def run_pytest(name: str, paths: list[str], pytest_args: list[str], nice: int, env: dict[str, str]) -> int:
    """One pytest session, its output streamed with `[name]` in front and kept in <name>.log."""
    env = {**os.environ, **env, "MWMS_TIER_REPORT": str(RESULTS / f"{name}.json"), "PYTHONUNBUFFERED": "1"}
    # A temporary folder of its own: pytest prunes its numbered ones from whichever session starts next, which
    # may run beside this one. Short: sockets live below it.
    basetemp = TEMP_ROOT / name.rsplit("-", 1)[-1]
    junit = RESULTS / f"{name}.xml"  # each test's time (mwms_kit/shards.py's WEIGHTS come from these)
    argv = ["nice", "-n", str(nice), sys.executable, "-m", "pytest", f"--basetemp={basetemp}"]
    argv += [f"--junitxml={junit}", *paths, *pytest_args]
    say(f"[{name}] {' '.join(argv[3:])}")
    started = time.monotonic()
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    with (RESULTS / f"{name}.log").open("wb") as log:
        for raw in process.stdout:
            log.write(raw)
            log.flush()
            say(f"[{name}] {raw.decode(errors='replace').rstrip()}")
    code = process.wait()
    say(f"[{name}] ended with exit {code} after {(time.monotonic() - started) / 60:.1f} min")
    return code


def side_by_side(bodies: dict[str, Callable[[], int]]) -> dict[str, int]:
    """Run each body in a thread of its own; name -> its exit code. A body that raised is CRASHED (failed),
    never passed."""
    codes = dict.fromkeys(bodies, CRASHED)

    def run(name: str, body: Callable[[], int]) -> None:
        try:
            codes[name] = body()
        except Exception:
            say(f"[{name}] the runner's thread crashed; counted as failed:\n{traceback.format_exc()}")

    threads = [threading.Thread(target=run, args=item, name=item[0]) for item in bodies.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return codes


def start_shared_cluster() -> tuple[subprocess.Popen[bytes], Path | None]:
    """The integration tier's shared cluster (mwms_kit.shards serve); its ready file, or None with the reason
    printed when it did not come up."""
    ready = TEMP_ROOT / "shared-cluster.json"  # beside its state, not among the tier reports in RESULTS
    ready.parent.mkdir(parents=True, exist_ok=True)
    ready.unlink(missing_ok=True)
    argv = [
        sys.executable, "-m", "mwms_kit.shards", "serve",
        "--state-dir", str(TEMP_ROOT / "shared"),  # short: the node's sockets live below it
        "--subnet-index", os.environ.get("MWMS_TEST_SUBNET_INDEX", "0"),
        "--ready-file", str(ready),
    ]  # fmt: skip
    log_path = RESULTS / "shared-cluster.log"
    say(f"[cluster] starting the integration tier's shared cluster (log: {log_path.relative_to(REPO)})")
    owner = subprocess.Popen(argv, cwd=REPO, stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + SHARED_CLUSTER_START_SECONDS
    while not ready.exists() and owner.poll() is None and time.monotonic() < deadline:
        time.sleep(1)
    if ready.exists():
        return owner, ready
    stop(owner)  # one that is still starting would hold the node the unsharded run needs
    say(f"[cluster] the shared cluster did not come up; the end of its log:\n{log_path.read_text()[-3000:]}")
    return owner, None


def stop(owner: subprocess.Popen[bytes]) -> None:
    if owner.poll() is None:
        owner.send_signal(signal.SIGTERM)
        try:
            owner.wait(timeout=300)
        except subprocess.TimeoutExpired:
            owner.kill()
            owner.wait()


def integration_tier(pytest_args: list[str]) -> int:
    """The shards side by side on one shared cluster, then the `exclusive` tests alone on it."""
    owner, ready = start_shared_cluster()
    try:
        if ready is None:  # the tier's own fixtures then start (or, outside CI, skip) with the reason
            say("[cluster] running the integration tier unsharded instead")
            return run_pytest("integration", ["tests/integration"], pytest_args, CLUSTER_NICE, {})
        shared = {"MWMS_TEST_CLUSTER": str(ready)}

        def shard(name: str) -> Callable[[], int]:
            args = ["-m", "not exclusive", *pytest_args]
            env = {**shared, "MWMS_TEST_SHARD": name}
            return lambda: run_pytest(f"integration-{name}", ["tests/integration"], args, CLUSTER_NICE, env)

        codes = list(side_by_side({f"integration-{name}": shard(name) for name in SHARDS}).values())
        exclusive = ["-m", "exclusive", *pytest_args]
        codes.append(
            run_pytest("integration-exclusive", ["tests/integration"], exclusive, CLUSTER_NICE, shared)
        )
        return first_failure(codes)
    finally:
        stop(owner)


def cluster_lane(pytest_args: list[str], shards: int) -> int:
    if shards == 1:
        return run_pytest("cluster", ["tests/integration", *AFTER_INTEGRATION], pytest_args, CLUSTER_NICE, {})
    integration = integration_tier(pytest_args)
    return first_failure(
        [integration, run_pytest("cluster", AFTER_INTEGRATION, pytest_args, CLUSTER_NICE, {})]
    )


def compute_lane(pytest_args: list[str]) -> int:
    return run_pytest("compute", COMPUTE_TIERS, pytest_args, COMPUTE_NICE, {})


def first_failure(codes: list[int]) -> int:
    return next((code for code in codes if code not in passing_codes()), 0)


def passing_codes() -> set[int]:
    # pytest's 5 is "no test collected": fine for a run that `-k` emptied, a failure under CI.
    return {0} if under_ci() else {0, 5}


def start_builds() -> subprocess.Popen[bytes]:
    log = (RESULTS / "builds.log").open("wb")
    argv = ["nice", "-n", str(COMPUTE_NICE), "make", "--no-print-directory", "-j2", *BACKGROUND_BUILDS]
    say(f"[builds] {' '.join(argv[3:])} (log: build/test-results/builds.log)")
    return subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)


def merged_tiers() -> dict[str, dict[str, float]]:
    """Every session's tier counts added up (the integration tier comes from several sessions)."""
    tiers: dict[str, dict[str, float]] = {}
    for report in sorted(RESULTS.glob("*.json")):
        for tier, count in json.loads(report.read_text()).items():
            if tier not in tiers:
                tiers[tier] = dict(count)
                continue
            total = tiers[tier]
            for key in ("passed", "failed", "errors", "skipped"):
                total[key] += count[key]
            total["started"] = min(total["started"], count["started"])
            total["ended"] = max(total["ended"], count["ended"])
    return tiers


def failed_tests(since: float) -> list[str]:
    """One line per test that failed or errored in this run's sessions (their JUnit files), with the first
    line of its message: the end of CI's log then names them without the whole log."""
    lines = []
    wall_started = time.time() - (time.monotonic() - since)
    for junit in sorted(RESULTS.glob("*.xml")):
        if junit.stat().st_mtime < wall_started:
            continue  # a session of an earlier run
        try:
            cases = list(ElementTree.parse(junit).iter("testcase"))
        except ElementTree.ParseError as error:  # a session killed while writing it
            lines.append(f"UNREADABLE {junit.relative_to(REPO)} ({error}): see {junit.stem}.log")
            continue
        for case in cases:
            for outcome in ("failure", "error"):
                found = case.find(outcome)
                if found is None:
                    continue
                message = (found.get("message") or "").strip().splitlines()[:1]
                name = f"{case.get('classname', '')}::{case.get('name', '')}"
                lines.append(f"{outcome.upper()} {name} ({junit.stem}): {''.join(message)[:300]}")
    return lines


def parser() -> argparse.ArgumentParser:
    made = argparse.ArgumentParser(
        prog="hack/ci/run-tests.py",
        description="make test's runner: the tiers in two lanes side by side, then one table of every tier",
        epilog="Other arguments go to every pytest session (e.g. -x, -k NAME).",
    )
    made.add_argument("--lanes", default=",".join(LANES), help="comma-separated lanes (default: all)")
    made.add_argument(
        "--shards", type=int, choices=[1, len(SHARDS)], default=len(SHARDS),
        help="the integration tier's shards on one shared cluster (default: %(default)s)",
    )  # fmt: skip
    made.add_argument("--no-builds", action="store_true", help=f"do not start {', '.join(BACKGROUND_BUILDS)}")
    return made


def main(argv: list[str] | None = None) -> int:
    args, pytest_args = parser().parse_known_args(argv)
    lanes = [lane for lane in args.lanes.split(",") if lane]
    unknown = set(lanes) - set(LANES)
    if unknown:
        parser().error(f"unknown lane(s) {sorted(unknown)}; lanes: {', '.join(LANES)}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    for report in RESULTS.glob("*.json"):
        report.unlink()

    started = time.monotonic()
    builds = None if args.no_builds else start_builds()
    bodies = {
        "cluster": lambda: cluster_lane(pytest_args, args.shards),
        "compute": lambda: compute_lane(pytest_args),
    }
    walls: dict[str, float] = {}

    def timed(lane: str) -> Callable[[], int]:
        def body() -> int:
            try:
                return bodies[lane]()
            finally:
                walls[lane] = time.monotonic() - started
                say(f"[{lane}] lane ended after {walls[lane] / 60:.1f} min")

        return body

    codes = side_by_side({lane: timed(lane) for lane in lanes})
    build_code = builds.wait() if builds else 0
    if build_code != 0:
        say(f"[builds] failed ({build_code}); the end of build/test-results/builds.log:")
        say((RESULTS / "builds.log").read_text(errors="replace")[-4000:])

    say("\n==== tiers (both lanes) ====")
    for line in table(merged_tiers()):
        say(line)
    for lane in lanes:
        say(f"lane {lane:<8} exit {codes[lane]}  {walls[lane] / 60:.1f} min")
    say(f"all lanes: {(time.monotonic() - started) / 60:.1f} min")
    for line in failed_tests(since=started):
        say(line)
    failed = [lane for lane in lanes if codes[lane] not in passing_codes()]
    if failed or build_code != 0:
        say(f"FAILED: {', '.join(failed + (['builds'] if build_code else []))}")
        return 1
    return 0
