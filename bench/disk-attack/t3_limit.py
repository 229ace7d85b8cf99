# Test 3: the disk byte limit under attack: many writers over both protocols, values near TOO_LARGE.
# usage: t3_limit.py LIMIT(MiB) NBIN NMC SECONDS SIZEMODE SEED
#   SIZEMODE: edge (values just under/over the TOO_LARGE boundary), mixed (1 B..boundary), small (100 B..16 KiB)
import sys, os, random, time, shutil, signal, multiprocessing as mp
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sc import *

LIM_MB, NBIN, NMC, SECS, SIZEMODE, SEED = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], int(sys.argv[6])
LIMIT = LIM_MB << 20
DATA = "/tmp/strata-disk-attack-t3-%d-%s-%d" % (LIM_MB, SIZEMODE, SEED)
PORT, MCP = 36200 + (SEED % 40) * 2, 36201 + (SEED % 40) * 2

def find_boundary():
    c = Conn(PORT)
    lo, hi = 1000, 64 << 20
    while hi - lo > 1:
        mid = (lo + hi) // 2
        r = c.set(b"probe", os.urandom(mid), tiers=2)
        if r.status == OK: lo = mid
        elif r.status == 0x11: hi = mid
        else: raise RuntimeError(r.sname)
    c.delete(b"probe")
    c.close()
    return lo

def sizes(r, B):
    if SIZEMODE == "edge":
        return r.choice([B, B - 1, B + 1, B - 100, B // 2, B])
    if SIZEMODE == "mixed":
        return r.choice([1, 100, 4000, 30000, 100000, B // 2, B, B + 1])
    return r.randint(100, 16384)

def bin_proc(i, B, end, q, PORT):
    r = random.Random(SEED * 1000 + i)
    st = {}
    try:
        c = Conn(PORT, timeout=30)
        while time.time() < end:
            n = sizes(r, B)
            v = os.urandom(n) if r.random() < 0.7 else (b"x%d" % i) * (n // 2 + 1)
            v = v[:n]
            resp = c.set(b"b%d-%d" % (i, r.randrange(5000)), v)
            st[resp.sname] = st.get(resp.sname, 0) + 1
            if resp.status not in (OK, 0x11):
                st.setdefault("msgs", set()).add(resp.value[:100])
    except Exception as e:
        st["exc"] = repr(e)
    q.put(("bin", i, st))

def mc_proc(i, B, end, q, MCP):
    from pymemcache.client.base import Client as MC
    from pymemcache.exceptions import MemcacheServerError, MemcacheClientError
    r = random.Random(SEED * 2000 + i)
    st = {}
    try:
        c = MC(("127.0.0.1", MCP), timeout=30)
        while time.time() < end:
            n = sizes(r, B)
            v = os.urandom(n)
            try:
                ok = c.set("m%d-%d" % (i, r.randrange(5000)), v, noreply=False)
                st["STORED" if ok else "NOT_STORED"] = st.get("STORED" if ok else "NOT_STORED", 0) + 1
            except (MemcacheServerError, MemcacheClientError) as e:
                k = str(e)[:60]
                st[k] = st.get(k, 0) + 1
    except Exception as e:
        st["exc"] = repr(e)
    q.put(("mc", i, st))

if __name__ == "__main__":
    shutil.rmtree(DATA, ignore_errors=True)
    node = start_node(DATA, PORT, extra=["--disk-limit", "%dMiB" % LIM_MB] + (["--memory-limit", "0"] if SEED % 2 else []))
    PORT, MCP = node.port, node.mcport
    B = find_boundary()
    print("limit %d MiB: largest incompressible value accepted to disk = %d" % (LIM_MB, B), flush=True)
    q = mp.Queue()
    end = time.time() + SECS
    ps = [mp.Process(target=bin_proc, args=(i, B, end, q, PORT)) for i in range(NBIN)]
    ps += [mp.Process(target=mc_proc, args=(i, B, end, q, MCP)) for i in range(NMC)]
    for p in ps: p.start()
    peak, peakt, n = 0, 0, 0
    over = 0
    t0 = time.time()
    while time.time() < end + 1:
        s = dir_bytes(DATA); n += 1
        if s > peak:
            peak, peakt = s, time.time() - t0
            brk = {}
            for root, ds, fs in os.walk(DATA):
                for f in fs:
                    try: brk[os.path.join(root, f)[len(DATA):]] = os.path.getsize(os.path.join(root, f))
                    except OSError: pass
        if s > LIMIT: over += 1
        time.sleep(0.003)
    res = [q.get(timeout=60) for _ in ps]
    for p in ps: p.join(30)
    tot = {}
    for kind, i, st in res:
        for k, v in st.items():
            if k == "msgs": tot.setdefault("msgs", set()).update(v); continue
            if k == "exc": tot.setdefault("exc", []).append(v); continue
            tot[k] = tot.get(k, 0) + v
    c = Conn(PORT); s = c.stats(); c.close()
    print("files at peak (sampled just after):", {k: v for k, v in brk.items() if v > 0})
    print("peak dir %.3f MB = %.1f%% of limit at t=%.1fs; %d samples, %d over the limit; results %s" % (
        peak / 1e6, 100.0 * peak / LIMIT, peakt, n, over, tot))
    print("stats: disk_items=%s disk_evictions=%s log_backpressure_waits=%s disk_write_errors=%s log_write_errors=%s log_apply_errors=%s" % (
        s["disk_items"], s["disk_evictions"], s["log_backpressure_waits"], s["disk_write_errors"], s["log_write_errors"], s["log_apply_errors"]))
    node.term()
    rc, out = check(DATA)
    print("check rc=%d %s; final dir %.3f MB" % (rc, out.strip().splitlines()[-1], dir_bytes(DATA) / 1e6))
    if rc: print(out)
