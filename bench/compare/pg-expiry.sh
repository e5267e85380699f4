#!/usr/bin/env bash
# bench/compare/pg-expiry.sh: what expiring 10 M records costs PostgreSQL,
# the figure beside idem's expiry of a bucket (one Pebble DeleteRange).
#
# Installs postgresql from Debian's packages if missing (apt-get, as root),
# starts its own cluster in a temporary dir on 127.0.0.1 on a free port
# (fsync=on, synchronous_commit=on, every other setting at its default),
# and runs `compare pg-expiry` against it: for each mode it recreates the
# seed's table with its indexes (the DDL of postgres.go), bulk-loads
# --rows expired rows and --live live ones (INSERT ... SELECT
# generate_series), VACUUM ANALYZE + CHECKPOINT, then measures
#   - table + index size (pg_total_relation_size) and du of the data dir
#   - the delete: the seed's `DELETE FROM idempotency_keys WHERE expires_at
#     < now()` (mode single), or the chunked form the seed recommends,
#     `DELETE ... WHERE id IN (SELECT id ... ORDER BY expires_at LIMIT
#     --batch)` until none is left (mode batched): time and WAL bytes
#     (pg_current_wal_lsn before and after)
#   - the size after the delete, after plain VACUUM and after VACUUM FULL
#     (with their times and WAL)
#   - claim latency (p50/p99/max, claims over 50 ms) of --claimers clients
#     claiming fresh keys at --claim-rate, idle and during each phase
# It checks that every live row survives and no expired one is left, prints
# the markdown table and writes it to bench/compare/pg-expiry.md. The
# server is stopped by PID on exit or Ctrl-C; the temp dir is removed.
#
# Usage: bench/compare/pg-expiry.sh [--rows 10000000] [--live 1000000]
#          [--modes single,batched] [--batch 10000] [--claimers 4]
#          [--claim-rate 200] [--body-bytes 0] [--results FILE] [--port P]
#          [--no-install] [--keep] [-- extra flags for `compare pg-expiry`]
# The same settings as environment variables: ROWS, LIVE, MODES, BATCH,
# CLAIMERS (0: no claim load), CLAIM_RATE, BODY_BYTES, RESULTS, PORT
# (default: the first free one from 24610), INSTALL=0, KEEP=1 (keep the
# temp dir with the server's log), READY_TIMEOUT (seconds, default 60),
# TMPDIR (where the cluster lives: 10 M rows need about 15 GB free).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)

ROWS=${ROWS:-10000000}
LIVE=${LIVE:-1000000}
MODES=${MODES:-single,batched}
BATCH=${BATCH:-10000}
CLAIMERS=${CLAIMERS:-4}
CLAIM_RATE=${CLAIM_RATE:-200}
BODY_BYTES=${BODY_BYTES:-0}
RESULTS=${RESULTS:-$here/pg-expiry.md}
PORT=${PORT:-}
INSTALL=${INSTALL:-1}
KEEP=${KEEP:-0}
READY_TIMEOUT=${READY_TIMEOUT:-60}
extra=()

while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS=$2; shift 2 ;;
    --live) LIVE=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --claimers) CLAIMERS=$2; shift 2 ;;
    --claim-rate) CLAIM_RATE=$2; shift 2 ;;
    --body-bytes) BODY_BYTES=$2; shift 2 ;;
    --results) RESULTS=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --no-install) INSTALL=0; shift ;;
    --keep) KEEP=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "pg-expiry.sh: unknown argument $1 (--help lists them)" >&2; exit 2 ;;
  esac
done

