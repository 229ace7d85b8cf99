#!/usr/bin/env bash
# The standard suite: Strata beside memcached and Redis on this machine, one tool, one run.
#
#   bench/anchors.sh [SECONDS_PER_RUN] [ROUNDS]     (defaults 5 and 3)
#
# Installs memcached and redis-server from Debian if missing, starts every server on
# 127.0.0.1 on free ports with one worker thread each (memcached -t 1, Redis, Strata
# --threads 1: the other core is the load generator's), runs the workloads with targets
# alternating (A B C A B C …), stops exactly the processes it started, and writes a dated
# report with SVG charts under bench/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-5}"
ROUNDS="${2:-3}"
source bench/need.sh
need memcached redis-server
make -s release >/dev/null

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
WORK=$(mktemp -d /tmp/strata-anchors-XXXXXX)
PIDS=()
cleanup() {
  [ -f "$WORK/started.pids" ] && while read -r p; do kill "$p" 2>/dev/null || true; done < "$WORK/started.pids"
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
wait_port() { for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; return 1; }

MC_USER=$([ "$(id -u)" = 0 ] && echo "-u root" || echo "")
P_STRATA=$(free_port); P_MC=$(free_port); P_REDIS=$(free_port); P_REDIS_AOF=$(free_port)
.build/release/strata serve --host 127.0.0.1 --port "$P_STRATA" --data "$WORK/strata" --threads 1 --log-level warn > "$WORK/strata.out" 2>&1 &
PIDS+=($!)
memcached -l 127.0.0.1 -p "$P_MC" -t 1 -m 2048 -U 0 $MC_USER > "$WORK/mc.log" 2>&1 &
PIDS+=($!)
redis-server --bind 127.0.0.1 --port "$P_REDIS" --save '' --appendonly no --dir "$WORK" > "$WORK/redis.log" 2>&1 &
PIDS+=($!)
mkdir -p "$WORK/aof"
redis-server --bind 127.0.0.1 --port "$P_REDIS_AOF" --save '' --appendonly yes --appendfsync everysec --dir "$WORK/aof" > "$WORK/redis-aof.log" 2>&1 &
PIDS+=($!)
for p in "$P_STRATA" "$P_MC" "$P_REDIS" "$P_REDIS_AOF"; do wait_port "$p"; done

STAMP=$(date -u +%Y-%m-%d)
OUT="bench/results/$STAMP-anchors"
mkdir -p "$OUT"
REPORT="$OUT/report.md"
S="strata=127.0.0.1:$P_STRATA"; M="memcached=127.0.0.1:$P_MC"; R="redis=127.0.0.1:$P_REDIS"; RA="redis=127.0.0.1:$P_REDIS_AOF"
{
  echo "# Strata vs memcached vs Redis — $STAMP"
  echo
  echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr)."
  echo "Servers: one worker thread each; memcached $(memcached -V | cut -d' ' -f2), $(redis-server --version | cut -d' ' -f3), strata $(.build/release/strata --version | cut -d' ' -f2)."
  echo "Command: \`bench/anchors.sh $SECS $ROUNDS\` ($SECS s per run, $ROUNDS rounds, targets alternating; medians)."
  echo
} > "$REPORT"

run() { # NAME ARGS…
  local name="$1"; shift
  echo "running $name" >&2
  { echo "## $name"; echo; echo '```'; .build/release/strata-bench run "$@" --duration "$SECS" --rounds "$ROUNDS" --svg "$OUT/$name.svg" 2>/dev/null; echo '```'; echo "![$name]($name.svg)"; echo; } >> "$REPORT"
}

run 1-get90-100B-p1 --target "$S" --target "$M" --target "$R" --value-size 100 --keys 100000 --connections 50 --pipeline 1
run 2-get90-100B-p16 --target "$S" --target "$M" --target "$R" --value-size 100 --keys 100000 --connections 50 --pipeline 16
run 3-get90-10KiB-p1 --target "$S" --target "$M" --target "$R" --value-size 10KiB --keys 20000 --connections 50 --pipeline 1
run 4a-set-1KiB-durable --target "$S" --target "$RA" --get-ratio 0 --value-size 1KiB --keys 100000 --connections 50 --no-preload
run 4b-set-1KiB-writebehind --target "$S" --target "$M" --target "$R" --get-ratio 0 --value-size 1KiB --keys 100000 --connections 50 --no-preload --write-behind
run 5-zipf-get90-1KiB --target "$S" --target "$M" --target "$R" --zipf 0.99 --value-size 1KiB --keys 100000 --connections 50 --pipeline 1

