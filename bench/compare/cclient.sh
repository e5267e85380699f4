#!/usr/bin/env bash
# bench/compare/cclient.sh: idem and Redis driven by C load generators, so the
# cost of the Go client in run.sh's table can be told apart from the servers'.
#
#   idem, 1 node   wrk (Debian's package) with a Lua script of fresh claims:
#                  one POST /v1/claim per request; then, with --batch N (default
#                  32, 0 skips it), POST /v1/batch of N fresh claims per request
#   Redis 7        AOF appendfsync always, redis-benchmark
#                  SET k:__rand_int__ v NX PX 86400000 (a fresh key per command)
#
# Every request must succeed: wrk counts answers that are not 2xx, the Lua
# script counts batch results that are not 201, and a run with any is marked
# failed. Prints a markdown table (and writes it to --results).
#
# Usage: bench/compare/cclient.sh [--clients 64] [--duration 10s] [--batch 32]
#          [--threads 2] [--requests 400000] [--results FILE] [--port-base 24700]
#          [--no-install] [--keep]
# The same as environment variables: CLIENTS, DURATION, BATCH, THREADS,
# REQUESTS (redis-benchmark's command count), RESULTS, PORT_BASE (Redis
# BASE+1, idem HTTP/raft +5/+6), INSTALL=0, KEEP=1.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

CLIENTS=${CLIENTS:-64}
DURATION=${DURATION:-10s}
BATCH=${BATCH:-32}
THREADS=${THREADS:-2}
REQUESTS=${REQUESTS:-400000}
RESULTS=${RESULTS:-$here/results-cclient.md}
PORT_BASE=${PORT_BASE:-24700}
INSTALL=${INSTALL:-1}
KEEP=${KEEP:-0}

while [ $# -gt 0 ]; do
  case "$1" in
    --clients) CLIENTS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --requests) REQUESTS=$2; shift 2 ;;
    --results) RESULTS=$2; shift 2 ;;
    --port-base) PORT_BASE=$2; shift 2 ;;
    --no-install) INSTALL=0; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "cclient.sh: unknown argument $1 (--help lists them)" >&2; exit 2 ;;
  esac
done
case "$CLIENTS$BATCH$THREADS$REQUESTS" in *[!0-9]*) echo "cclient.sh: --clients, --batch, --threads and --requests take whole numbers" >&2; exit 2 ;; esac
[ "$CLIENTS" -ge "$THREADS" ] || { echo "cclient.sh: --clients ($CLIENTS) must be at least --threads ($THREADS)" >&2; exit 2; }

