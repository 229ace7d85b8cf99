"""pymemcache (PyPI) end to end against a Strata node's memcached listener.

Run by MemcachedClientTests with: python3 pymemcache_e2e.py PORT, and by MemcachedTLSTests
over TLS with: python3 pymemcache_e2e.py PORT CA.pem [CLIENT.pem CLIENT.key] (the node's
certificate checked against CA.pem and the name 127.0.0.1; a client certificate for mutual
TLS). Exits 0 when every check passes; prints each failed check and exits 1 otherwise.
"""
import ssl, sys, threading, time
from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheClientError, MemcacheUnknownCommandError

port = int(sys.argv[1])
addr = ("127.0.0.1", port)
tls = {}
if len(sys.argv) > 2:
    context = ssl.create_default_context(cafile=sys.argv[2])
    if len(sys.argv) > 4:
        context.load_cert_chain(sys.argv[3], sys.argv[4])
    tls = {"tls_context": context}
failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


class FlagsSerde:
    """Hands back (value, flags) so the flags travel untouched."""
    def serialize(self, key, value):
        return value, 0
    def deserialize(self, key, value, flags):
        return (value, flags)


c = Client(addr, default_noreply=False, connect_timeout=5, timeout=10, **tls)
f = Client(addr, default_noreply=False, serde=FlagsSerde(), timeout=10, **tls)

# version, verbosity, flush_all
v = c.version()
check(v.startswith(b"1.6."), "version is memcached-1.6 compatible: %r" % v)
check(c.raw_command(b"verbosity 1", b"\r\n") == b"OK", "verbosity")
check(c.flush_all() is True, "flush_all")

# set/get with flags, binary values, big values
binary = bytes(range(256)) + b"\r\nEND\r\n\x00"
check(c.set("bin", binary) is True, "set binary")
check(c.get("bin") == binary, "get binary round trip")
big = bytes((i * 7) % 256 for i in range(1 << 20))
check(c.set("big", big) is True, "set 1 MiB")
check(c.get("big") == big, "get 1 MiB")
check(c.set("flagged", b"x", flags=4294967295) is True, "set with flags")
check(f.get("flagged") == (b"x", 4294967295), "flags round trip: %r" % (f.get("flagged"),))
check(c.get("absent") is None, "miss is None")
check(c.set("k" * 250, b"long key") is True and c.get("k" * 250) == b"long key", "250-byte key")

# add/replace/append/prepend
check(c.add("fresh", b"1") is True, "add new")
check(c.add("fresh", b"2") is False, "add existing is NOT_STORED")
check(c.replace("fresh", b"3") is True, "replace existing")
check(c.replace("nothere", b"3") is False, "replace absent is NOT_STORED")
check(c.append("fresh", b"45") is True and c.prepend("fresh", b"0") is True, "append and prepend")
check(c.get("fresh") == b"0345", "append/prepend result: %r" % c.get("fresh"))
check(c.append("nothere", b"x") is False, "append to absent is NOT_STORED")
check(f.set("keepflags", b"a", flags=77) and c.append("keepflags", b"b") and f.get("keepflags") == (b"ab", 77), "append keeps flags")

# noreply: answers are not sent, the effects happen, and the connection stays in step
check(c.set("nr", b"v", noreply=True) is True, "set noreply")
c.add("nr", b"w", noreply=True)
c.append("nr", b"2", noreply=True)
c.delete("nr_absent", noreply=True)
c.incr("nr_absent", 1, noreply=True)
c.touch("nr", 100, noreply=True)
check(c.get("nr") == b"v2", "noreply effects, in order: %r" % c.get("nr"))
c.flush_all(noreply=True)
check(c.get("nr") is None, "flush_all noreply")

# multi-get
keys = ["m%d" % i for i in range(100)]
for k in keys[::2]:
    c.set(k, k.encode())
got = c.get_many(keys)
check(set(got) == set(keys[::2]) and all(got[k] == k.encode() for k in got), "get_many returns exactly the stored half")
gm = c.gets_many(keys[:4])
check(len(gm) == 2 and all(isinstance(cas, bytes) and cas.isdigit() for _, cas in gm.values()), "gets_many carries cas")