log() { printf '[pg-expiry %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- install
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$pgbin" ] || [ ! -x "$pgbin/postgres" ]; then
  [ "$INSTALL" = 1 ] || die "postgresql is missing and --no-install was given"
  [ "$(id -u)" = 0 ] || die "postgresql is missing: run as root (or install it) first"
  log "installing postgresql from Debian's packages"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
fi
command -v go >/dev/null || die "go is not installed"

# ---------------------------------------------------------------- build
work=$(mktemp -d "${TMPDIR:-/tmp}/idem-pg-expiry.XXXXXX")
chmod 755 "$work"
pid=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$pid" ]; then # stop the server by PID: TERM (smart), then fast, then KILL
    kill -INT "$pid" 2>/dev/null || true
    for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then log "PID $pid did not stop: KILL"; kill -KILL "$pid" 2>/dev/null || true; fi
    wait "$pid" 2>/dev/null || true
  fi
  if [ "$KEEP" = 1 ]; then log "kept $work"; else rm -rf "$work"; fi
  exit $rc
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

log "building the compare tool"
(cd "$here" && go build -o "$work/compare" .)
compare=$work/compare

# ---------------------------------------------------------------- server
# initdb and postgres refuse to run as root, so when we are root they run
# as the postgres user through setpriv, which execs them: $! is the
# server's own PID (as in run.sh).
as_postgres=()
[ "$(id -u)" = 0 ] && as_postgres=(setpriv --reuid=postgres --regid=postgres --init-groups --)

in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if [ -z "$PORT" ]; then
  for p in $(seq 24610 24710); do in_use "$p" || { PORT=$p; break; }; done
  [ -n "$PORT" ] || die "no free port in 24610..24710; pick one with --port"
elif in_use "$PORT"; then
  die "127.0.0.1:$PORT is already in use by another process; pick another with --port"
fi

mkdir -p "$work/pg/data" "$work/pg/sock"
[ "$(id -u)" = 0 ] && chown -R postgres:postgres "$work/pg"
${as_postgres[@]+"${as_postgres[@]}"} "$pgbin/initdb" -D "$work/pg/data" -U postgres --auth=trust >"$work/initdb.log" 2>&1 ||
  { tail -20 "$work/initdb.log" >&2; die "initdb failed"; }
log "starting PostgreSQL ($pgbin) on 127.0.0.1:$PORT in $work/pg"
${as_postgres[@]+"${as_postgres[@]}"} "$pgbin/postgres" -D "$work/pg/data" -p "$PORT" -k "$work/pg/sock" \
  -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on -c full_page_writes=on \
  >"$work/postgres.log" 2>&1 &
pid=$!
dsn="postgres://postgres@127.0.0.1:$PORT/postgres?sslmode=disable"
if ! "$compare" ping --system postgres --target "$dsn" --timeout "${READY_TIMEOUT}s"; then
  tail -20 "$work/postgres.log" >&2
  die "PostgreSQL did not become ready within ${READY_TIMEOUT}s"
fi
kill -0 "$pid" 2>/dev/null || { tail -20 "$work/postgres.log" >&2; die "PostgreSQL (PID $pid) exited"; }

# ---------------------------------------------------------------- run
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
log "loading $ROWS expired + $LIVE live rows per mode ($MODES); load average $load0"
"$compare" pg-expiry --target "$dsn" --data-dir "$work/pg/data" --rows "$ROWS" --live "$LIVE" \
  --modes "$MODES" --batch "$BATCH" --claimers "$CLAIMERS" --claim-rate "$CLAIM_RATE" \
  --body-bytes "$BODY_BYTES" --results "$work/table.md" --json "$work/pg-expiry.json" \
  ${extra[@]+"${extra[@]}"} >/dev/null || rc=$?
[ -f "$work/table.md" ] || die "compare pg-expiry produced no table (exit ${rc:-1})"

cpu=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)
mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)
repro="bench/compare/pg-expiry.sh --rows $ROWS --live $LIVE --modes $MODES --batch $BATCH --claimers $CLAIMERS --claim-rate $CLAIM_RATE"
[ "$BODY_BYTES" = 0 ] || repro+=" --body-bytes $BODY_BYTES"
[ ${#extra[@]} = 0 ] || repro+=" -- ${extra[*]}"
commas() { echo "$1" | sed ':a; s/\B[0-9]\{3\}\>/,&/; ta'; }
{
  echo "# PostgreSQL expiring $(commas "$ROWS") rows of the seed's table"
  echo
  echo "$started, $(nproc) cores ($cpu), $mem, $(. /etc/os-release && echo "$PRETTY_NAME"), disk under $(df -P "$work" | awk 'NR==2 {print $1}')."
  echo "The machine is shared with other work (load average $load0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end)."
  echo
  cat "$work/table.md"
  echo
  echo "Sizes from pg_total_relation_size / pg_relation_size / pg_indexes_size; \"data dir\" is \`du\` of the"
  echo "cluster's whole data directory (pg_wal included). WAL is the pg_current_wal_lsn difference."
  echo
  echo "Reproduce: \`$repro\`"
} >"$RESULTS"
cat "$RESULTS"
exit "${rc:-0}"
