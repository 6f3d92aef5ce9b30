#!/usr/bin/env bash
# kind-e2e.sh [--print] [cluster] [job]: README.md's "On a real cluster" section on kind, run command by
# command as written, so what users read is what runs: the users' workflow (.github/workflows/e2e-kind.yml)
# and our kind tier (tests/kind/) both run it. `cluster` is the section's first block (make images, kind
# create cluster, kind load image-archive), `job` its Helm block (helm install, the seed sample, the mwms
# verbs); none named: both. --print prints their commands instead of running them. KIND_NODE_IMAGE picks the
# node image (README's default: the kindest/node of kind's release). `kind delete cluster --name mwms` ends it.
# Needs kind, helm, kubectl and mwms on PATH.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

print=0
[ "${1:-}" != --print ] || { print=1; shift; }
[ $# -gt 0 ] || set -- cluster job

# The commands of one block of README's "## On a real cluster", one a line, comments dropped.
block_commands() {
  python3 - "$1" <<'PY'
import re, sys
readme = open("README.md").read()
section = re.search(r"^## On a real cluster\n(.*?)(?=^## |\Z)", readme, re.S | re.M)
assert section, "README.md has no '## On a real cluster' section"
parts = re.split(r"^### (.*)\n", section.group(1), flags=re.M)
titled = {"": parts[0], **dict(zip(parts[1::2], parts[2::2]))}
text = {"cluster": titled[""], "job": titled.get("With Helm", "")}[sys.argv[1]]
block = re.search(r"^```sh\n(.*?)^```", text, re.S | re.M)
assert block, f"README's {sys.argv[1]} block is missing"
for line in block.group(1).splitlines():
    command = line.split("  #", 1)[0].strip()  # a comment is two spaces and '#' after the command
    if command and not command.startswith("#"):
        print(command)
PY
}

for block in "$@"; do
  case "$block" in cluster|job) ;; *) echo "kind-e2e: unknown block '$block' (cluster, job)" >&2; exit 2 ;; esac
  mapfile -t commands < <(block_commands "$block")
  [ ${#commands[@]} -gt 0 ] || { echo "kind-e2e: README's $block block has no command" >&2; exit 1; }
  if [ $print -eq 1 ]; then
    printf '%s\n' "${commands[@]}"
    continue
  fi
  for command in "${commands[@]}"; do
    echo "+ $command" >&2
    bash -euo pipefail -c "$command"
  done
done
