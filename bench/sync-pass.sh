#!/usr/bin/env bash
#   bench/sync-pass.sh ROUNDS KEYS VALUE_SIZE BIN…
# Anti-entropy pass cost: per binary (alternating), two --cluster nodes,
# KEYS × VALUE loaded through the cluster client, then idle: anti-entropy µs per round on node A.
set -u
ROUNDS=$1; KEYS=$2; VALUE=$3; shift 3
cd "$(dirname "$0")/.."
BENCH=.build/release/strata-bench
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
st() { "$1" stats --json --server 127.0.0.1:$2 | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['sync_us'], d['sync_rounds'], d.get('sync_pulled',0), d.get('rows', d.get('disk_items','?')), d.get('sync_buckets_differing',0), d.get('sync_digests_maintained',0), d.get('sync_digests_passed',0))"; }
for r in $(seq 1 $ROUNDS); do
for B in "$@"; do
  W=$(mktemp -d /tmp/syncb-XXXX); PA=$(free_port); PB=$(free_port)
  CL=127.0.0.1:$PA,127.0.0.1:$PB
  "$B" serve --port $PA --data $W/a --cluster $CL --threads 1 --log-level warn > $W/a.log 2>&1 & A=$!
  "$B" serve --port $PB --data $W/b --cluster $CL --threads 1 --log-level warn > $W/b.log 2>&1 & Bp=$!
  for p in $PA $PB; do for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && break; sleep 0.1; done; done
  $BENCH run --target cluster=$CL --replicas 2 --keys $KEYS --value-size $VALUE --get-ratio 1 --duration 1 --connections 8 > /dev/null 2>&1
  sleep 8
  s0=$(st "$B" $PA); c0=$(awk '{print $14+$15}' /proc/$A/stat)
  sleep 60
  s1=$(st "$B" $PA); c1=$(awk '{print $14+$15}' /proc/$A/stat)
  python3 - "$B" "$s0" "$s1" "$c0" "$c1" <<'PY'
import sys
b,s0,s1,c0,c1=sys.argv[1:]
u0,r0,p0,_,b0,m0,q0=s0.split(); u1,r1,p1,n,b1,m1,q1=s1.split()
du=int(u1)-int(u0); dr=int(r1)-int(r0)
print(f"{b}: rounds {dr}, {du/max(dr,1)/1000:.1f} ms/round, idle cpu {(int(c1)-int(c0))/60:.2f} % of a core, pulled {int(p1)-int(p0)}, rows {n}, buckets differing {int(b1)-int(b0)}, digests maintained {int(m1)-int(m0)} passed {int(q1)-int(q0)}")
PY
  kill $A $Bp; wait $A $Bp 2>/dev/null; rm -rf $W
done; done
