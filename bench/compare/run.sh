#!/usr/bin/env bash
# bench/compare/run.sh: idem side by side with Redis, PostgreSQL and etcd.
#
# Installs the servers from Debian's packages (redis-server, postgresql,
# etcd-server), starts each on loopback in a temporary data dir, one system
# at a time, runs the identical workload of bench/compare (the same load
# generator as `idem bench`) against it, stops it by PID, and writes the
# markdown table to bench/compare/results.md (and prints it).
#
#   Redis 7      AOF appendfsync always; then appendfsync everysec (not durable)
#   PostgreSQL   the classic idempotency-key table, INSERT ... ON CONFLICT DO NOTHING RETURNING,
#                fsync=on, synchronous_commit=on
#   etcd         one node, then three; claim = txn If(CreateRevision==0) Then(Put with lease)
#   idem         one node, then three (--bootstrap-expect 3); idem1-batch and idem3-batch run
#                the same nodes with the Go client's batcher (POST /v1/batch, up to BATCH ops)
#
# Usage: bench/compare/run.sh [--clients N] [--duration 10s] [--warmup 2s]
#          [--mix fresh=100] [--batch 256] [--rounds 1]
#          [--systems "redis-always redis-everysec postgres etcd1 etcd3 idem1 idem3 idem1-batch idem3-batch"]
#          [--no-install] [--keep] [-- extra flags for `compare run`]
# --rounds N runs every system N times, the systems taking turns within each
# round (a slower spell of the machine then hits them all), each run on a
# fresh data dir; the table shows each system's median run and the range.
# The same settings as environment variables: CLIENTS, DURATION, WARMUP, MIX,
# SYSTEMS, BATCH, ROUNDS, INSTALL=0, KEEP=1, READY_TIMEOUT (seconds, default 60), RESULTS (file),
# PORT_BASE (default 24600: Redis BASE+1, PostgreSQL +2, etcd client/peer +3/+4,
# idem HTTP/raft +5/+6; three-node systems on 127.0.0.1, .2 and .3). A port
# already taken stops the script before anything starts on it.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

CLIENTS=${CLIENTS:-64}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
MIX=${MIX:-fresh=100}
SYSTEMS=${SYSTEMS:-"redis-always redis-everysec postgres etcd1 etcd3 idem1 idem3 idem1-batch idem3-batch"}
BATCH=${BATCH:-256}
ROUNDS=${ROUNDS:-1}
INSTALL=${INSTALL:-1}
KEEP=${KEEP:-0}
READY_TIMEOUT=${READY_TIMEOUT:-60}
RESULTS=${RESULTS:-$here/results.md}
PORT_BASE=${PORT_BASE:-24600}
extra=()

while [ $# -gt 0 ]; do
  case "$1" in
    --clients) CLIENTS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --mix) MIX=$2; shift 2 ;;
    --systems) SYSTEMS=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --results) RESULTS=$2; shift 2 ;;
    --port-base) PORT_BASE=$2; shift 2 ;;
    --no-install) INSTALL=0; shift ;;
    --keep) KEEP=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (--help lists them)" >&2; exit 2 ;;
  esac
done

case "$ROUNDS" in ''|*[!0-9]*|0) echo "run.sh: --rounds must be a whole number of at least 1, not \"$ROUNDS\"" >&2; exit 2 ;; esac