log() { printf '[cclient %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

need=()
command -v wrk >/dev/null || need+=(wrk)
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-benchmark >/dev/null || need+=(redis-tools)
if [ ${#need[@]} -gt 0 ]; then
  [ "$INSTALL" = 1 ] || die "missing ${need[*]} and --no-install was given"
  [ "$(id -u)" = 0 ] || die "missing ${need[*]}: run as root (or install them) first"
  log "installing ${need[*]} from Debian's packages"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

log "building bin/idem"
(cd "$root" && go build -o bin/idem ./cmd/idem)
work=$(mktemp -d /tmp/idem-cclient.XXXXXX)
pids=()
stop_all() {
  local p
  for p in ${pids[@]+"${pids[@]}"}; do kill -TERM "$p" 2>/dev/null || true; done
  for p in ${pids[@]+"${pids[@]}"}; do wait "$p" 2>/dev/null || true; done
  pids=()
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

port_free() {
  if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then
    die "$1:$2 is already in use by another process; pick other ports with --port-base"
  fi
}
wait_for() { # wait_for DESCRIPTION CMD...: up to 60 s
  for _ in $(seq 600); do "${@:2}" >/dev/null 2>&1 && return 0; sleep 0.1; done
  die "$1 did not become ready within 60 s (logs in $work; --keep keeps them)"
}

rows=()

# ---------------------------------------------------------------- idem + wrk
# The Lua script makes every request a fresh scope: the run's name, the
# thread's id and a counter in the key, 100 principals (without the run's
# name the batched run, on the same node, re-claimed the first run's keys
# and counted them as lost). With BATCH > 0 one request carries
# BATCH claims; the response callback counts the results that are not 201.
cat >"$work/claims.lua" <<'EOF'
local batch = tonumber(os.getenv("BATCH") or "0")
local run = os.getenv("RUN") or "r"
local threads = {}
local counter, bad, tid = 0, 0, 0
function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end
function init(args) tid = wrk.thread:get("tid") end
local function claim(i)
  return string.format('{"principal":"p%d","endpoint":"POST /x","key":"%s-t%d-%d","fingerprint":"aa"}', i % 100, run, tid, i)
end
request = function()
  if batch == 0 then
    counter = counter + 1
    return wrk.format("POST", "/v1/claim", {["Content-Type"] = "application/json"}, claim(counter))
  end
  local ops = {}
  for _ = 1, batch do
    counter = counter + 1
    ops[#ops + 1] = '{"op":"claim",' .. string.sub(claim(counter), 2)
  end
  return wrk.format("POST", "/v1/batch", {["Content-Type"] = "application/json"}, '{"ops":[' .. table.concat(ops, ",") .. ']}')
end
response = function(status, headers, body)
  if batch > 0 and status == 200 then
    local _, won = string.gsub(body, '"status":201', "")
    bad = bad + (batch - won)
  end
end
done = function(summary, latency, requests)
  local total = 0
  for _, t in ipairs(threads) do total = total + (t:get("bad") or 0) end
  io.write(string.format("BAD_RESULTS %d\nP50_US %d\nP99_US %d\n", total, latency:percentile(50), latency:percentile(99)))
end
-- wrk runs done() in the main Lua state: each thread publishes its count.
local publish = response
response = function(status, headers, body)
  publish(status, headers, body)
  wrk.thread:set("bad", bad)
end
EOF

run_wrk() { # run_wrk LABEL BATCH URL
  local out=$work/wrk-$2.txt
  RUN=b$2 BATCH=$2 wrk -t "$THREADS" -c "$CLIENTS" -d "$DURATION" --latency -s "$work/claims.lua" "$3" >"$out" 2>&1 || { cat "$out" >&2; die "wrk failed"; }
  local rps non2xx errs bad p50 p99 per=1
  rps=$(awk '/^Requests\/sec/ {print $2}' "$out")
  non2xx=$(awk '/Non-2xx or 3xx responses/ {print $NF}' "$out"); non2xx=${non2xx:-0}
  errs=$(awk '/Socket errors/ {s=0; for (i=1;i<=NF;i++) if ($i ~ /^[0-9]+,?$/) s+=$i; print s}' "$out"); errs=${errs:-0}
  bad=$(awk '/^BAD_RESULTS/ {print $2}' "$out")
  p50=$(awk '/^P50_US/ {printf "%.1f", $2/1000}' "$out")
  p99=$(awk '/^P99_US/ {printf "%.1f", $2/1000}' "$out")
  [ "$2" -gt 0 ] && per=$2
  local ok=ok
  if [ "$non2xx" != 0 ] || [ "$errs" != 0 ] || [ "${bad:-0}" != 0 ]; then ok="FAILED: $non2xx non-2xx, $errs socket errors, $bad claims not won"; fi
  rows+=("| $1 | $(awk -v r="$rps" -v p="$per" 'BEGIN {printf "%d", r*p}') | $(awk -v r="$rps" 'BEGIN {printf "%d", r}') | $p50 | $p99 | $ok |")
  log "$1: $(awk -v r="$rps" -v p="$per" 'BEGIN {printf "%d", r*p}') claims/s ($ok)"
}

hport=$((PORT_BASE + 5)) rport=$((PORT_BASE + 6))
port_free 127.0.0.1 $hport
port_free 127.0.0.1 $rport
mkdir -p "$work/idem"
"$root/bin/idem" serve --data-dir "$work/idem" --http-addr 127.0.0.1:$hport --raft-addr 127.0.0.1:$rport \
  --log-level warn >"$work/idem.log" 2>&1 &
pids+=($!)
wait_for idem curl -fsS "http://127.0.0.1:$hport/readyz"
log "idem: wrk, $CLIENTS connections, $THREADS threads, $DURATION, one claim per request"
run_wrk "idem, 1 node, wrk, one claim per request" 0 "http://127.0.0.1:$hport"
if [ "$BATCH" -gt 0 ]; then
  log "idem: wrk, $BATCH claims per /v1/batch request"
  run_wrk "idem, 1 node, wrk, $BATCH claims per /v1/batch" "$BATCH" "http://127.0.0.1:$hport"
fi
stop_all

# ---------------------------------------------------------------- redis
port=$((PORT_BASE + 1))
port_free 127.0.0.1 $port
mkdir -p "$work/redis"
redis-server --bind 127.0.0.1 --port $port --dir "$work/redis" --daemonize no --save "" \
  --appendonly yes --appendfsync always --protected-mode no --logfile "" >"$work/redis.log" 2>&1 &
pids+=($!)
wait_for redis redis-cli -p $port ping
log "redis: redis-benchmark, $CLIENTS connections, $REQUESTS commands"
csv=$(redis-benchmark -h 127.0.0.1 -p $port -c "$CLIENTS" -n "$REQUESTS" -r 1000000000 --csv \
  SET k:__rand_int__ v NX PX 86400000 2>&1 | tail -1)
# "SET ...","rps","avg","min","p50","p95","p99","max"
IFS=, read -r _ rps _ _ p50 _ p99 _ <<<"$(echo "$csv" | tr -d '"')"
[ -n "$rps" ] || die "redis-benchmark printed no result: $csv"
rows+=("| Redis $(redis-server --version | sed 's/.*v=\([0-9.]*\).*/\1/'), AOF always, redis-benchmark | ${rps%.*} | ${rps%.*} | $p50 | $p99 | ok |")
stop_all

{
  echo "| system and load generator | claims/s | requests/s | p50 ms | p99 ms | check |"
  echo "|---|---:|---:|---:|---:|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "$(nproc) cores ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $CLIENTS connections, $DURATION per idem run, $(date -u +%F)."
  if [ "$BATCH" -gt 0 ]; then echo "Latency is per request: a /v1/batch request carries $BATCH claims."; fi
} | tee "$RESULTS"
