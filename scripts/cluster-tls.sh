#!/usr/bin/env bash
# Starts the three-node cluster of cluster.sh with TLS everywhere: HTTPS
# API, HTTPS between nodes, mutual TLS on raft. The first run makes a
# development CA, a certificate per node (n1 for 127.0.0.1, n2 for
# 127.0.0.2, n3 for 127.0.0.3, or CLUSTER_IPS as in cluster.sh) and an
# operator's client certificate in
# ./cluster-data/tls; later runs reuse them. Extra arguments go to every
# `idem serve`. Ctrl-C stops all three cleanly, as cluster.sh does.
#
# Talk to it with the CA (and, to join a node, the operator certificate):
#   bin/idem cluster status --addr 127.0.0.1:7070 --ca-file cluster-data/tls/idem-ca.pem
set -euo pipefail
cd "$(dirname "$0")/.."
go build -ldflags "-X main.version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)" -o bin/idem ./cmd/idem
data=${CLUSTER_DATA:-./cluster-data}
tls=$data/tls
mkdir -p "$tls"
chmod 700 "$tls"
[ -f "$tls/idem-ca.pem" ] || bin/idem tls ca --dir "$tls" --name "idem local cluster CA"
read -r -a ips <<<"${CLUSTER_IPS:-127.0.0.1 127.0.0.2 127.0.0.3}"
# The certificates name the addresses they were made for: made for other
# ones, every handshake would fail.
# Certificates made before the file recorded them are for the defaults.
[ -f "$tls/ips" ] || [ ! -f "$tls/n1.pem" ] || echo "127.0.0.1 127.0.0.2 127.0.0.3" >"$tls/ips"
if [ -f "$tls/ips" ] && [ "$(cat "$tls/ips")" != "${ips[*]}" ]; then
  echo "the certificates in $tls were made for $(cat "$tls/ips"), not ${ips[*]}: remove $tls/n1.pem, n2.pem, n3.pem (and their -key.pem) to make new ones, or run with CLUSTER_IPS=\"$(cat "$tls/ips")\"" >&2
  exit 2
fi
for i in 1 2 3; do
  ip=${ips[$((i - 1))]:-}
  [ -n "$ip" ] || { echo "CLUSTER_IPS must name three addresses (got: ${CLUSTER_IPS})" >&2; exit 2; }
  [ -f "$tls/n$i.pem" ] || bin/idem tls cert --dir "$tls" --name "n$i" --ip "$ip"
done
echo "${ips[*]}" >"$tls/ips"
[ -f "$tls/ops.pem" ] || bin/idem tls cert --dir "$tls" --name ops --client
echo "TLS material in $tls: clients need --ca-file $tls/idem-ca.pem (joining a node also --cert-file $tls/ops.pem --key-file $tls/ops-key.pem)"
# cluster.sh puts each node's id where an argument says {id}.
exec ./scripts/cluster.sh --tls-cert-file "$tls/{id}.pem" --tls-key-file "$tls/{id}-key.pem" \
  --tls-ca-file "$tls/idem-ca.pem" "$@"
