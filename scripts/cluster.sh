#!/usr/bin/env bash
# Starts a three-node idem cluster on one machine, in the foreground:
# n1 on 127.0.0.1, n2 on 127.0.0.2, n3 on 127.0.0.3 (HTTP :7070, raft :7071),
# data in ./cluster-data/<id>. The three form the cluster together
# (--bootstrap-expect 3). Logs are prefixed with the node id. Ctrl-C stops
# all three cleanly: each node gets SIGTERM, drains, closes raft and Pebble,
# saves its probe filters and logs "stopped"; the script waits for each.
# Extra arguments go to every `idem serve`; {id} in them becomes the
# node's id (scripts/cluster-tls.sh gives each node its own certificate).
# CLUSTER_HTTP_PORT and CLUSTER_RAFT_PORT move the ports (7070, 7071) when
# they are taken; CLUSTER_IPS the three addresses ("127.0.0.1 127.0.0.2
# 127.0.0.3"; a machine without 127.0.0.2 and .3 can give one address three
# times with distinct ports: see below; IPv6 without brackets: "::1 ::1 ::1");
# CLUSTER_DATA the data (./cluster-data).
set -euo pipefail
cd "$(dirname "$0")/.."
data=${CLUSTER_DATA:-./cluster-data}
http=${CLUSTER_HTTP_PORT:-7070}
raft=${CLUSTER_RAFT_PORT:-7071}
read -r -a ips <<<"${CLUSTER_IPS:-127.0.0.1 127.0.0.2 127.0.0.3}"
if [ "${#ips[@]}" -ne 3 ]; then
  echo "CLUSTER_IPS must name three addresses, separated by spaces (got: ${CLUSTER_IPS})" >&2
  exit 2
fi
for ip in "${ips[@]}"; do
  case $ip in
  \[*) echo "CLUSTER_IPS takes IPv6 addresses without brackets (got $ip; give ${ip//[\[\]]/})" >&2; exit 2 ;;
  esac
done
# hp IP PORT: host:port, an IPv6 address in brackets ([::1]:7070).
hp() { case $1 in *:*) echo "[$1]:$2" ;; *) echo "$1:$2" ;; esac; }
# One address three times: each node gets its own ports (HTTP, raft) + 10*(i-1).
same=0
if [ "${ips[0]}" = "${ips[1]}" ] || [ "${ips[1]}" = "${ips[2]}" ] || [ "${ips[0]}" = "${ips[2]}" ]; then
  same=1
fi
httpOf() { if [ "$same" = 1 ]; then echo $((http + 10 * ($1 - 1))); else echo "$http"; fi; }
raftOf() { if [ "$same" = 1 ]; then echo $((raft + 10 * ($1 - 1))); else echo "$raft"; fi; }
if [ "$same" = 1 ]; then
  for i in 1 2 3; do
    for j in 1 2 3; do
      if [ "$(httpOf "$i")" = "$(raftOf "$j")" ]; then
        echo "CLUSTER_HTTP_PORT ($http) and CLUSTER_RAFT_PORT ($raft) collide on one address: n$i's HTTP port would be n$j's raft port (the nodes use +0, +10 and +20); pick ports more than 20 apart, or not a multiple of 10 apart" >&2
        exit 2
      fi
    done
  done
fi
peers=$(hp "${ips[0]}" "$(httpOf 1)"),$(hp "${ips[1]}" "$(httpOf 2)"),$(hp "${ips[2]}" "$(httpOf 3)")
# Every address must be free before anything starts: with one taken (a
# `make run` node on 127.0.0.1:7070, say) that node failed alone while the
# other two went on, and joined whatever cluster answered there.
taken=()
for i in 1 2 3; do
  ip=${ips[$((i - 1))]}
  for port in "$(httpOf "$i")" "$(raftOf "$i")"; do
    if (exec 3<>"/dev/tcp/$ip/$port") 2>/dev/null; then taken+=("$(hp "$ip" "$port") (n$i)"); fi
  done
done
if [ "${#taken[@]}" -gt 0 ]; then
  echo "something already listens on ${taken[*]}: stop it first (a make run node uses 127.0.0.1:7070 and :7071), or move the cluster (CLUSTER_HTTP_PORT, CLUSTER_RAFT_PORT, CLUSTER_IPS); nothing was started" >&2
  exit 2
fi
go build -ldflags "-X main.version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)" -o bin/idem ./cmd/idem
# Each node writes into a fifo read by its own prefixer, so $! is the
# node's PID (with `idem | sed &` it is sed's, and stopping sed killed the
# node by SIGPIPE before it could log its stop).
fifos=$(mktemp -d)
nodes=()
prefixers=()
stop() {
  trap - INT TERM EXIT
  echo "stopping the cluster"
  for pid in "${nodes[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${nodes[@]}"; do wait "$pid" 2>/dev/null || true; done
  # The prefixers end when their node's output closes: wait for the last lines.
  for pid in "${prefixers[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$fifos"
}
trap stop INT TERM EXIT
for i in 1 2 3; do
  mkdir -p -m 700 "$data/n$i"   # a data dir is private: idem tightens one that is not (and says so)
  mkfifo "$fifos/n$i"
  # The prefixer ignores INT and TERM: a Ctrl-C or a signal to the whole
  # process group must not end it before its node has logged its stop.
  (trap '' INT TERM; exec sed -u "s/^/[n$i] /" <"$fifos/n$i") &
  prefixers+=($!)
  bin/idem serve --node-id "n$i" --data-dir "$data/n$i" \
    --http-addr "$(hp "${ips[$((i - 1))]}" "$(httpOf "$i")")" --raft-addr "$(hp "${ips[$((i - 1))]}" "$(raftOf "$i")")" \
    --bootstrap-expect 3 --join "$peers" "${@//\{id\}/n$i}" >"$fifos/n$i" 2>&1 &
  nodes+=($!)
done
echo "cluster starting: HTTP on $peers (Ctrl-C stops it)"
wait "${nodes[@]}"
