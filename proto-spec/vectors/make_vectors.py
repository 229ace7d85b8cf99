#!/usr/bin/env python3
"""Writes the golden frames of PROTOCOL.md into this folder.

An independent encoder written from the spec alone (it shares no code with StrataWire), so
the Swift codec is checked against a second reading of the document. Run it from anywhere:
    python3 proto-spec/vectors/make_vectors.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
REQ, RESP = 0x53, 0x73
OPS = dict(HELLO=0x01, PING=0x02, QUIT=0x03, GET=0x10, MGET=0x11, SET=0x12, DELETE=0x13, TOUCH=0x14,
           EXISTS=0x15, INCR=0x16, DECR=0x17, META=0x18, SCAN=0x19, FLUSH=0x1A, STATS=0x1B,
           INVALIDATE=0x20, RELEASE=0x21, IMAGE_INFO=0x30, IMAGE_VARIANT=0x31, SYNC_DIGEST=0x40, SYNC_KEYS=0x41, SYNC_CHECK=0x42)
QUIET, WRITE_BEHIND, WANT_META, ALL, VALIDATE_IMAGE = 0x01, 0x02, 0x04, 0x08, 0x10
LEASE, NEGATIVE_FLAG, STALE_FLAG = 0x20, 0x40, 0x80
R_STALE, R_LEASE, R_FILLING, R_UNVERIFIED = 0x1, 0x2, 0x4, 0x8  # response flags (the header's last word)
OK, NOT_FOUND, EXISTS, CAS_MISMATCH, SUPERSEDED, NOT_A_NUMBER, NEGATIVE, LEASE_LOST = 0, 1, 2, 3, 4, 5, 6, 7
TOKEN = 0x00000000075BCD15  # stands for a lease token a node granted (real ones are random, §7.4.1)
INVALID_ARGUMENT, TOO_LARGE, UNKNOWN_OPCODE, MALFORMED, AUTH_REQUIRED, AUTH_FAILED = 0x10, 0x11, 0x12, 0x13, 0x14, 0x15
UNSUPPORTED_VERSION, FORBIDDEN = 0x16, 0x17
BUSY, DISK_FULL, SERVER_ERROR, SHUTTING_DOWN, TOO_MANY_CONNECTIONS, INVALID_IMAGE = 0x20, 0x21, 0x22, 0x23, 0x24, 0x25
UNVERIFIED = 0x26
VERIFIED_ONLY = 0x08  # INCR/DECR/TOUCH (the bit FLUSH calls ALL)
V = 0x0001800000000001  # stands for a version a node assigns
# A 1×1 RGBA PNG that decodes (for VALIDATE_IMAGE).
DOT_PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
                        "0000000d4944415478da63f8cfc0f01f00050001ff56c72f0d0000000049454e44ae426082")
# The derived key of logo.png's 128×128 contain WebP q80 variant at version V (§7.16).
VARIANT_KEY = b"logo.png\x00variant:%x:w=128,h=128,fit=contain,fmt=webp,q=80" % V


def frame(magic, op, rid, flags=0, status=0, tiers=0, cas=0, extras=b"", ns=b"", key=b"", value=b"", version=1, rflags=0):
    body = extras + ns + key + value
    head = struct.pack(">BBBBHBBHHIIQI", magic, version, op, flags, status, tiers, len(ns), len(key), len(extras),
                       len(body), rid, cas, rflags)
    assert len(head) == 32
    return head + body


def expiry(kind, value=0):
    return struct.pack(">Bq", kind, value)


def set_extras(mode=0, exp=expiry(0), flags=0, version=0, ext=b""):
    return struct.pack(">B", mode) + exp + struct.pack(">IQ", flags, version) + ext


def get_extras(flags, expires, ext=b"", meta=None):
    out = struct.pack(">IqH", flags, expires, len(ext)) + ext
    if meta:
        out += struct.pack(">BBI", *meta)
    return out


CASES = []


def case(name, what, req, resp, varies="—"):
    """`varies`: the response fields that differ between runs or implementations (README)."""
    CASES.append((name, what, req, resp, varies))


case("hello", "HELLO with a token to a node: version 1, authenticated, and the version it started at (§7.1)",
     frame(REQ, OPS["HELLO"], 1, extras=bytes([1, 1]), value=b"secret"),
     frame(RESP, OPS["HELLO"], 1, extras=bytes([1, 1]) + struct.pack(">Q", 0x0001700000000000), value=b"strata 0.1.0"),
     "start version; server name")
case("hello_fresh", "HELLO without a token to a node without one that reports start version 0 (a node before this revision, on a fresh data directory: nothing to verify; clients must accept 0)",
     frame(REQ, OPS["HELLO"], 4, extras=bytes([1, 1])),
     frame(RESP, OPS["HELLO"], 4, extras=bytes([1, 1]) + struct.pack(">Q", 0), value=b"strata 0.1.0"),
     "server name")
case("hello_unsupported", "HELLO offering versions 2–3 only: UNSUPPORTED_VERSION; the connection stays open",
     frame(REQ, OPS["HELLO"], 5, extras=bytes([2, 3])),
     frame(RESP, OPS["HELLO"], 5, status=UNSUPPORTED_VERSION, value=b"this node speaks protocol version 1 only"))
case("hello_auth_failed", "HELLO with a wrong token: AUTH_FAILED, then the node closes",
     frame(REQ, OPS["HELLO"], 6, extras=bytes([1, 1]), value=b"wrong"),
     frame(RESP, OPS["HELLO"], 6, status=AUTH_FAILED, value=b"wrong token"))
case("ping", "PING and its empty OK",
     frame(REQ, OPS["PING"], 2), frame(RESP, OPS["PING"], 2))
case("quit", "QUIT: OK, then the node closes",
     frame(REQ, OPS["QUIT"], 3), frame(RESP, OPS["QUIT"], 3))
case("set_basic", "SET foo=bar!! with a 60 s TTL and flags 42 (the annotated example of §8)",
     frame(REQ, OPS["SET"], 7, extras=set_extras(0, expiry(2, 60), 42), key=b"foo", value=b"bar!!"),
     frame(RESP, OPS["SET"], 7, cas=V), "version")
case("set_ns_disk_ext", "SET in namespace alice, disk tier only, write-behind, extended data 01 02, caller version 500",
     frame(REQ, OPS["SET"], 8, flags=WRITE_BEHIND, tiers=2,
           extras=set_extras(0, expiry(1), 0, 500, b"\x01\x02"), ns=b"alice", key=b"img", value=b"\x89PNG"),
     frame(RESP, OPS["SET"], 8, flags=WRITE_BEHIND, cas=500))
case("set_add_exists", "SET mode add on a present key: EXISTS",
     frame(REQ, OPS["SET"], 9, extras=set_extras(1), key=b"foo", value=b"x"),
     frame(RESP, OPS["SET"], 9, status=EXISTS))
case("set_cas_mismatch", "SET mode cas with a stale version: CAS_MISMATCH carrying the stored version",
     frame(REQ, OPS["SET"], 10, cas=V - 1, extras=set_extras(3), key=b"foo", value=b"y"),
     frame(RESP, OPS["SET"], 10, status=CAS_MISMATCH, cas=V), "version (and the request's, V − 1: a version older than the stored one)")
case("set_superseded", "SET of img in namespace alice with caller version 400 when 500 is stored: SUPERSEDED",
     frame(REQ, OPS["SET"], 11, extras=set_extras(0, expiry(0), 0, 400), key=b"img", ns=b"alice", value=b"old"),
     frame(RESP, OPS["SET"], 11, status=SUPERSEDED, cas=500))
case("set_quiet", "SET with QUIET: no response on success (the .resp file is empty)",
     frame(REQ, OPS["SET"], 12, flags=QUIET, extras=set_extras(), key=b"q", value=b"1"), b"")
case("set_stale", "SET with STALE: stores page already marked stale (a replica copying a stale item)",
     frame(REQ, OPS["SET"], 14, flags=STALE_FLAG, extras=set_extras(), key=b"page", value=b"v1"),
     frame(RESP, OPS["SET"], 14, flags=STALE_FLAG, cas=V + 8), "version")
case("set_validate_image_ok", "SET with VALIDATE_IMAGE of a 1×1 PNG that decodes: stored",
     frame(REQ, OPS["SET"], 15, flags=VALIDATE_IMAGE, extras=set_extras(), key=b"dot.png", value=DOT_PNG),
     frame(RESP, OPS["SET"], 15, flags=VALIDATE_IMAGE, cas=V + 9), "version")
case("get_hit", "GET foo: a memory hit (tiers 1) with flags 42, expiry at a fixed time, no extended data",
     frame(REQ, OPS["GET"], 20, key=b"foo"),
     frame(RESP, OPS["GET"], 20, tiers=1, cas=V, extras=get_extras(42, 1764400000000000), value=b"bar!!"),
     "version; expires at")
case("get_miss", "GET of an absent key: NOT_FOUND, empty body",
     frame(REQ, OPS["GET"], 21, key=b"nope"), frame(RESP, OPS["GET"], 21, status=NOT_FOUND))
case("get_touch_meta", "GET of img in namespace alice from the disk tier, an item stored on disk only, touching it (TTL 300 s) and asking for metadata: tiers present 2 (disk), raw, 4 bytes stored",
     frame(REQ, OPS["GET"], 22, flags=WANT_META, tiers=2, extras=expiry(2, 300), ns=b"alice", key=b"img"),
     frame(RESP, OPS["GET"], 22, flags=WANT_META, tiers=2, cas=V + 1,
           extras=get_extras(0, 1764400300000000, b"\x01\x02", (2, 0, 4)), value=b"\x89PNG"),
     "version; expires at; encoding and stored size")
case("mget", "MGET of two keys, one found",
     frame(REQ, OPS["MGET"], 23, value=struct.pack(">HH", 2, 3) + b"foo" + struct.pack(">H", 4) + b"nope"),
     frame(RESP, OPS["MGET"], 23, value=b"\x01" + struct.pack(">IqQI", 42, 0, V, 5) + b"bar!!" + b"\x00"),
     "version (value bytes 13–20)")
case("delete", "DELETE foo",
     frame(REQ, OPS["DELETE"], 30, key=b"foo"), frame(RESP, OPS["DELETE"], 30))
case("get_tombstone", "GET of a key deleted with version 900: NOT_FOUND carrying the tombstone's version",
     frame(REQ, OPS["GET"], 24, key=b"ghost"), frame(RESP, OPS["GET"], 24, status=NOT_FOUND, cas=900))
case("delete_versioned_miss", "DELETE with version 900 of an absent key: NOT_FOUND (a tombstone is left)",
     frame(REQ, OPS["DELETE"], 31, extras=struct.pack(">Q", 900), key=b"ghost"),
     frame(RESP, OPS["DELETE"], 31, status=NOT_FOUND))
case("touch", "TOUCH foo to expire at an absolute time (2100-01-01, so a replay leaves foo live)",
     frame(REQ, OPS["TOUCH"], 32, extras=expiry(3, 4102444800000000), key=b"foo"),
     frame(RESP, OPS["TOUCH"], 32, cas=V + 2), "version")
case("touch_versioned", "TOUCH foo with caller version 900, older than the V + 2 foo holds: SUPERSEDED with that version, nothing changed",
     frame(REQ, OPS["TOUCH"], 34, extras=expiry(2, 600) + struct.pack(">Q", 900), key=b"foo"),
     frame(RESP, OPS["TOUCH"], 34, status=SUPERSEDED, cas=V + 2), "version")
case("exists", "EXISTS foo",
     frame(REQ, OPS["EXISTS"], 33, key=b"foo"), frame(RESP, OPS["EXISTS"], 33))
case("incr_initial", "INCR hits by 5 with initial 10 when absent: stores 10",
     frame(REQ, OPS["INCR"], 40, extras=struct.pack(">QBQ", 5, 1, 10) + expiry(0), key=b"hits"),
     frame(RESP, OPS["INCR"], 40, cas=V + 3, extras=struct.pack(">Q", 10)), "version")
case("decr", "DECR hits by 3",
     frame(REQ, OPS["DECR"], 41, extras=struct.pack(">QBQ", 3, 0, 0) + expiry(0), key=b"hits"),
     frame(RESP, OPS["DECR"], 41, cas=V + 4, extras=struct.pack(">Q", 7)), "version")
case("incr_versioned", "INCR hits by 1 with caller version 900, older than the V + 4 hits holds (a late INCR): SUPERSEDED with that version, nothing changed",
     frame(REQ, OPS["INCR"], 44, extras=struct.pack(">QBQ", 1, 0, 0) + expiry(0) + struct.pack(">Q", 900), key=b"hits"),
     frame(RESP, OPS["INCR"], 44, status=SUPERSEDED, cas=V + 4), "version")
case("incr_not_a_number", "INCR of a value that is not a counter",
     frame(REQ, OPS["INCR"], 42, extras=struct.pack(">QBQ", 1, 0, 0) + expiry(0), key=b"foo"),
     frame(RESP, OPS["INCR"], 42, status=NOT_A_NUMBER,
           value="the stored value is not a decimal counter (1–20 digits, at most 2^64−1)".encode()))
case("incr_bad_initial", "INCR with has initial 2: INVALID_ARGUMENT",
     frame(REQ, OPS["INCR"], 43, extras=struct.pack(">QBQ", 1, 2, 0) + expiry(0), key=b"hits"),
     frame(RESP, OPS["INCR"], 43, status=INVALID_ARGUMENT, value=b"has initial must be 0 or 1, not 2"))
case("meta", "META of a zstd-compressed item present in both tiers",
     frame(REQ, OPS["META"], 50, key=b"doc"),
     frame(RESP, OPS["META"], 50, cas=V, extras=struct.pack(">BBIqqQIIBIIBH", 3, 1, 10240, 2100, 0, V, 7, 0, 0, 0, 0, 0, 0)),
     "version (CAS and extras bytes 22–29); stored size")
case("meta_image", "META of a PNG: format 1 (png), 640×480, with alpha, one frame",
     frame(REQ, OPS["META"], 51, key=b"logo.png"),
     frame(RESP, OPS["META"], 51, cas=V, extras=struct.pack(">BBIqqQIIBIIBH", 3, 0, 5120, 5120, 0, V, 0, 0, 1, 640, 480, 1, 1)),
     "version (CAS and extras bytes 22–29); the value's size (extras bytes 2–5: the PNG file's own, 5120 stands for it), encoding and stored size")
case("set_validate_image_refused", "SET with VALIDATE_IMAGE of a truncated PNG: INVALID_IMAGE with the reason",
     frame(REQ, OPS["SET"], 13, flags=VALIDATE_IMAGE, extras=set_extras(), key=b"bad.png", value=bytes([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])),
     frame(RESP, OPS["SET"], 13, flags=VALIDATE_IMAGE, status=INVALID_IMAGE, value=b"PNG header: read beyond end of data"))
case("image_info", "IMAGE_INFO of a stored PNG: format 1, 640×480, alpha, one frame",
     frame(REQ, OPS["IMAGE_INFO"], 100, key=b"logo.png"),
     frame(RESP, OPS["IMAGE_INFO"], 100, cas=V, extras=struct.pack(">BIIBH", 1, 640, 480, 1, 1)), "version")
case("image_variant", "IMAGE_VARIANT 128×128, contain, WebP quality 80 (the response value is abbreviated to 4 bytes here)",
     frame(REQ, OPS["IMAGE_VARIANT"], 101, key=b"logo.png", extras=struct.pack(">HHBBB", 128, 128, 0, 0, 80)),
     frame(RESP, OPS["IMAGE_VARIANT"], 101, cas=V, extras=struct.pack(">HHB", 128, 96, 0), value=b"RIFF"),
     "version; value (the image bytes) and body length")
case("scan", "SCAN the default namespace from the start, limit 2: two keys and a cursor",
     frame(REQ, OPS["SCAN"], 60, extras=struct.pack(">I", 2)),
     frame(RESP, OPS["SCAN"], 60, extras=struct.pack(">I", 2), key=b"b",
           value=struct.pack(">H", 1) + b"a" + struct.pack(">H", 1) + b"b"))
case("scan_empty_page", "SCAN after logo.png, limit 1, when the next key is a stored variant of logo.png (its derived key, §7.16) and m follows: no keys, and the derived key as the cursor — the scan goes on",
     frame(REQ, OPS["SCAN"], 61, extras=struct.pack(">I", 1), key=b"logo.png"),
     frame(RESP, OPS["SCAN"], 61, extras=struct.pack(">I", 0), key=VARIANT_KEY),
     "the cursor (key field and body length: it holds the original's version)")
case("flush_ns", "FLUSH namespace alice",
     frame(REQ, OPS["FLUSH"], 70, ns=b"alice"), frame(RESP, OPS["FLUSH"], 70))
case("flush_versioned", "FLUSH namespace alice with version 900 (a flush mark, §7.12 \"In a cluster\"): on a node started with --cluster, OK with CAS = the mark, and the node's items of alice older than 900 go. 900 stands for a version within the tombstone lifetime (24 h) of the node's clock: an older one is INVALID_ARGUMENT, and a node without --cluster answers INVALID_ARGUMENT",
     frame(REQ, OPS["FLUSH"], 73, ns=b"alice", extras=struct.pack(">Q", 900)), frame(RESP, OPS["FLUSH"], 73, cas=900))
case("flush_all", "FLUSH with flag ALL",
     frame(REQ, OPS["FLUSH"], 71, flags=ALL), frame(RESP, OPS["FLUSH"], 71, flags=ALL))
case("stats", "STATS: a JSON object (a small sample; real nodes send many more counters)",
     frame(REQ, OPS["STATS"], 80),
     frame(RESP, OPS["STATS"], 80, value=b'{"version":"0.1.0","uptime_s":5}'),
     "value (the JSON) and body length")
case("flush_memory", "FLUSH namespace alice in the memory tier only (tiers 1): memory emptied, the disk keeps every item (§7.12)",
     frame(REQ, OPS["FLUSH"], 72, tiers=1, ns=b"alice"), frame(RESP, OPS["FLUSH"], 72))
case("stats_namespace", "STATS group namespace (key `namespace`) for namespace alice: its counters as JSON (§7.13.1)",
     frame(REQ, OPS["STATS"], 81, ns=b"alice", key=b"namespace"),
     frame(RESP, OPS["STATS"], 81, value=b'{"namespace":"alice","namespace_hex":"616c696365","items":2,"bytes":8,'
                                       b'"hits":1,"misses":1,"sets":2,"writes":2}'),
     "value (the JSON) and body length")
case("stats_namespaces", "STATS group namespaces (key `namespaces`): the busiest namespaces up to the node's limit, the rest summed (§7.13.1)",
     frame(REQ, OPS["STATS"], 82, key=b"namespaces"),
     frame(RESP, OPS["STATS"], 82, value=b'{"namespaces_known":3,"namespaces_listed":1,"limit":1,"namespaces":[{"namespace":"alice",'
                                       b'"namespace_hex":"616c696365","items":2,"bytes":8,"hits":1,"misses":1,"sets":2,"writes":2}],'
                                       b'"other":{"namespaces":2,"items":1,"bytes":1,"hits":0,"misses":0,"sets":1,"writes":1}}'),
     "value (the JSON) and body length")
# Read-through (§7.4.1, §7.17, §7.18).
case("get_lease_granted", "GET with LEASE of a missing key: NOT_FOUND, response flag LEASE, the token in the key field",
     frame(REQ, OPS["GET"], 110, flags=LEASE, key=b"cold"),
     frame(RESP, OPS["GET"], 110, flags=LEASE, status=NOT_FOUND, rflags=R_LEASE, key=struct.pack(">Q", TOKEN)), "token")
case("get_lease_filling", "GET with LEASE while another client holds the lease: NOT_FOUND, response flag FILLING",
     frame(REQ, OPS["GET"], 111, flags=LEASE, key=b"cold"),
     frame(RESP, OPS["GET"], 111, flags=LEASE, status=NOT_FOUND, rflags=R_FILLING))
case("get_lease_refresh_ahead", "GET of key hot with LEASE and a 5000 ms refresh-ahead window, a hit (value warm) expiring within it: the value and the lease",
     frame(REQ, OPS["GET"], 112, flags=LEASE, extras=struct.pack(">I", 5000), key=b"hot"),
     frame(RESP, OPS["GET"], 112, flags=LEASE, tiers=1, cas=V, rflags=R_LEASE, extras=get_extras(0, 1764400003000000),
           key=struct.pack(">Q", TOKEN + 1), value=b"warm"),
     "version; expires at; token")
case("get_stale", "GET of an invalidated key: OK with the old value and response flag STALE",
     frame(REQ, OPS["GET"], 113, key=b"page"),
     frame(RESP, OPS["GET"], 113, tiers=1, cas=V + 5, rflags=R_STALE, extras=get_extras(0, 0), value=b"v1"), "version")
case("get_negative", "GET of a negative entry: NEGATIVE, the failure's message as the value",
     frame(REQ, OPS["GET"], 114, key=b"bad-url"),
     frame(RESP, OPS["GET"], 114, status=NEGATIVE, tiers=1, cas=V + 6, extras=get_extras(0, 1764400030000000), value=b"HTTP 404"),
     "version; expires at")
case("set_lease", "SET mode lease (4) of key cold (value loaded, expiry 600 s) with the token in the CAS field: fills the key and releases the lease",
     frame(REQ, OPS["SET"], 115, cas=TOKEN, extras=set_extras(4, expiry(2, 600)), key=b"cold", value=b"loaded"),
     frame(RESP, OPS["SET"], 115, cas=V + 7), "version (the request carries the token the node granted)")
case("set_lease_lost", "SET mode lease whose lease expired or was revoked: LEASE_LOST, nothing stored",
     frame(REQ, OPS["SET"], 116, cas=TOKEN, extras=set_extras(4), key=b"cold", value=b"late"),
     frame(RESP, OPS["SET"], 116, status=LEASE_LOST,
           value=b"the lease expired or was revoked (the key was written, deleted, invalidated or flushed); the value was not stored"),
     "— (the request carries a token the node granted)")
case("set_negative", "SET with NEGATIVE: remember for 30 s that bad-url failed to load",
     frame(REQ, OPS["SET"], 117, flags=NEGATIVE_FLAG, extras=set_extras(0, expiry(2, 30)), key=b"bad-url", value=b"HTTP 404"),
     frame(RESP, OPS["SET"], 117, flags=NEGATIVE_FLAG, cas=V + 6), "version")
case("invalidate", "INVALIDATE page: marked stale with a new version",
     frame(REQ, OPS["INVALIDATE"], 118, key=b"page"),
     frame(RESP, OPS["INVALIDATE"], 118, cas=V + 5), "version")
case("invalidate_quiet", "INVALIDATE page with QUIET: the OK is still sent (§2.1)",
     frame(REQ, OPS["INVALIDATE"], 121, flags=QUIET, key=b"page"),
     frame(RESP, OPS["INVALIDATE"], 121, flags=QUIET, cas=V + 10), "version")
case("invalidate_versioned", "INVALIDATE of key page in the disk tier (tiers 2) with caller version 400 when 500 is stored (a late replica copy): SUPERSEDED",
     frame(REQ, OPS["INVALIDATE"], 119, tiers=2, extras=struct.pack(">Q", 400), key=b"page"),
     frame(RESP, OPS["INVALIDATE"], 119, status=SUPERSEDED, cas=500))
case("release", "RELEASE a lease without filling (the loader failed)",
     frame(REQ, OPS["RELEASE"], 120, cas=TOKEN, key=b"cold"),
     frame(RESP, OPS["RELEASE"], 120), "— (the request carries the token the node granted)")
case("release_not_found", "RELEASE with a token that no longer holds the lease (it expired): NOT_FOUND",
     frame(REQ, OPS["RELEASE"], 122, cas=TOKEN, key=b"cold"),
     frame(RESP, OPS["RELEASE"], 122, status=NOT_FOUND))
# Errors (§2.2, §6). Messages are this node's exact text.
case("get_unverified", "GET foo from a node that has not caught up with the key's other replicas since it started (§7.19): OK with response flag UNVERIFIED",
     frame(REQ, OPS["GET"], 130, key=b"foo"),
     frame(RESP, OPS["GET"], 130, tiers=2, cas=V, rflags=R_UNVERIFIED, extras=get_extras(0, 0), value=b"bar!!"), "version")
case("incr_unverified", "INCR hits by 1 with caller version V + 9 and flag VERIFIED_ONLY, on a node that has not caught up with the key's other replicas (§7.19): UNVERIFIED, nothing done — the caller decides on another replica",
     frame(REQ, OPS["INCR"], 131, flags=VERIFIED_ONLY, extras=struct.pack(">QBQ", 1, 0, 0) + expiry(0) + struct.pack(">Q", V + 9), key=b"hits"),
     frame(RESP, OPS["INCR"], 131, flags=VERIFIED_ONLY, status=UNVERIFIED,
           value=b"this node has not caught up with the key's other replicas since it started, was paused or lost contact with them; nothing was done: decide on another replica"))

MASK64 = (1 << 64) - 1
P1, P2, P3, P4, P5 = 11400714785074694791, 14029467366897019727, 1609587929392839161, 9650029242287828579, 2870177450012600261

def xxh64(data, seed=0):
    """XXH64 (as xxhash.h specifies it), for the member-list digest of §7.19."""
    rotl = lambda x, r: ((x << r) | (x >> (64 - r))) & MASK64
    def rnd(acc, lane):
        return (rotl((acc + lane * P2) & MASK64, 31) * P1) & MASK64
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & MASK64, (seed + P2) & MASK64, seed, (seed - P1) & MASK64]
        while i + 32 <= n:
            for j in range(4):
                v[j] = rnd(v[j], struct.unpack_from("<Q", data, i + 8 * j)[0])
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & MASK64
        for j in range(4):
            h = ((h ^ rnd(0, v[j])) * P1 + P4) & MASK64
    else:
        h = (seed + P5) & MASK64
    h = (h + n) & MASK64
    while i + 8 <= n:
        h = (rotl(h ^ rnd(0, struct.unpack_from("<Q", data, i)[0]), 27) * P1 + P4) & MASK64
        i += 8
    if i + 4 <= n:
        h = (rotl(h ^ (struct.unpack_from("<I", data, i)[0] * P1 & MASK64), 23) * P2 + P3) & MASK64
        i += 4
    while i < n:
        h = (rotl(h ^ (data[i] * P5 & MASK64), 11) * P1) & MASK64
        i += 1
    h ^= h >> 33; h = (h * P2) & MASK64
    h ^= h >> 29; h = (h * P3) & MASK64
    return h ^ (h >> 32)

DIGESTS = [0] * 16
DIGESTS[3], DIGESTS[9] = 0x0123456789ABCDEF, 0xFEDCBA9876543210
case("sync_digest", "SYNC_DIGEST from peer 10.0.0.2:7400 with 16 buckets (4 bits), versions up to V: 2 entries, in buckets 3 and 9 (§7.19)",
     frame(REQ, OPS["SYNC_DIGEST"], 131, extras=struct.pack(">BQ", 4, V), key=b"10.0.0.2:7400"),
     frame(RESP, OPS["SYNC_DIGEST"], 131, extras=struct.pack(">I", 2), value=b"".join(struct.pack(">Q", d) for d in DIGESTS)),
     "the digests, which are this node's entries' (and the entry count)")
MEMBERS = b"10.0.0.1:7400\n10.0.0.2:7400\n10.0.0.4:7400\nreplicas=2"
OWN_MEMBERS = b"10.0.0.1:7400\n10.0.0.2:7400\nreplicas=2"
case("sync_digest_members", "SYNC_DIGEST from peer 10.0.0.2:7400 that runs another member list (a rolling change): the extras end with its list's digest, XXH64 of the value, which is the list (10.0.0.1:7400, 10.0.0.2:7400, 10.0.0.4:7400, replicas=2); this node (10.0.0.1:7400, on the list 10.0.0.1:7400, 10.0.0.2:7400, replicas=2) answers the digests of what both hold by that list, then its own list (§7.19 \"Member lists\")",
     frame(REQ, OPS["SYNC_DIGEST"], 134, extras=struct.pack(">BQQ", 4, V, xxh64(MEMBERS)), key=b"10.0.0.2:7400", value=MEMBERS),
     frame(RESP, OPS["SYNC_DIGEST"], 134, extras=struct.pack(">I", 2), value=b"".join(struct.pack(">Q", d) for d in DIGESTS) + OWN_MEMBERS),
     "the digests, which are this node's entries' (and the entry count); the member list after them, which is this node's (and the body length)")
case("sync_keys", "SYNC_KEYS from peer 10.0.0.2:7400 for buckets 3 and 9 (4 bits, max version V + 1): foo at version V, and alice's gone deleted at V + 1; both buckets covered (§7.19)",
     frame(REQ, OPS["SYNC_KEYS"], 132, extras=struct.pack(">BQ", 4, V + 1), key=b"10.0.0.2:7400", value=struct.pack(">II", 3, 9)),
     frame(RESP, OPS["SYNC_KEYS"], 132, extras=struct.pack(">II", 2, 2),
           value=b"\x00" + struct.pack(">H", 3) + b"foo" + struct.pack(">QB", V, 0)
                 + b"\x05alice" + struct.pack(">H", 4) + b"gone" + struct.pack(">QB", V + 1, 1)),
     "the entries, which are this node's (and the count and body length)")
case("sync_check", "SYNC_CHECK from peer 10.0.0.2:7400 (hinted handoff) listing two writes it accepted: foo at version V, and alice's gone deleted at V + 1; this node lacks the second (§7.19)",
     frame(REQ, OPS["SYNC_CHECK"], 133, extras=struct.pack(">I", 2), key=b"10.0.0.2:7400",
           value=b"\x00" + struct.pack(">H", 3) + b"foo" + struct.pack(">QB", V, 0)
                 + b"\x05alice" + struct.pack(">H", 4) + b"gone" + struct.pack(">QB", V + 1, 1)),
     frame(RESP, OPS["SYNC_CHECK"], 133, extras=struct.pack(">I", 1), value=struct.pack(">I", 1)),
     "the indices, which depend on what this node holds")
case("error_unknown_opcode", "An unknown opcode 0x7f: UNKNOWN_OPCODE with a message; the connection stays open",
     frame(REQ, 0x7F, 90), frame(RESP, 0x7F, 90, status=UNKNOWN_OPCODE, value=b"unknown opcode 0x7f"))
case("error_auth_required", "GET before HELLO on a node with a token: AUTH_REQUIRED",
     frame(REQ, OPS["GET"], 91, key=b"foo"),
     frame(RESP, OPS["GET"], 91, status=AUTH_REQUIRED, value=b"authenticate with HELLO first"))
case("error_invalid_flag", "SET carrying WANT_META, a flag SET does not take: INVALID_ARGUMENT (§2.1)",
     frame(REQ, OPS["SET"], 92, flags=WANT_META, extras=set_extras(), key=b"foo", value=b"x"),
     frame(RESP, OPS["SET"], 92, flags=WANT_META, status=INVALID_ARGUMENT, value=b"flag bits 0x4 do not apply to set"))
case("error_wrong_extras", "TOUCH with 8 bytes of extras (an Expiry is 9): MALFORMED; the connection stays open",
     frame(REQ, OPS["TOUCH"], 93, extras=expiry(2, 60)[:8], key=b"foo"),
     frame(RESP, OPS["TOUCH"], 93, status=MALFORMED, value=b"touch: extras too short (8 bytes)"))
case("error_unsupported_version", "PING with proto version 2 in its header: UNSUPPORTED_VERSION (the response carries version 1); the connection stays open",
     frame(REQ, OPS["PING"], 94, version=2),
     frame(RESP, OPS["PING"], 94, status=UNSUPPORTED_VERSION, value=b"protocol version 2 is not spoken here (only 1)"))
case("error_bad_magic", "32 bytes of HTTP (`GET / HTTP/1.1`…) instead of a frame: MALFORMED with request id 0 and opcode 0, then the node closes",
     b"GET / HTTP/1.1\r\nHost: strata\r\n\r\n",
     frame(RESP, 0, 0, status=MALFORMED, value=b"bad magic 0x47 (expected 0x53)"))
case("error_too_large_frame", "A SET header claiming a 20,000-byte body, before authentication on a node with a token (limit 16 KiB): TOO_LARGE with the frame's id and opcode (flags 0), then the node closes. The request file holds only the header: the node answers once it has read it",
     struct.pack(">BBBBHBBHHIIQI", REQ, 1, OPS["SET"], 0, 0, 0, 0, 3, 22, 20000, 95, 0, 0),
     frame(RESP, OPS["SET"], 95, status=TOO_LARGE, value=b"frame body of 20000 bytes is over the limit of 16384"),
     "the limit in the message (and body length)")
case("error_forbidden", "SET in namespace other by user app1 (readwrite, namespaces app1 and tenant-*): FORBIDDEN, nothing stored; the connection stays open (§4.1)",
     frame(REQ, OPS["SET"], 94, extras=set_extras(), ns=b"other", key=b"k", value=b"v"),
     frame(RESP, OPS["SET"], 94, status=FORBIDDEN, value=b"user 'app1' (readwrite) may not use namespace 'other' (SET)"),
     "the message, which names the user, its role, the namespace and the operation (and body length)")
case("error_busy", "GET foo while the node's buffered bytes are over its limit: BUSY",
     frame(REQ, OPS["GET"], 96, key=b"foo"),
     frame(RESP, OPS["GET"], 96, status=BUSY, value=b"the node is at its buffered-bytes limit; retry later"),
     "the message, which names the limit reached (and body length)")
case("error_disk_full", "SET to a node whose file system is full (data directory ./strata-data): DISK_FULL, nothing stored",
     frame(REQ, OPS["SET"], 97, extras=set_extras(), key=b"blob", value=b"data"),
     frame(RESP, OPS["SET"], 97, status=DISK_FULL, value=b"disk full while writing (./strata-data); nothing was stored"),
     "the message, which names the data directory (and body length)")
case("error_server_error", "SET when the node could not write its durability log (an I/O error): SERVER_ERROR",
     frame(REQ, OPS["SET"], 98, extras=set_extras(), key=b"blob", value=b"data"),
     frame(RESP, OPS["SET"], 98, status=SERVER_ERROR, value=b"writing the log failed: Input/output error"),
     "the message, which is the failure's (and body length)")
case("error_shutting_down", "GET foo arriving while the node drains: SHUTTING_DOWN",
     frame(REQ, OPS["GET"], 99, key=b"foo"),
     frame(RESP, OPS["GET"], 99, status=SHUTTING_DOWN, value=b"the node is shutting down"))
case("shutting_down_close", "Unsolicited (no request): SHUTTING_DOWN with opcode 0 and request id 0, sent before the draining node closes a connection, and to a connection accepted while it drains",
     b"", frame(RESP, 0, 0, status=SHUTTING_DOWN, value=b"the node is shutting down"))
case("too_many_connections", "Unsolicited (no request): TOO_MANY_CONNECTIONS with opcode 0 and request id 0, sent to a connection accepted at the limit (10,000), which is then closed",
     b"", frame(RESP, 0, 0, status=TOO_MANY_CONNECTIONS, value=b"too many connections (limit 10000)"),
     "the limit in the message (and body length)")

def hexlines(b):
    out = []
    for i in range(0, len(b), 16):
        out.append(" ".join("%02x" % x for x in b[i:i + 16]))
    return "\n".join(out) + ("\n" if out else "")


README_HEAD = """# Golden frames

