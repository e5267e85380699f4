#!/usr/bin/env bash
# Starts a three-node idem cluster on one machine, in the foreground:
# n1 on 127.0.0.1, n2 on 127.0.0.2, n3 on 127.0.0.3 (HTTP :7070, raft :7071),
# data in ./cluster-data/<id>. The three form the cluster together
# (--bootstrap-expect 3). Logs are prefixed with the node id. Ctrl-C stops
# all three. Extra arguments go to every `idem serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o bin/idem ./cmd/idem
data=${CLUSTER_DATA:-./cluster-data}
peers=127.0.0.1:7070,127.0.0.2:7070,127.0.0.3:7070
pids=()
stop() {
  trap - INT TERM EXIT
  echo "stopping the cluster"
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap stop INT TERM EXIT
for i in 1 2 3; do
  mkdir -p "$data/n$i"
  bin/idem serve --node-id "n$i" --data-dir "$data/n$i" \
    --http-addr "127.0.0.$i:7070" --raft-addr "127.0.0.$i:7071" \
    --bootstrap-expect 3 --join "$peers" "$@" 2>&1 | sed -u "s/^/[n$i] /" &
  pids+=($!)
done
echo "cluster starting: HTTP on 127.0.0.1:7070, 127.0.0.2:7070, 127.0.0.3:7070 (Ctrl-C stops it)"
wait
