#!/usr/bin/env bash
# Measures the time from kill -9 of the leader to the first successful
# claim through a surviving node, ROUNDS times (default 5), on a fresh
# three-node cluster on 127.0.0.1/2/3 (ports 7370/7371). Prints each time
# and the median.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
go build -ldflags "-X main.version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)" -o bin/idem ./cmd/idem
data=$(mktemp -d)
declare -A pid
peers=127.0.0.1:7370,127.0.0.2:7370,127.0.0.3:7370
startnode() {
  local i=$1
  bin/idem serve --node-id "n$i" --data-dir "$data/n$i" --http-addr "127.0.0.$i:7370" \
    --raft-addr "127.0.0.$i:7371" --bootstrap-expect 3 --join "$peers" --log-level error \
    >>"$data/n$i.log" 2>&1 &
  pid[$i]=$!
}
cleanup() { kill "${pid[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$data"; }
trap cleanup EXIT
for i in 1 2 3; do startnode "$i"; done
leader() {
  curl -fs "http://127.0.0.1:7370/v1/cluster" 2>/dev/null | sed -n 's/.*"leader":{"id":"n\([0-9]\)".*/\1/p'
}
waitready() {
  for _ in $(seq 300); do
    ok=0
    for i in 1 2 3; do curl -fs "http://127.0.0.$i:7370/readyz" >/dev/null 2>&1 && ok=$((ok+1)); done
    [ "$ok" = 3 ] && return 0
    sleep 0.1
  done
  echo "cluster not ready" >&2; exit 1
}
waitready
times=()
for r in $(seq "$rounds"); do
  l=""
  for _ in $(seq 100); do
    l=$(curl -fs "http://127.0.0.$(( (r % 3) + 1 )):7370/v1/cluster" | sed -n 's/.*"leader":{"id":"n\([0-9]\)".*/\1/p') || true
    [ -n "$l" ] && break; sleep 0.1
  done
  other=$(( l % 3 + 1 ))
  kill -9 "${pid[$l]}"
  wait "${pid[$l]}" 2>/dev/null || true
  t0=$(date +%s.%N)
  n=0
  until [ "$(curl -s -o /dev/null -w '%{http_code}' -m 5 -XPOST "http://127.0.0.$other:7370/v1/claim" \
      -d "{\"principal\":\"p\",\"endpoint\":\"e\",\"key\":\"failover-$r-$n\",\"fingerprint\":\"aa\"}")" = 201 ]; do
    n=$((n+1)); sleep 0.01
  done
  t1=$(date +%s.%N)
  dt=$(awk "BEGIN{printf \"%.2f\", $t1 - $t0}")
  echo "round $r: killed leader n$l, first claim via n$other after ${dt}s"
  times+=("$dt")
  startnode "$l"
  waitready
done
printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {printf "median %.2fs over %d rounds\n", a[int((NR+1)/2)], NR}'
