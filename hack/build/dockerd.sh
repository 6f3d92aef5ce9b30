#!/usr/bin/env bash
# dockerd.sh start|stop: a Docker engine for kind on a machine without one running (no systemd as PID 1 here):
# `start` runs Debian's dockerd (package docker.io) in the background unless `docker info` already answers;
# `stop` ends the one `start` started. Its images (the kind node image, loaded once) live in
# $CACHE_ROOT/docker/data, so they last from one run to the next.
#   --iptables=false --ip-forward=false: Docker's firewall rules would set the host's FORWARD policy to DROP,
#     which br_netfilter applies to the real node's bridged pods too; kind needs neither (its nodes share one
#     bridge, and the API server's port is published by docker-proxy).
#   --exec-opt native.cgroupdriver=cgroupfs: systemd does not manage this host's cgroups.
#   runc-bounded (beside this script) as the default runtime where this process lacks a capability that a
#     privileged container asks for (CAP_SYS_RESOURCE here): runc would fail with "unable to apply caps".
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck disable=SC1091  # cache.sh is checked on its own
source "$here/cache.sh"  # CACHE_ROOT
DIR="$CACHE_ROOT/docker"
PIDFILE="$DIR/dockerd.pid"

log() { echo "dockerd: $*" >&2; }

case "${1:-}" in
  start)
    if docker info >/dev/null 2>&1; then
      exit 0
    fi
    command -v dockerd >/dev/null || { log "dockerd is required (apt-get install docker.io)"; exit 1; }
    mkdir -p "$DIR/data"
    args=(--data-root "$DIR/data" --storage-driver overlay2 --exec-opt native.cgroupdriver=cgroupfs
      --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false)
    bounding=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
    if [ "$((16#$bounding))" -ne "$(( (1 << ($(cat /proc/sys/kernel/cap_last_cap) + 1)) - 1 ))" ]; then
      log "this process lacks capabilities (bounding set $bounding): privileged containers run through runc-bounded"
      args+=(--add-runtime "runc-bounded=$here/runc-bounded" --default-runtime runc-bounded)
    fi
    setsid dockerd "${args[@]}" >"$DIR/dockerd.log" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    for _ in $(seq 60); do
      docker info >/dev/null 2>&1 && { log "started (pid $(cat "$PIDFILE"), log $DIR/dockerd.log)"; exit 0; }
      kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break
      sleep 0.5
    done
    log "dockerd did not answer; its log ($DIR/dockerd.log) ends:"
    tail -20 "$DIR/dockerd.log" >&2
    exit 1
    ;;
  stop)
    [ -s "$PIDFILE" ] || exit 0
    pid=$(cat "$PIDFILE")
    if kill "$pid" 2>/dev/null; then
      while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
    fi
    rm -f "$PIDFILE"
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