# cas: the unique changes on every write; a stale one is refused; absent is NOT_FOUND
c.set("cas", b"0")
val, cas = c.gets("cas")
check(val == b"0" and cas, "gets returns a cas unique")
check(c.cas("cas", b"1", cas) is True, "cas with the current unique stores")
check(c.cas("cas", b"2", cas) is False, "cas with a stale unique is EXISTS")
check(c.cas("cas_absent", b"2", cas) is None, "cas on an absent key is NOT_FOUND")
_, cas2 = c.gets("cas")
check(cas2 != cas, "a write gives a new cas unique")

# cas race: threads increment one counter through gets/cas; no update is lost
c.set("race", b"0")
N_THREADS, PER_THREAD = 8, 40
def racer():
    cl = Client(addr, default_noreply=False, timeout=10, **tls)
    done = 0
    while done < PER_THREAD:
        v, u = cl.gets("race")
        if cl.cas("race", str(int(v) + 1).encode(), u):
            done += 1
    cl.close()
threads = [threading.Thread(target=racer) for _ in range(N_THREADS)]
[t.start() for t in threads]
[t.join() for t in threads]
check(c.get("race") == str(N_THREADS * PER_THREAD).encode(), "cas race loses no update: %r" % c.get("race"))

# incr/decr: 64-bit, incr wraps, decr stops at 0, non-numeric refused, absent is None
c.set("n", b"18446744073709551615")
check(c.incr("n", 1) == 0, "incr wraps at 2^64")
check(c.decr("n", 5) == 0, "decr stops at 0")
check(c.incr("n", 10) == 10 and c.decr("n", 3) == 7, "incr/decr")
check(c.incr("n_absent", 1) is None and c.decr("n_absent", 1) is None, "incr/decr absent is NOT_FOUND")
c.set("text", b"abc")
try:
    c.incr("text", 1)
    check(False, "incr on a non-numeric value must fail")
except MemcacheClientError as e:
    check("non-numeric" in str(e), "incr non-numeric error: %s" % e)

# delete, touch, gat/gats
check(c.delete("text") is True, "delete existing")
check(c.delete("text") is False, "delete absent")
check(c.touch("n", 100) is True and c.touch("absent", 100) is False, "touch")
# (pymemcache 4 has no gat/gats methods: its raw interface sends them)
r = c.raw_command(b"gat 100 n", b"END\r\n")
check(r.startswith(b"VALUE n 0 1\r\n7\r\n"), "gat: %r" % r)
r = c.raw_command(b"gats 100 n absent", b"END\r\n")
parts = r.split(b"\r\n")[0].split(b" ")
check(len(parts) == 5 and parts[4].isdigit() and b"absent" not in r, "gats: %r" % r)

# expiry: negative = expired at once; relative; absolute; absolute in the past
check(c.set("neg", b"x", expire=-1) is True and c.get("neg") is None, "negative exptime expires at once")
c.set("past", b"x", expire=2592001)  # an absolute time in 1970
check(c.get("past") is None, "absolute exptime in the past expires at once")
c.set("rel", b"x", expire=1)
c.set("abs", b"x", expire=int(time.time()) + 2)
c.set("stay", b"x", expire=100)
check(c.get("rel") == b"x" and c.get("abs") == b"x", "not yet expired")
time.sleep(3.1)
check(c.get("rel") is None, "relative exptime expires")
check(c.get("abs") is None, "absolute exptime expires")
check(c.get("stay") == b"x", "a later expiry stays")
c.set("gone_by_touch", b"x")
c.touch("gone_by_touch", -1)
check(c.get("gone_by_touch") is None, "touch with a negative exptime expires")

# flush_all with a delay
c.set("delayed", b"x")
c.flush_all(delay=1)
check(c.get("delayed") == b"x", "flush_all delay: still there")
time.sleep(2)
check(c.get("delayed") is None, "flush_all delay: gone after the delay")

# stats
st = c.stats()
st = {(k.decode() if isinstance(k, bytes) else k): v for k, v in st.items()}
for name in ["pid", "uptime", "time", "version", "curr_items", "total_items", "bytes", "get_hits", "get_misses",
             "cmd_get", "cmd_set", "cmd_flush", "cmd_touch", "curr_connections", "total_connections", "evictions",
             "limit_maxbytes", "threads"]:
    check(name in st, "stats has %s" % name)
check(int(st.get("cmd_flush", 0)) >= 3, "cmd_flush counts: %r" % st.get("cmd_flush"))
check(int(st.get("get_hits", 0)) > 0 and int(st.get("get_misses", 0)) > 0, "get hits and misses counted")