log() { printf '[compare %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- install
need_install=()
command -v redis-server >/dev/null || need_install+=(redis-server)
command -v etcd >/dev/null || need_install+=(etcd-server)
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
[ -n "$pgbin" ] && [ -x "$pgbin/postgres" ] || need_install+=(postgresql)
if [ ${#need_install[@]} -gt 0 ]; then
  [ "$INSTALL" = 1 ] || die "missing ${need_install[*]} and --no-install was given"
  [ "$(id -u)" = 0 ] || die "missing ${need_install[*]}: run as root (or install them) first"
  log "installing ${need_install[*]} from Debian's packages"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server postgresql etcd-server >/dev/null
  pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
fi
command -v go >/dev/null || die "go is not installed"

# ---------------------------------------------------------------- build
log "building bin/idem and the compare tool"
(cd "$root" && go build -o bin/idem ./cmd/idem)
work=$(mktemp -d /tmp/idem-compare.XXXXXX)
chmod 755 "$work"
(cd "$here" && go build -o "$work/compare" .)
idem=$root/bin/idem
compare=$work/compare

# ---------------------------------------------------------------- processes
pids=()   # every server this script started, stopped by PID
stop_pids() { # stop_pids PID...: TERM, wait up to 15 s, then KILL
  local p
  for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 150); do
    local alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in "$@"; do
    if kill -0 "$p" 2>/dev/null; then log "PID $p did not stop: KILL"; kill -KILL "$p" 2>/dev/null || true; fi
    wait "$p" 2>/dev/null || true
  done
}
stop_all() {
  if [ ${#pids[@]} -gt 0 ]; then
    stop_pids "${pids[@]}"
    pids=()
  fi
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_all
  if [ "$KEEP" = 1 ]; then log "kept $work"; else rm -rf "$work"; fi
  exit $rc
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# start NAME CMD...: start a server in the background, its output in $work/NAME.log.
start() {
  local name=$1; shift
  "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
}

# as_postgres: initdb and postgres refuse to run as root, so when we are
# root they run as the postgres user through setpriv, which execs them: the
# PID that start records is the server's own.
as_postgres=()
[ "$(id -u)" = 0 ] && as_postgres=(setpriv --reuid=postgres --regid=postgres --init-groups --)

# port_free HOST PORT: fails when something already listens there (another
# session's server would then answer our readiness check and take our load).
port_free() {
  if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then
    die "$1:$2 is already in use by another process; pick other ports with --port-base"
  fi
}

ready() { # ready SYSTEM TARGET NAME
  local p
  for p in "${pids[@]}"; do
    kill -0 "$p" 2>/dev/null || { tail -20 "$work"/"$3"*.log >&2 || true; die "$3: PID $p exited at start"; }
  done
  if ! "$compare" ping --system "$1" --target "$2" --timeout "${READY_TIMEOUT}s"; then
    log "$3 did not become ready within ${READY_TIMEOUT}s; the end of its log:"
    for f in "$work"/"$3"*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done
    die "$3 not ready"
  fi
  for p in "${pids[@]}"; do
    kill -0 "$p" 2>/dev/null || { tail -20 "$work"/"$3"*.log >&2 || true; die "$3: PID $p exited"; }
  done
}

results=()
failed=()
round=1
run=$work/r1 # the data dirs of this round's servers
bench() { # bench NAME SYSTEM TARGET LABEL DURABILITY DURABLE [compare run flags...]
  log "$1: loading for $DURATION after $WARMUP warm-up with $CLIENTS clients, mix $MIX (round $round of $ROUNDS)"
  local out=$work/$1.r$round.json
  if "$compare" run --system "$2" --target "$3" --label "$4" --durability "$5" --durable="$6" \
    --concurrency "$CLIENTS" --duration "$DURATION" --warmup "$WARMUP" --mix "$MIX" \
    --out "$out" --quiet "${@:7}" ${extra[@]+"${extra[@]}"}; then
    :
  else
    local rc=$?
    [ $rc = 130 ] && { log "interrupted"; exit 130; }
    failed+=("$1 (round $round)")
  fi
  [ -f "$out" ] && results+=("$out")
  return 0
}

# ---------------------------------------------------------------- systems
run_redis() { # run_redis NAME APPENDFSYNC LABEL DURABILITY DURABLE
  local dir=$run/$1 port=$((PORT_BASE + 1))
  mkdir -p "$dir"
  port_free 127.0.0.1 $port
  start "$1" redis-server --bind 127.0.0.1 --port $port --dir "$dir" --daemonize no --save "" \
    --appendonly yes --appendfsync "$2" --maxmemory-policy noeviction --protected-mode no --logfile ""
  ready redis 127.0.0.1:$port "$1"
  bench "$1" redis 127.0.0.1:$port "$3" "$4" "$5"
  stop_all
}

run_postgres() {
  local dir=$run/pg port=$((PORT_BASE + 2))
  port_free 127.0.0.1 $port
  mkdir -p "$dir/data" "$dir/sock"
  [ "$(id -u)" = 0 ] && chown -R postgres:postgres "$dir"
  ${as_postgres[@]+"${as_postgres[@]}"} "$pgbin/initdb" -D "$dir/data" -U postgres --auth=trust >"$work/postgres-initdb.log" 2>&1 ||
    { tail -20 "$work/postgres-initdb.log" >&2; die "initdb failed"; }
  start postgres ${as_postgres[@]+"${as_postgres[@]}"} "$pgbin/postgres" -D "$dir/data" -p $port -k "$dir/sock" \
    -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on -c full_page_writes=on \
    -c max_connections=$((CLIENTS + 20)) -c shared_buffers=256MB
  local dsn="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  ready postgres "$dsn" postgres
  local ver
  ver=$("$pgbin/postgres" --version | awk '{print $3}' | cut -d. -f1)
  bench postgres postgres "$dsn" "PostgreSQL $ver (INSERT ON CONFLICT)" "fsync=on, synchronous_commit=on" true
  stop_all
}

run_etcd() { # run_etcd N
  local n=$1 name=etcd$1 cluster="" eps="" i cport=$((PORT_BASE + 3)) pport=$((PORT_BASE + 4))
  for i in $(seq "$n"); do
    port_free "127.0.0.$i" $cport
    port_free "127.0.0.$i" $pport
    cluster+="${cluster:+,}e$i=http://127.0.0.$i:$pport"
    eps+="${eps:+,}127.0.0.$i:$cport"
  done
  for i in $(seq "$n"); do
    mkdir -p "$run/$name/e$i"
    start "$name-e$i" etcd --name "e$i" --data-dir "$run/$name/e$i" \
      --listen-client-urls "http://127.0.0.$i:$cport" --advertise-client-urls "http://127.0.0.$i:$cport" \
      --listen-peer-urls "http://127.0.0.$i:$pport" --initial-advertise-peer-urls "http://127.0.0.$i:$pport" \
      --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token "idem-compare-$n" \
      --logger zap --log-level warn
  done
  ready etcd "$eps" "$name"
  local ver
  ver=$(etcd --version | awk '/etcd Version/ {print $3}' | cut -d. -f1,2)
  if [ "$n" = 1 ]; then
    bench "$name" etcd "$eps" "etcd $ver, 1 node (txn + lease)" "WAL fsync" true
  else
    bench "$name" etcd "$eps" "etcd $ver, $n nodes (txn + lease)" "WAL fsync on a quorum" true
  fi
  stop_all
}

run_idem() { # run_idem N [BATCH]: BATCH > 0 loads through the Go client's batcher
  local n=$1 batch=${2:-0} name=idem$1 peers="" i hport=$((PORT_BASE + 5)) rport=$((PORT_BASE + 6))
  local label="" flags=()
  if [ "$batch" -gt 0 ]; then
    name=idem$1-batch label=", batched (Go client, ≤$batch ops a request)" flags=(--batch "$batch")
  fi
  for i in $(seq "$n"); do
    port_free "127.0.0.$i" $hport
    port_free "127.0.0.$i" $rport
    peers+="${peers:+,}127.0.0.$i:$hport"
  done
  for i in $(seq "$n"); do
    mkdir -p "$run/$name/n$i"
    if [ "$n" = 1 ]; then
      start "$name-n$i" "$idem" serve --node-id "n$i" --data-dir "$run/$name/n$i" \
        --http-addr "127.0.0.$i:$hport" --raft-addr "127.0.0.$i:$rport" --log-level warn
    else
      start "$name-n$i" "$idem" serve --node-id "n$i" --data-dir "$run/$name/n$i" \
        --http-addr "127.0.0.$i:$hport" --raft-addr "127.0.0.$i:$rport" --log-level warn \
        --bootstrap-expect "$n" --join "$peers"
    fi
  done
  ready idem "$peers" "$name"
  if [ "$n" = 1 ]; then
    bench "$name" idem "$peers" "idem, 1 node$label" "raft log fsync" true ${flags[@]+"${flags[@]}"}
  else
    bench "$name" idem "$peers" "idem, $n nodes$label" "raft log fsync on a quorum" true ${flags[@]+"${flags[@]}"}
  fi
  stop_all
}

started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
for round in $(seq "$ROUNDS"); do
run=$work/r$round
for s in $SYSTEMS; do
  case "$s" in
    redis-always) run_redis redis-always always "Redis $(redis-server --version | sed 's/.*v=\([0-9.]*\).*/\1/') (AOF always)" "appendfsync always" true ;;
    redis-everysec) run_redis redis-everysec everysec "Redis $(redis-server --version | sed 's/.*v=\([0-9.]*\).*/\1/') (AOF everysec)" "appendfsync everysec: loses up to 1 s" false ;;
    postgres) run_postgres ;;
    etcd1) run_etcd 1 ;;
    etcd3) run_etcd 3 ;;
    idem1) run_idem 1 ;;
    idem3) run_idem 3 ;;
    idem1-batch) run_idem 1 "$BATCH" ;;
    idem3-batch) run_idem 3 "$BATCH" ;;
    *) die "unknown system $s (redis-always redis-everysec postgres etcd1 etcd3 idem1 idem3 idem1-batch idem3-batch)" ;;
  esac
