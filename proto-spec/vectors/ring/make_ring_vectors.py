#!/usr/bin/env python3
"""Writes ring placement vectors for RING.md, with a ring and XXH64 written here from the
document alone (pure Python, no dependencies).

    python3 proto-spec/vectors/ring/make_ring_vectors.py
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
M = (1 << 64) - 1
P1, P2, P3, P4, P5 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M


def rnd(acc, inp):
    return (rotl((acc + inp * P2) & M, 31) * P1) & M


def merge(acc, val):
    return (((acc ^ rnd(0, val)) * P1) + P4) & M


def xxh64(data, seed=0):
    n = len(data)
    i = 0
    if n >= 32:
        v1, v2, v3, v4 = (seed + P1 + P2) & M, (seed + P2) & M, seed, (seed - P1) & M
        while i + 32 <= n:
            v1 = rnd(v1, int.from_bytes(data[i:i + 8], "little"))
            v2 = rnd(v2, int.from_bytes(data[i + 8:i + 16], "little"))
            v3 = rnd(v3, int.from_bytes(data[i + 16:i + 24], "little"))
            v4 = rnd(v4, int.from_bytes(data[i + 24:i + 32], "little"))
            i += 32
        h = (rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18)) & M
        for v in (v1, v2, v3, v4):
            h = merge(h, v)
    else:
        h = (seed + P5) & M
    h = (h + n) & M
    while i + 8 <= n:
        h ^= rnd(0, int.from_bytes(data[i:i + 8], "little"))
        h = (rotl(h, 27) * P1 + P4) & M
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i:i + 4], "little") * P1) & M
        h = (rotl(h, 23) * P2 + P3) & M
        i += 4
    while i < n:
        h ^= (data[i] * P5) & M
        h = (rotl(h, 11) * P1) & M
        i += 1
    h ^= h >> 33
    h = (h * P2) & M
    h ^= h >> 29
    h = (h * P3) & M
    h ^= h >> 32
    return h


assert xxh64(b"") == 0xEF46DB3751D8E999 and xxh64(b"abc") == 0x44BC2CF5AD770999


def build(members, per_weight=512):
    """members: list of (name, weight). Returns sorted [(position, name)]."""
    seen, unique = set(), []
    for name, w in members:
        if name not in seen:
            seen.add(name)
            unique.append((name, w))
    unique.sort()
    pts = []
    for name, w in unique:
        count = int(per_weight * w + 0.5) if w > 0 else 0  # round half up
        for i in range(count):
            pts.append((xxh64(("%s-%d" % (name, i)).encode()), name))
    pts.sort()
    return pts, len(unique)


def place(ring, key, ns, count):
    pts, n = ring
    h = xxh64(key, xxh64(ns))
    lo, hi = 0, len(pts)
    while lo < hi:
        mid = (lo + hi) // 2
        if pts[mid][0] < h:
            lo = mid + 1
        else:
            hi = mid
    out, i, steps = [], (0 if lo == len(pts) else lo), 0
    while len(out) < min(count, n) and steps < len(pts):
        name = pts[i][1]
        if name not in out:
            out.append(name)
        i = (i + 1) % len(pts)
        steps += 1
    return h, out


SETS = {
    "three": [("127.0.0.1:7401", 1), ("127.0.0.1:7402", 1), ("127.0.0.1:7403", 1)],
    "weighted": [("cache-a.strata.svc:7400", 1), ("cache-b.strata.svc:7400", 2), ("cache-c.strata.svc:7400", 0.5)],
    "ten": [("10.0.0.%d:7400" % i, 1) for i in range(1, 11)],
}
KEYS = [(b"foo", b""), (b"bar", b""), (b"user:42", b"alice"), (b"https://example.com/a.png", b""),
        (b"k", b"ns"), (bytes(range(32)), b""), (b"\xff\x00\xfe", b"bin"), (b"session-7", b"bob")]


def main():
    for set_name, members in SETS.items():
        ring = build(members)
        lines = ["# ring vector: members, then one line per key", "# member NAME WEIGHT"]
        for name, w in members:
            lines.append("member %s %s" % (name, w))
        lines.append("# key NAMESPACE_HEX KEY_HEX POSITION_HEX OWNER REPLICA…  (R = 3; '-' = empty namespace)")
        for key, ns in KEYS:
            h, nodes = place(ring, key, ns, 3)
            lines.append("key %s %s %016x %s" % (ns.hex() or "-", key.hex(), h, " ".join(nodes)))
        with open(os.path.join(HERE, set_name + ".txt"), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