# Starts a process in the background, remembered for cleanup; prints its PID.
# (Also called as $(start …), a subshell: the PID file, not PIDS, is what cleanup reads.)
start() { "$@" > "$WORK/proc-$RANDOM.log" 2>&1 & echo $! >> "$WORK/started.pids"; echo $!; }
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# 6. Disk-tier gets: 10 KiB values that live only on disk. Strata in its disk-only mode (keys
# written to and read from the disk tier) vs memcached with extstore and 128 MiB of memory for
# 300 MB of values (its flusher woken every 1 ms and 2 IO threads), both at 100 % hits: the
# preload is written at 5,000 sets/s (50 MB/s), which extstore's flusher keeps up with — an
# unthrottled preload outruns it and memcached drops 25–60 % of the items (cheap misses).
P_MCX=$(free_port)
MCX=$(start memcached -l 127.0.0.1 -p "$P_MCX" -t 1 -m 128 -U 0 $MC_USER \
  -o "ext_path=$WORK/extstore:2G,ext_wbuf_size=8,ext_threads=2,ext_max_sleep=1000,slab_automove_freeratio=0.10")
wait_port "$P_MCX"
run 6-disk-get-10KiB --target "$S" --target "memcached=127.0.0.1:$P_MCX" --get-ratio 1 --tiers disk --value-size 10KiB --keys 30000 --connections 50 --pipeline 1 --preload-rate 5000
stop "$MCX"

# 7. Memory: resident memory per item (beyond key and value) after loading, fresh servers each
# time (Strata with a memory tier large enough to hold everything, as the others do).
mem() { # NAME ITEMS VALUE_SIZE
  local pS pM pR a b c
  pS=$(free_port); pM=$(free_port); pR=$(free_port)
  a=$(start .build/release/strata serve --host 127.0.0.1 --port "$pS" --data "$WORK/mem-$1" --threads 1 --memory-limit 4GiB --disk-limit 8GiB --log-level warn)
  b=$(start memcached -l 127.0.0.1 -p "$pM" -t 1 -m 4096 -U 0 $MC_USER)
  c=$(start redis-server --bind 127.0.0.1 --port "$pR" --save '' --appendonly no --dir "$WORK")
  wait_port "$pS"; wait_port "$pM"; wait_port "$pR"
  echo "running $1" >&2
  { echo "## $1"; echo; echo '```'
    .build/release/strata-bench run --target "strata=127.0.0.1:$pS" --target "memcached=127.0.0.1:$pM" --target "redis=127.0.0.1:$pR" \
      --memory-report --keys "$2" --value-size "$3" --get-ratio 1 --ops 1 --connections 1 2>/dev/null | grep '^memory'
    echo '```'; echo; } >> "$REPORT"
  stop "$a"; stop "$b"; stop "$c"
}
mem 7a-memory-1M-100B 1000000 100
mem 7b-memory-100k-10KiB 100000 10KiB

# 8. A 3-node Strata cluster with R = 2 (nodes started with --cluster: anti-entropy on) against
# one node, both through the cluster client (workload 1's mix). On this 2-core machine the three
# nodes share the cores with the load. bench/cluster.sh isolates the cost of anti-entropy.
CP=(); CN=""
for i in 1 2 3; do p=$(free_port); CP+=("$p"); CN="$CN${CN:+,}127.0.0.1:$p"; done
for i in 0 1 2; do
  start .build/release/strata serve --host 127.0.0.1 --port "${CP[$i]}" --data "$WORK/cluster-$i" --threads 1 --log-level warn \
    --cluster "$CN" --replicas 2 > /dev/null
done
for p in "${CP[@]}"; do wait_port "$p"; done
run 8-cluster-3-nodes-R2 --target "cluster=$CN" --target "cluster=127.0.0.1:$P_STRATA" --replicas 2 --value-size 100 --keys 100000 --connections 50

echo "$REPORT"