done
rm -rf "$run" # the next round starts every server on a fresh data dir
done

[ ${#results[@]} -gt 0 ] || die "no system produced a result"
cpu=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)
mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)
{
  echo "# idem side by side"
  echo
  echo "$started, $(nproc) cores ($cpu), $mem, $(. /etc/os-release && echo "$PRETTY_NAME"), disk under $(df -P /tmp | awk 'NR==2 {print $1}')."
  echo "Workload: $CLIENTS clients, mix \`$MIX\`, $DURATION measured after $WARMUP warm-up, every system alone on loopback."
  if [ "$ROUNDS" -gt 1 ]; then
    echo "$ROUNDS rounds, the systems taking turns in each: every row is the system's median run (its p50 and p99 too),"
    echo "the range is the slowest and fastest run, errors and correctness count every run."
  fi
  echo
  "$compare" table "${results[@]}"
  echo
  echo "claims/s counts completed operations (with the default mix, fresh claims that must win);"
  echo "latencies in ms; \"idem ÷ this\" divides idem's claims/s (same number of nodes) by the row's."
  echo
  echo "Reproduce: \`bench/compare/run.sh --clients $CLIENTS --duration $DURATION --warmup $WARMUP --mix $MIX --rounds $ROUNDS\`"
} >"$RESULTS"
cat "$RESULTS"
if [ ${#failed[@]} -gt 0 ]; then
  log "the run of ${failed[*]} failed (see above)"
  exit 1
fi
