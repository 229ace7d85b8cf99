#!/usr/bin/env bash
# TLS against plaintext, Strata beside Redis, in one run of the same tool: one fresh Strata
# node (--threads 1) with its plaintext and TLS ports, and one redis-server (no persistence)
# with its plaintext and TLS ports, all with certificates from scripts/make-certs.sh; then
# strata-bench runs workload 1's mix (90 % GET / 10 % SET, 100 B values, 100,000 keys, 50
# connections) at pipeline 1 and at pipeline 16 against the four targets alternately and
# prints throughput, latency and the server's CPU per operation. Stops exactly what it started.
#
#   bench/tls.sh [SECONDS per target, default 5] [ROUNDS, default 1] [strata-bench run flags…]
#
# Extra flags go to strata-bench: `--tiers memory` keeps Strata's sets in the memory tier,
# like this Redis (no persistence); by default they are durable (the node's tiers).
# REDIS_AOF=1 runs Redis with `appendonly yes`, `appendfsync everysec` (Strata's default
# `--fsync everysec`): durable sets on both sides.
#
# Installs redis-server (Debian's is built with TLS) and openssl if missing (bench/need.sh);
# bench/RESULTS.md has figures.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-5}"
ROUNDS="${2:-1}"
shift $(( $# >= 2 ? 2 : $# ))
source bench/need.sh
need redis-server openssl
[ -n "${SKIP_BUILD:-}" ] || make -s release >/dev/null   # SKIP_BUILD=1: use the release build as it is
W=$(mktemp -d /tmp/strata-tlsbench-XXXXXX)
AOF="--appendonly no"; [ -n "${REDIS_AOF:-}" ] && AOF="--appendonly yes --appendfsync everysec"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
SP=$(free_port); ST=$(free_port); RP=$(free_port); RT=$(free_port)
scripts/make-certs.sh "$W/certs" 127.0.0.1 >/dev/null
.build/release/strata serve --port "$SP" --tls-port "$ST" --tls-cert "$W/certs/node.pem" --tls-key "$W/certs/node.key" \
  --data "$W/d" --threads 1 --log-level warn > "$W/node.out" 2>&1 &
N=$!
redis-server --port "$RP" --tls-port "$RT" --tls-cert-file "$W/certs/node.pem" --tls-key-file "$W/certs/node.key" \
  --tls-ca-cert-file "$W/certs/ca.pem" --tls-auth-clients no --save "" $AOF --daemonize no \
  --logfile "$W/redis.log" --dir "$W" &
R=$!
cleanup() { kill "$N" "$R" 2>/dev/null || true; wait "$N" "$R" 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
for p in "$SP" "$ST" "$RP" "$RT"; do
  for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null && break; sleep 0.1; done
done
for PIPE in 1 16; do
  echo "== pipeline $PIPE"
  .build/release/strata-bench run --target "strata=127.0.0.1:$SP" --target "strata+tls=127.0.0.1:$ST" \
    --target "redis=127.0.0.1:$RP" --target "redis+tls=127.0.0.1:$RT" \
    --server-pid "$N" --server-pid "$N" --server-pid "$R" --server-pid "$R" --tls-ca "$W/certs/ca.pem" \
    --value-size 100 --keys 100000 --connections 50 --pipeline "$PIPE" --duration "$SECS" --rounds "$ROUNDS" "$@"
done
