#!/usr/bin/env bash
# go_install_cached NAME DIR MODULE CMD VERSION ASSETS DEST [nice]: `go install MODULE/CMD@VERSION` (CMD `.`: the
# module's root package) into DIR/bin and a copy of the module's ASSETS (a directory or a file: CRDs, config, a
# license) into DIR/DEST, once per DIR (flock-guarded; a second run with both present is a no-op). Works for
# modules without `replace` directives. Prints DIR. Sourced by
# hack/build/build-{kueue,versitygw,training-operator,kind}.sh.
go_install_cached() {
  local name=$1 dir=$2 module=$3 cmd=$4 version=$5 assets=$6 dest=$7 niceness=${8:-0} binary started src pkg
  pkg=$module/$cmd
  [ "$cmd" != . ] || pkg=$module
  binary="$dir/bin/$(basename "$pkg")"
  log() { echo "build-$name: $*" >&2; }
  # shellcheck disable=SC2329  # build_needed calls it
  built() { [ -x "$binary" ] && [ -e "$dir/$dest" ]; }
  build_needed "$dir/build.lock" built || { echo "$dir"; return; }
  command -v go >/dev/null || { log "Go is required to build $name"; exit 1; }
  started=$(date +%s)
  log "go install $pkg@$version"
  CGO_ENABLED=0 GOFLAGS="-trimpath" GOBIN="$dir/bin.tmp" nice -n "$niceness" \
    go install -ldflags "-s -w" "$pkg@$version" >&2
  src=$(go mod download -json "$module@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  rm -rf "${dir:?}/$dest" && cp -r "$src/$assets" "$dir/$dest" && chmod -R u+w "$dir/$dest"
  rm -rf "${dir:?}/bin" && mv "$dir/bin.tmp" "$dir/bin"
  log "built in $(( $(date +%s) - started )) s"
  echo "$dir"
}