Written by `make_vectors.py` (an encoder written from PROTOCOL.md alone). Each case has
`NAME.req.hex` (what a client sends) and `NAME.resp.hex` (what the node answers); hex text,
whitespace ignored. An empty `.resp.hex` means no response (QUIET); an empty `.req.hex`, a
response the node sends unprompted (opcode 0, request id 0; PROTOCOL.md §3). Request ids are
arbitrary (`error_unsupported_version` and `error_forbidden` share 0x5e); read every field —
key, tiers, extras — from the hex, as the descriptions name only what the case is about.

Each case is one exchange with a node in the state its description gives; the cases are not
one session. The column *varies* names the response fields a node may answer differently
from run to run; compare a live answer with those fields masked and everything else byte for
byte:

- **version**: the CAS field, and a version inside extras or value where the row says so.
  `0001800000000001` (V) stands for a version the node assigns and V + n for later ones; a
  real node's versions come from its clock.
- **expires at**: GET's `i64 expires at` (extras bytes 4–11), computed from the node's clock.
- **token**: the lease token in the response's key field; tokens are random per grant
  (PROTOCOL.md §7.4.1). `00000000075bcd15` stands for one.
- **start version**: HELLO's extras bytes 2–9.
- **server name**: HELLO's value (`strata` and its release) and the body length.
- **encoding and stored size**: the disk copy's, which depend on the node's compression.
- A field named as the message, the value or the cursor: those bytes and the header's body
  length (bytes 12–15).

