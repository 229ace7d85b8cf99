# Minimal repro for the disk-limit overshoot: W binary writers, values alternating SIZES (bytes, random = incompressible)
# usage: t3b_min.py LIMIT_MiB W SECONDS SEED SIZE[,SIZE...]
import sys, os, time, shutil, threading, random
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sc import *
LIM, W, SECS, SEED = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
SIZES = [int(x) for x in sys.argv[5].split(",")]
LIMIT = LIM << 20
DATA = "/tmp/strata-disk-attack-t3b-%d-%d-%d" % (LIM, W, SEED)
shutil.rmtree(DATA, ignore_errors=True)
node = start_node(DATA, 36800 + SEED * 2, mc=False, extra=["--disk-limit", "%dMiB" % LIM])
stop = threading.Event(); res = {}
def wr(i):
    c = Conn(node.port, timeout=30); r = random.Random(SEED * 100 + i); j = 0
    while not stop.is_set():
        n = SIZES[j % len(SIZES)]; j += 1
        s = c.set(b"w%d-%d" % (i, r.randrange(1000)), os.urandom(n)).sname
        res[s] = res.get(s, 0) + 1
ths = [threading.Thread(target=wr, args=(i,)) for i in range(W)]
[t.start() for t in ths]
end = time.time() + SECS; peak = peaka = 0; over = overa = n = 0; brk = None
while time.time() < end:
    files = {}
    for root, ds, fs in os.walk(DATA):
        for f in fs:
            try:
                st = os.lstat(os.path.join(root, f)); files[os.path.join(root, f)[len(DATA):]] = (st.st_size, st.st_blocks * 512)
            except OSError: pass
    s = sum(v[0] for v in files.values()); a = sum(v[1] for v in files.values()); n += 1
    if s > peak: peak, brk = s, files
    peaka = max(peaka, a); over += s > LIMIT; overa += a > LIMIT
    time.sleep(0.002)
stop.set(); [t.join(30) for t in ths]
print("limit %d MiB, %d writers, sizes %s: peak size %.3f MB = %.1f%% (allocated peak %.1f%%); %d of %d samples over (allocated: %d); %s" % (
    LIM, W, SIZES, peak / 1e6, 100.0 * peak / LIMIT, 100.0 * peaka / LIMIT, over, n, overa, res))
print("   at peak:", {k: v[0] for k, v in brk.items() if v[0]})
node.term(); rc, out = check(DATA); print("   check rc=%d %s" % (rc, out.strip().splitlines()[-1]))
