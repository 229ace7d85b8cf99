# Strata binary-protocol client + node helpers (written from proto-spec/PROTOCOL.md only)
import os, socket, struct, subprocess, time, signal, json

import os as _os
BIN = _os.environ.get("BIN", _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "../../.build/release/strata"))
HDR = struct.Struct(">BBBBHBBHHIIQI")

OK, NOT_FOUND = 0, 1
STATUS = {0: "OK", 1: "NOT_FOUND", 2: "EXISTS", 3: "CAS_MISMATCH", 4: "SUPERSEDED", 0x10: "INVALID_ARGUMENT",
          0x11: "TOO_LARGE", 0x13: "MALFORMED", 0x20: "BUSY", 0x21: "DISK_FULL", 0x22: "SERVER_ERROR",
          0x23: "SHUTTING_DOWN", 0x24: "TOO_MANY_CONNECTIONS"}


class Resp:
    def __init__(self, op, status, tiers, cas, rflags, extras, value):
        self.op, self.status, self.tiers, self.cas, self.rflags = op, status, tiers, cas, rflags
        self.extras, self.value = extras, value

    @property
    def sname(self):
        return STATUS.get(self.status, hex(self.status))


class Conn:
    def __init__(self, port, host="127.0.0.1", timeout=10):
        self.s = socket.create_connection((host, port), timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rid = 0

    def close(self):
        try:
            self.s.close()
        except Exception:
            pass

    def _recvn(self, n):
        buf = bytearray()
        while len(buf) < n:
            c = self.s.recv(n - len(buf))
            if not c:
                raise ConnectionError("closed")
            buf += c
        return bytes(buf)

    def req(self, op, ns=b"", key=b"", extras=b"", value=b"", flags=0, tiers=0, cas=0):
        self.rid += 1
        body = len(extras) + len(ns) + len(key) + len(value)
        h = HDR.pack(0x53, 1, op, flags, 0, tiers, len(ns), len(key), len(extras), body, self.rid, cas, 0)
        self.s.sendall(h + extras + ns + key + value)
        while True:
            r = self._recvn(32)
            magic, ver, rop, rfl, st, rt, nsl, kl, el, bl, rid, rcas, rf = HDR.unpack(r)
            b = self._recvn(bl) if bl else b""
            if rid != self.rid:
                continue  # unsolicited
            ex = b[:el]
            val = b[el + nsl + kl:]
            return Resp(rop, st, rt, rcas, rf, ex, val)

    def set(self, key, value, ns=b"", tiers=0, ttl=None, mode=0, flags=0):
        exp = struct.pack(">Bq", 1, 0) if ttl is None else struct.pack(">Bq", 2, ttl)
        extras = struct.pack(">B", mode) + exp + struct.pack(">IQ", 0, 0)
        return self.req(0x12, ns, key, extras, value, flags=flags, tiers=tiers)

    def get(self, key, ns=b"", tiers=0):
        return self.req(0x10, ns, key, tiers=tiers)

    def delete(self, key, ns=b"", tiers=0):
        return self.req(0x13, ns, key, tiers=tiers)

    def flush(self, ns=b"", all_=False, tiers=0):
        return self.req(0x1A, ns, b"", flags=0x08 if all_ else 0, tiers=tiers)

    def stats(self):
        r = self.req(0x1B)
        return json.loads(r.value) if r.value[:1] == b"{" else r.value


def dir_bytes(d):
    tot = 0
    for root, dirs, files in os.walk(d):
        for f in files:
            try:
                tot += os.lstat(os.path.join(root, f)).st_blocks * 0  + os.lstat(os.path.join(root, f)).st_size
            except FileNotFoundError:
                pass
    return tot


def dir_alloc(d):
    tot = 0
    for root, dirs, files in os.walk(d):
        for f in files:
            try:
                tot += os.lstat(os.path.join(root, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return tot


class Node:
    def __init__(self, data, port, mcport=None, extra=(), log=None):
        self.data, self.port, self.mcport = data, port, mcport
        os.makedirs(data, exist_ok=True)
        args = [BIN, "serve", "--host", "127.0.0.1", "--port", str(port), "--data", data]
        if mcport:
            args += ["--memcached-port", str(mcport)]
        args += list(extra)
        self.args = args
        self.log = log or (data.rstrip("/") + ".log")
        self.logf = open(self.log, "ab")
        self.logf.write(("\n### start %s %s\n" % (time.strftime("%H:%M:%S"), " ".join(args))).encode())
        self.logf.flush()
        self.p = subprocess.Popen(args, stdout=self.logf, stderr=self.logf, start_new_session=True)
        self.pid = self.p.pid
        with open("/tmp/strata-disk-attack-pids.txt", "a") as f:
            f.write("%d %s\n" % (self.pid, data))
        self.wait_ready()

    def wait_ready(self, t=60):
        end = time.time() + t
        while time.time() < end:
            if self.p.poll() is not None:
                raise RuntimeError("node exited rc=%s (see %s)" % (self.p.returncode, self.log))
            try:
                c = Conn(self.port, timeout=2)
                r = c.req(0x02)
                c.close()
                if r.status == 0:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("node not ready")

    def mine(self):
        try:
            cmd = open("/proc/%d/cmdline" % self.pid, "rb").read().replace(b"\0", b" ").decode()
        except FileNotFoundError:
            return False
        return BIN in cmd and self.data in cmd

    def kill(self, sig=signal.SIGKILL):
        if self.p.poll() is None and self.mine():
            os.kill(self.pid, sig)
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            if self.mine():
                os.kill(self.pid, signal.SIGKILL)
            self.p.wait(timeout=10)
        self.logf.close()
        return self.p.returncode

    def term(self):
        return self.kill(signal.SIGTERM)


def check(data):
    p = subprocess.run([BIN, "check", "--data", data], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def logpath(data):
    return data.rstrip("/") + ".log"


def start_node(data, base, mc=True, extra=(), tries=20):
    """start a node on a free port pair near base (the ephemeral port range overlaps 33000-33990:
    a client TIME_WAIT socket on a port makes bind fail, an artifact of this environment)."""
    import random as _r
    for i in range(tries):
        p = base + 2 * i if i == 0 else 33000 + 2 * _r.randrange(0, 495)
        try:
            return Node(data, p, p + 1 if mc else None, extra=extra, log=logpath(data))
        except RuntimeError as e:
            txt = open(logpath(data)).read()
            if "Address already in use" in txt.splitlines()[-1]:
                continue
            raise
    raise RuntimeError("no free port")
