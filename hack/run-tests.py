"""`make test`'s runner: the test tiers in two lanes side by side, then one table of every tier.

Why two lanes: the tiers on a real cluster (integration, node, e2e) mostly wait on pods and API servers and
there is one real node per machine, so they run one after another in the `cluster` lane; the CPU-bound tiers
(unit, static, images, tf) need no cluster and fill the idle cores in the `compute` lane, at a lower CPU
priority so the cluster lane's timing stays as when it runs alone. The Go builds only a few tests need
(Kueue, SeaweedFS, KWOK, promtool) and the MLflow-with-boto3 environment are built meanwhile, at the
compute lane's priority (its tf tier waits for SeaweedFS); those tests wait on the build's lock
(hack/build-*.sh), not on a guess.

Each lane's output is streamed with its name in front and kept in build/test-results/<lane>.log; each writes
its tiers' counts (tests/support/tiers.py) to build/test-results/<lane>.json. Exit status: 0 only if every
lane and build passed. Extra arguments go to both pytest runs (e.g. `-x`, `-k name`).
`python hack/run-tests.py --lanes cluster` runs one lane."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "build" / "test-results"
sys.path.insert(0, str(REPO / "tests"))
from support.tiers import table, under_ci  # noqa: E402  (tests/ is not a package; pytest puts it on sys.path too)

# lane -> (niceness, test folders in the order they run)
LANES: dict[str, tuple[int, list[str]]] = {
    "cluster": (0, ["tests/integration", "tests/node", "tests/e2e"]),
    # static last: its promtool test waits for the last background build; scale (KWOK's fake nodes beside a
    # control plane of its own, no real node) waits for kwok's, the one before
    "compute": (10, ["tests/unit", "tests/images", "tests/tf", "tests/scale", "tests/static"]),
}
# make targets, built one after another in this order; their tests wait on the build lock
BACKGROUND_BUILDS = ["kueue", "mlflow-s3", "seaweedfs", "kwok", "promtool"]
print_lock = threading.Lock()


def say(line: str) -> None:
    with print_lock:
        print(line, flush=True)


def start_lane(name: str, pytest_args: list[str]) -> tuple[subprocess.Popen[bytes], threading.Thread]:
    niceness, folders = LANES[name]
    env = {**os.environ, "MWMS_TIER_REPORT": str(RESULTS / f"{name}.json"), "PYTHONUNBUFFERED": "1"}
    argv = ["nice", "-n", str(niceness), sys.executable, "-m", "pytest", *folders, *pytest_args]
    say(f"[{name}] {' '.join(argv[3:])}")
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    thread = threading.Thread(target=stream, args=(name, process), daemon=True)
    thread.start()
    return process, thread


def stream(name: str, process: subprocess.Popen[bytes]) -> None:
    """Copy the lane's output to its log and to ours, line by line, with the lane's name in front."""
    assert process.stdout is not None
    with (RESULTS / f"{name}.log").open("wb") as log:
        for raw in process.stdout:
            log.write(raw)
            log.flush()
            say(f"[{name}] {raw.decode(errors='replace').rstrip()}")


def start_builds() -> subprocess.Popen[bytes]:
    log = (RESULTS / "builds.log").open("wb")
    argv = ["nice", "-n", "10", "make", "--no-print-directory", *BACKGROUND_BUILDS]
    say(f"[builds] {' '.join(argv[3:])} (log: build/test-results/builds.log)")
    return subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lanes", default=",".join(LANES), help="comma-separated lanes (default: all)")
    parser.add_argument(
        "--no-builds", action="store_true", help=f"do not start {', '.join(BACKGROUND_BUILDS)}"
    )
    args, pytest_args = parser.parse_known_args()
    lanes = [lane for lane in args.lanes.split(",") if lane]
    unknown = set(lanes) - set(LANES)
    if unknown:
        parser.error(f"unknown lane(s) {sorted(unknown)}; lanes: {', '.join(LANES)}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    for lane in lanes:
        (RESULTS / f"{lane}.json").unlink(missing_ok=True)

    started = time.monotonic()
    builds = None if args.no_builds else start_builds()
    running = {lane: start_lane(lane, pytest_args) for lane in lanes}
    codes, walls = {}, {}
    while running:
        for lane, (process, thread) in list(running.items()):
            if process.poll() is not None:
                thread.join()
                codes[lane], walls[lane] = process.returncode, time.monotonic() - started
                say(f"[{lane}] lane ended with exit {process.returncode} after {walls[lane] / 60:.1f} min")
                del running[lane]
        time.sleep(1)
    build_code = builds.wait() if builds else 0
    if build_code != 0:
        say(f"[builds] failed ({build_code}); the end of build/test-results/builds.log:")
        say((RESULTS / "builds.log").read_text(errors="replace")[-4000:])

    tiers: dict[str, dict[str, float]] = {}
    for lane in lanes:
        report = RESULTS / f"{lane}.json"
        if report.exists():
            tiers.update(json.loads(report.read_text()))
        else:
            say(f"[{lane}] wrote no tier report (pytest did not get to the end of its session)")
    say("\n==== tiers (both lanes) ====")
    for line in table(tiers):
        say(line)
    for lane in lanes:
        say(f"lane {lane:<8} exit {codes[lane]}  {walls[lane] / 60:.1f} min")
    say(f"all lanes: {(time.monotonic() - started) / 60:.1f} min")
    # pytest's 5 is "no test collected": fine for a lane that `-k` emptied, a failure under CI.
    ok = {0} if under_ci() else {0, 5}
    failed = [lane for lane in lanes if codes[lane] not in ok]
    if failed or build_code != 0:
        say(f"FAILED: {', '.join(failed + (['builds'] if build_code else []))}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
