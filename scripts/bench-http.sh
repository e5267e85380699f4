#!/usr/bin/env bash
# Starts one fresh node in a temporary data dir, runs `idem bench` against
# it (64 clients, fresh claims by default), and stops the node.
# Usage: scripts/bench-http.sh [idem bench flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
go build -ldflags "-X main.version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)" -o bin/idem ./cmd/idem
dir=$(mktemp -d)
http=${BENCH_HTTP_ADDR:-127.0.0.1:7170}
raft=${BENCH_RAFT_ADDR:-127.0.0.1:7171}
# A directory of its own inside the temporary one: beside other nodes'
# data dirs (as /tmp often holds) the node warns of a --data-dir typo.
bin/idem serve --data-dir "$dir/data" --http-addr "$http" --raft-addr "$raft" --log-level warn &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
  curl -fs "http://$http/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
# The defaults only where the arguments do not give their own: idem
# refuses a flag given twice (scripts/bench-http.sh --duration 30s).
defaults=()
for d in "--concurrency 64" "--duration 10s"; do
  case " $* " in *" ${d%% *} "* | *" ${d%% *}="*) ;; *) defaults+=($d) ;; esac
done
bin/idem bench --addr "$http" "${defaults[@]}" "$@"