A request that carries what a node handed out — a stored version (`set_cas_mismatch`), a lease
token (`set_lease`, `set_lease_lost`, `release`, `release_not_found`) — must carry the live one
in a real run. Messages are this node's exact text; another implementation of PROTOCOL.md
words its own, so it compares the status and masks every message (and the body length).

| case | what it shows | varies |
|---|---|---|"""


def main():
    lines = [README_HEAD]
    for name, what, req, resp, varies in CASES:
        with open(os.path.join(HERE, name + ".req.hex"), "w") as f:
            f.write(hexlines(req))
        with open(os.path.join(HERE, name + ".resp.hex"), "w") as f:
            f.write(hexlines(resp))
        lines.append("| `%s` | %s | %s |" % (name, what, varies))
    with open(os.path.join(HERE, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    write_appendix()


def write_appendix():
    """Puts every case, request and response in hex, into PROTOCOL.md between the markers."""
    spec = os.path.join(HERE, "..", "PROTOCOL.md")
    with open(spec) as f:
        text = f.read()
    begin, end = "<!-- vectors:begin -->", "<!-- vectors:end -->"
    out = [begin, ""]
    for name, what, req, resp, _ in CASES:
        out.append("### %s" % name)
        out.append("")
        out.append(what + ".")
        out.append("")
        out.append("```")
        out.append("request:" + ("" if req else " (none)"))
        if req:
            out.append(hexlines(req).rstrip("\n"))
        out.append("response:" + ("" if resp else " (none)"))
        if resp:
            out.append(hexlines(resp).rstrip("\n"))
        out.append("```")
        out.append("")
    out.append(end)
    a, b = text.index(begin), text.index(end) + len(end)
    text = text[:a] + "\n".join(out) + text[b:]
    with open(spec, "w") as f:
        f.write(text)

if __name__ == "__main__":
    main()