# errors as memcached gives them
try:
    c.raw_command(b"bogus", b"\r\n")
    check(False, "an unknown command must fail")
except MemcacheUnknownCommandError:
    check(True, "unknown command is ERROR")
try:
    c.raw_command(b"get " + b"k" * 251, b"\r\n")
    check(False, "a 251-byte key must fail")
except MemcacheClientError as e:
    check("bad command line format" in str(e), "251-byte key: %s" % e)


# meta commands through pymemcache's raw interface
def raw(cmd, end=b"\r\n"):
    return c.raw_command(cmd, end)
c.set("mk", b"hi", flags=7, expire=90)
r = raw(b"mg mk t f v c s k O123", b"hi\r\n")
head = r.split(b"\r\n")[0].split(b" ")
check(head[0] == b"VA" and head[1] == b"2" and head[2].startswith(b"t") and head[3] == b"f7" and head[4].startswith(b"c")
      and head[5] == b"s2" and head[6] == b"kmk" and head[7] == b"O123", "mg return flags in order: %r" % r)
gets_cas = c.gets("mk")[1]
check(head[4] == b"c" + gets_cas, "mg c is gets' cas unique")
check(raw(b"mg absent v") == b"EN", "mg miss is EN")
# (raw_command returns what came before the end token)
check(raw(b"mg absent v q\r\nmn", b"MN\r\n") == b"", "mg q suppresses EN; mn answers MN")
check(raw(b"ms mk2 3 T0 F5\r\nabc") == b"HD", "ms stores")
check(f.get("mk2") == (b"abc", 5), "ms flags through get")
check(raw(b"ms mk2 1 ME\r\nx") == b"NS", "ms ME (add) on an existing key is NS")
check(raw(b"ms mk2 1 MA\r\n!") == b"HD" and c.get("mk2") == b"abc!", "ms MA appends")
check(raw(b"ms mk2 1 C1\r\nz") == b"EX", "ms with a stale C is EX")
_, u = c.gets("mk2")
check(raw(b"ms mk2 1 C" + u + b" c\r\nz").startswith(b"HD c"), "ms with the current C stores and returns the new cas")
check(raw(b"md mk2") == b"HD" and raw(b"md mk2") == b"NF", "md")
check(raw(b"ma mcount") == b"NF", "ma on a missing key is NF")
check(raw(b"ma mcount N0 J10 v", b"10\r\n") == b"VA 2\r\n", "ma N autovivifies with J")
check(raw(b"ma mcount MD D3 v", b"7\r\n") == b"VA 1\r\n", "ma MD D3 decrements")
check(c.get("mcount") == b"7", "ma result through get")
check(raw(b"mg " + b"bWs=" + b" b v k", b"hi\r\n").startswith(b"VA 2 b kbWs="), "base64 key (b)")
check(raw(b"me mk").startswith(b"ME mk exp="), "me")
# leases and stale-while-revalidate: one winner (W), the others told it is being filled (Z)
check(raw(b"mg lease_k N30 v", b"\r\n\r\n") == b"VA 0 W", "mg N on a miss wins (W)")
check(raw(b"mg lease_k N30 v", b"\r\n\r\n") == b"VA 0 Z", "the next mg N is told someone fills (Z)")
check(raw(b"ms lease_k 4\r\nfill") == b"HD" and c.get("lease_k") == b"fill", "the winner fills with ms")
check(raw(b"md lease_k I") == b"HD", "md I invalidates")
check(raw(b"mg lease_k v", b"fill\r\n") == b"VA 4 W X\r\n", "a stale item: X, and W for the first")
check(raw(b"mg lease_k v", b"fill\r\n") == b"VA 4 Z X\r\n", "a stale item: Z for the next")

# quit closes; the client reconnects on its next command
c.set("after", b"quit")
c.quit()
check(c.get("after") == b"quit", "reconnect after quit")

if tls:
    sock = c.sock
    check(isinstance(sock, ssl.SSLSocket) and sock.version() in ("TLSv1.2", "TLSv1.3"),
          "the connection is TLS: %r" % (sock.version() if isinstance(sock, ssl.SSLSocket) else sock))
print("%d checks, %d failed" % (checks, len(failures)))
sys.exit(1 if failures else 0)
