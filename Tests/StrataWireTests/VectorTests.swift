import Foundation
import XCTest
@testable import StrataWire

/// Replays every golden frame in proto-spec/vectors: the decoder reads it, the typed layer
/// parses it, and the encoder writes the very same bytes back.
final class VectorTests: XCTestCase {
    static let dir = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("proto-spec/vectors")
    let V: UInt64 = 0x0001_8000_0000_0001

    func load(_ name: String) throws -> [UInt8] {
        let text = try String(contentsOf: Self.dir.appendingPathComponent(name), encoding: .utf8)
        return try XCTUnwrap(hexBytes(text), "bad hex in \(name)")
    }

    let server = FrameDecoder(magic: Wire.requestMagic, maxBody: 1 << 20)
    let client = FrameDecoder(magic: Wire.responseMagic, maxBody: 1 << 20)

    /// A 1×1 RGBA PNG that decodes (make_vectors.py's DOT_PNG).
    static let dotPNG: [UInt8] = [
        0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52, 0x00,
        0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4, 0x89, 0x00,
        0x00, 0x00, 0x0D, 0x49, 0x44, 0x41, 0x54, 0x78, 0xDA, 0x63, 0xF8, 0xCF, 0xC0, 0xF0, 0x1F, 0x00, 0x05,
        0x00, 0x01, 0xFF, 0x56, 0xC7, 0x2F, 0x0D, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44, 0xAE, 0x42,
        0x60, 0x82,
    ]

    /// make_vectors.py's MEMBERS: a member list as §7.19 "Member lists" writes it (its XXH64,
    /// 0xaf5e6c1210ada5d5, is checked against StrataCore's by the node's tests).
    static let memberList = Array("10.0.0.1:7400\n10.0.0.2:7400\n10.0.0.4:7400\nreplicas=2".utf8)

    /// The derived key of logo.png's 128×128 contain WebP q80 variant at version V (§7.16).
    var variantKey: [UInt8] {
        Array("logo.png".utf8) + [0] + Array("variant:\(String(V, radix: 16)):w=128,h=128,fit=contain,fmt=webp,q=80".utf8)
    }

    /// Vectors with no typed request/response pair in `cases()`: the node refuses the request
    /// (or sends the frame unprompted); `testErrorVectors` checks each.
    static let errorVectors: Set<String> = [
        "error_unknown_opcode", "error_auth_required", "error_invalid_flag", "error_wrong_extras", "error_unsupported_version",
        "incr_bad_initial", "error_bad_magic", "error_too_large_frame", "shutting_down_close", "too_many_connections",
    ]

    /// Each case: the typed request the .req bytes must parse to, and the response the node
    /// would build (nil when there is none).
    func cases() -> [(String, Request, (Frame) -> Frame?)] {
        func expiry(_ e: WireExpiry) -> WireExpiry { e }
        var setBasic = SetRequest(key: Array("foo".utf8), value: Array("bar!!".utf8))
        setBasic.expiry = .seconds(60); setBasic.flags = 42
        var setNs = SetRequest(key: Array("img".utf8), value: [0x89, 0x50, 0x4E, 0x47], namespace: Array("alice".utf8))
        setNs.expiry = .never; setNs.version = 500; setNs.extended = [1, 2]; setNs.tiers = 2; setNs.writeBehind = true
        var setAdd = SetRequest(key: Array("foo".utf8), value: Array("x".utf8)); setAdd.mode = .add
        var setCas = SetRequest(key: Array("foo".utf8), value: Array("y".utf8)); setCas.mode = .cas; setCas.casVersion = V - 1
        var setOld = SetRequest(key: Array("img".utf8), value: Array("old".utf8), namespace: Array("alice".utf8)); setOld.version = 400
        let setQuiet = SetRequest(key: Array("q".utf8), value: Array("1".utf8))
        var incr = CounterRequest(key: Array("hits".utf8), delta: 5); incr.initial = 10
        let decr = CounterRequest(key: Array("hits".utf8), delta: 3, decrement: true)
        let incrBad = CounterRequest(key: Array("foo".utf8), delta: 1)
        var incrLate = CounterRequest(key: Array("hits".utf8), delta: 1); incrLate.version = 900
        var incrFenced = CounterRequest(key: Array("hits".utf8), delta: 1); incrFenced.version = V + 9; incrFenced.verifiedOnly = true
        let foo = Array("foo".utf8)
        var validateSet = SetRequest(key: Array("bad.png".utf8), value: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        validateSet.validateImage = true
        let token: UInt64 = 0x075B_CD15
        var setLease = SetRequest(key: Array("cold".utf8), value: Array("loaded".utf8)); setLease.mode = .lease; setLease.casVersion = token
        setLease.expiry = .seconds(600)
        var setLeaseLost = SetRequest(key: Array("cold".utf8), value: Array("late".utf8)); setLeaseLost.mode = .lease; setLeaseLost.casVersion = token
        var setNegative = SetRequest(key: Array("bad-url".utf8), value: Array("HTTP 404".utf8)); setNegative.negative = true
        setNegative.expiry = .seconds(30)
        var setStale = SetRequest(key: Array("page".utf8), value: Array("v1".utf8)); setStale.stale = true
        var setDot = SetRequest(key: Array("dot.png".utf8), value: Self.dotPNG); setDot.validateImage = true
        let setBlob = SetRequest(key: Array("blob".utf8), value: Array("data".utf8))
        let variantKey = self.variantKey
        return [
            ("get_lease_granted", .get(GetRequest(key: Array("cold".utf8), lease: true)),
             { Responses.withLease(Responses.status(to: $0, .notFound), token: token) }),
            ("get_lease_filling", .get(GetRequest(key: Array("cold".utf8), lease: true)),
             { Responses.withLease(Responses.status(to: $0, .notFound), token: nil) }),
            ("get_lease_refresh_ahead", .get(GetRequest(key: Array("hot".utf8), lease: true, refreshAheadMillis: 5000)),
             { Responses.withLease(Responses.get(to: $0, ItemPayload(value: Array("warm".utf8), flags: 0, expiresAt: 1_764_400_003_000_000,
                                                                     extended: [], version: self.V, tier: 1)), token: token + 1) }),
            ("get_stale", .get(GetRequest(key: Array("page".utf8))),
             { Responses.get(to: $0, ItemPayload(value: Array("v1".utf8), flags: 0, expiresAt: 0, extended: [], version: self.V + 5,
                                                 tier: 1, stale: true)) }),
            ("get_unverified", .get(GetRequest(key: foo)),
             { var f = Responses.get(to: $0, ItemPayload(value: Array("bar!!".utf8), flags: 0, expiresAt: 0, extended: [], version: self.V, tier: 2))
               f.responseFlags |= ResponseFlags.unverified.rawValue
               return f }),
            ("sync_digest", .syncDigest(SyncRequest(requester: Array("10.0.0.2:7400".utf8), bucketBits: 4, maxVersion: V)),
             { var d = [UInt64](repeating: 0, count: 16)
               d[3] = 0x0123_4567_89AB_CDEF; d[9] = 0xFEDC_BA98_7654_3210
               return Responses.syncDigest(to: $0, digests: d, entries: 2) }),
            ("sync_digest_members", .syncDigest(SyncRequest(requester: Array("10.0.0.2:7400".utf8), bucketBits: 4, maxVersion: V,
                                                             members: 0xAF5E_6C12_10AD_A5D5, memberList: Self.memberList)),
             { var d = [UInt64](repeating: 0, count: 16)
               d[3] = 0x0123_4567_89AB_CDEF; d[9] = 0xFEDC_BA98_7654_3210
               return Responses.syncDigest(to: $0, digests: d, entries: 2, memberList: Array("10.0.0.1:7400\n10.0.0.2:7400\nreplicas=2".utf8)) }),
            ("sync_keys", .syncKeys(SyncRequest(requester: Array("10.0.0.2:7400".utf8), bucketBits: 4, maxVersion: V + 1, buckets: [3, 9])),
             { Responses.syncKeys(to: $0, entries: [SyncKeyEntry(namespace: [], key: Array("foo".utf8), version: self.V, tombstone: false),
                                                    SyncKeyEntry(namespace: Array("alice".utf8), key: Array("gone".utf8), version: self.V + 1, tombstone: true)],
                                  bucketsCovered: 2) }),
            ("sync_check", .syncCheck(SyncCheck(requester: Array("10.0.0.2:7400".utf8),
                                                entries: [SyncKeyEntry(namespace: [], key: Array("foo".utf8), version: V, tombstone: false),
                                                          SyncKeyEntry(namespace: Array("alice".utf8), key: Array("gone".utf8), version: V + 1, tombstone: true)])),
             { Responses.syncCheck(to: $0, lacking: [1]) }),
            ("get_negative", .get(GetRequest(key: Array("bad-url".utf8))),
             { Responses.get(to: $0, ItemPayload(value: Array("HTTP 404".utf8), flags: 0, expiresAt: 1_764_400_030_000_000, extended: [],
                                                 version: self.V + 6, tier: 1, negative: true)) }),
            ("set_lease", .set(setLease), { Responses.status(to: $0, .ok, cas: self.V + 7) }),
            ("set_lease_lost", .set(setLeaseLost),
             { Responses.error(to: $0, .leaseLost, "the lease expired or was revoked (the key was written, deleted, invalidated or flushed); the value was not stored") }),
            ("set_negative", .set(setNegative), { Responses.status(to: $0, .ok, cas: self.V + 6) }),
            ("invalidate", .invalidate(namespace: [], key: Array("page".utf8), tiers: 0, version: nil), { Responses.status(to: $0, .ok, cas: self.V + 5) }),
            ("invalidate_versioned", .invalidate(namespace: [], key: Array("page".utf8), tiers: 2, version: 400),
             { Responses.status(to: $0, .superseded, cas: 500) }),
            ("release", .release(namespace: [], key: Array("cold".utf8), token: token), { Responses.status(to: $0, .ok) }),
            ("hello", .hello(minVersion: 1, maxVersion: 1, token: Array("secret".utf8)),
             { Responses.hello(to: $0, version: 1, authenticated: true, startVersion: 0x0001_7000_0000_0000, server: "strata 0.1.0") }),
            ("hello_fresh", .hello(minVersion: 1, maxVersion: 1, token: []),
             { Responses.hello(to: $0, version: 1, authenticated: true, startVersion: 0, server: "strata 0.1.0") }),
            ("hello_unsupported", .hello(minVersion: 2, maxVersion: 3, token: []),
             { Responses.error(to: $0, .unsupportedVersion, "this node speaks protocol version 1 only") }),
            ("hello_auth_failed", .hello(minVersion: 1, maxVersion: 1, token: Array("wrong".utf8)),
             { Responses.error(to: $0, .authFailed, "wrong token") }),
            ("set_stale", .set(setStale), { Responses.status(to: $0, .ok, cas: self.V + 8) }),
            ("set_validate_image_ok", .set(setDot), { Responses.status(to: $0, .ok, cas: self.V + 9) }),
            ("invalidate_quiet", .invalidate(namespace: [], key: Array("page".utf8), tiers: 0, version: nil),
             { Responses.status(to: $0, .ok, cas: self.V + 10) }),
            ("release_not_found", .release(namespace: [], key: Array("cold".utf8), token: token), { Responses.status(to: $0, .notFound) }),
            ("scan_empty_page", .scan(namespace: [], cursor: Array("logo.png".utf8), limit: 1),
             { Responses.scan(to: $0, keys: [], next: variantKey) }),
            ("error_forbidden", .set(SetRequest(key: Array("k".utf8), value: Array("v".utf8), namespace: Array("other".utf8))),
             { Responses.error(to: $0, .forbidden, "user 'app1' (readwrite) may not use namespace 'other' (SET)") }),
            ("error_busy", .get(GetRequest(key: foo)),
             { Responses.error(to: $0, .busy, "the node is at its buffered-bytes limit; retry later") }),
            ("error_disk_full", .set(setBlob),
             { Responses.error(to: $0, .diskFull, "disk full while writing (./strata-data); nothing was stored") }),
            ("error_server_error", .set(setBlob), { Responses.error(to: $0, .serverError, "writing the log failed: Input/output error") }),
            ("error_shutting_down", .get(GetRequest(key: foo)), { Responses.error(to: $0, .shuttingDown, "the node is shutting down") }),
            ("ping", .ping, { Responses.status(to: $0, .ok) }),
            ("quit", .quit, { Responses.status(to: $0, .ok) }),
            ("set_basic", .set(setBasic), { Responses.status(to: $0, .ok, cas: self.V) }),
            ("set_ns_disk_ext", .set(setNs), { Responses.status(to: $0, .ok, cas: 500) }),
            ("set_add_exists", .set(setAdd), { Responses.status(to: $0, .exists) }),
            ("set_cas_mismatch", .set(setCas), { Responses.status(to: $0, .casMismatch, cas: self.V) }),
            ("set_superseded", .set(setOld), { Responses.status(to: $0, .superseded, cas: 500) }),
            ("set_quiet", .set(setQuiet), { _ in nil }),
            ("get_hit", .get(GetRequest(key: foo)),
             { Responses.get(to: $0, ItemPayload(value: Array("bar!!".utf8), flags: 42, expiresAt: 1_764_400_000_000_000,
                                                 extended: [], version: self.V, tier: 1)) }),
            ("get_miss", .get(GetRequest(key: Array("nope".utf8))), { Responses.status(to: $0, .notFound) }),
            ("get_tombstone", .get(GetRequest(key: Array("ghost".utf8))), { Responses.status(to: $0, .notFound, cas: 900) }),
            ("get_touch_meta", .get(GetRequest(key: Array("img".utf8), namespace: Array("alice".utf8), tiers: 2,
                                               touch: .seconds(300), wantMeta: true)),
             { Responses.get(to: $0, ItemPayload(value: [0x89, 0x50, 0x4E, 0x47], flags: 0, expiresAt: 1_764_400_300_000_000,
                                                 extended: [1, 2], version: self.V + 1, tier: 2,
                                                 meta: MetaBlock(tiersPresent: 2, encoding: 0, storedSize: 4))) }),
            ("mget", .mget(namespace: [], keys: [foo, Array("nope".utf8)], tiers: 0),
             { Responses.mget(to: $0, [MGetItem(flags: 42, expiresAt: 0, version: self.V, value: Array("bar!!".utf8)), nil]) }),
            ("delete", .delete(namespace: [], key: foo, tiers: 0, version: nil, writeBehind: false), { Responses.status(to: $0, .ok) }),
            ("delete_versioned_miss", .delete(namespace: [], key: Array("ghost".utf8), tiers: 0, version: 900, writeBehind: false),
             { Responses.status(to: $0, .notFound) }),
            ("touch", .touch(namespace: [], key: foo, tiers: 0, expiry: .at(unixMicros: 4_102_444_800_000_000)),
             { Responses.status(to: $0, .ok, cas: self.V + 2) }),
            ("exists", .exists(namespace: [], key: foo, tiers: 0), { Responses.status(to: $0, .ok) }),
            ("incr_initial", .counter(incr), { Responses.counter(to: $0, value: 10, version: self.V + 3) }),
            ("decr", .counter(decr), { Responses.counter(to: $0, value: 7, version: self.V + 4) }),
            ("incr_versioned", .counter(incrLate), { Responses.status(to: $0, .superseded, cas: self.V + 4) }),
            ("incr_unverified", .counter(incrFenced),
             { Responses.error(to: $0, .unverified, "this node has not caught up with the key's other replicas since it started, was paused or lost contact with them; nothing was done: decide on another replica") }),
            ("touch_versioned", .touch(namespace: [], key: foo, tiers: 0, expiry: .seconds(600), version: 900),
             { Responses.status(to: $0, .superseded, cas: self.V + 2) }),
            ("incr_not_a_number", .counter(incrBad),
             { Responses.error(to: $0, .notANumber, "the stored value is not a decimal counter (1–20 digits, at most 2^64−1)") }),
            ("meta", .meta(namespace: [], key: Array("doc".utf8), tiers: 0),
             { Responses.meta(to: $0, MetaInfo(tiersPresent: 3, encoding: 1, size: 10240, storedSize: 2100, expiresAt: 0,
                                               version: self.V, flags: 7, extendedSize: 0)) }),
            ("meta_image", .meta(namespace: [], key: Array("logo.png".utf8), tiers: 0),
             { Responses.meta(to: $0, MetaInfo(tiersPresent: 3, encoding: 0, size: 5120, storedSize: 5120, expiresAt: 0,
                                               version: self.V, flags: 0, extendedSize: 0, imageFormat: 1, imageWidth: 640,
                                               imageHeight: 480, imageFlags: 1, imageFrames: 1)) }),
            ("set_validate_image_refused", .set(validateSet), { Responses.error(to: $0, .invalidImage, "PNG header: read beyond end of data") }),
            ("image_info", .imageInfo(namespace: [], key: Array("logo.png".utf8)),
             { Responses.imageInfo(to: $0, format: 1, width: 640, height: 480, flags: 1, frames: 1, version: self.V) }),
            ("image_variant", .imageVariant(VariantRequest(key: Array("logo.png".utf8), maxWidth: 128, maxHeight: 128)),
             { Responses.imageVariant(to: $0, bytes: Array("RIFF".utf8), width: 128, height: 96, cached: false, version: self.V) }),
            ("scan", .scan(namespace: [], cursor: [], limit: 2),
             { Responses.scan(to: $0, keys: [Array("a".utf8), Array("b".utf8)], next: Array("b".utf8)) }),
            ("flush_ns", .flush(namespace: Array("alice".utf8), all: false), { Responses.status(to: $0, .ok) }),
            ("flush_versioned", .flush(namespace: Array("alice".utf8), all: false, version: 900), { Responses.status(to: $0, .ok, cas: 900) }),
            ("flush_all", .flush(namespace: [], all: true), { Responses.status(to: $0, .ok) }),
            ("stats", .stats, { Responses.stats(to: $0, json: "{\"version\":\"0.1.0\",\"uptime_s\":5}") }),
            ("flush_memory", .flush(namespace: Array("alice".utf8), all: false, tiers: 1), { Responses.status(to: $0, .ok) }),
            ("stats_namespace", .namespaceStats(.one(Array("alice".utf8))),
             { Responses.stats(to: $0, json: #"{"namespace":"alice","namespace_hex":"616c696365","items":2,"bytes":8,"hits":1,"misses":1,"sets":2,"writes":2}"#) }),
            ("stats_namespaces", .namespaceStats(.top),
             { Responses.stats(to: $0, json: #"{"namespaces_known":3,"namespaces_listed":1,"limit":1,"namespaces":[{"namespace":"alice","namespace_hex":"616c696365","items":2,"bytes":8,"hits":1,"misses":1,"sets":2,"writes":2}],"other":{"namespaces":2,"items":1,"bytes":1,"hits":0,"misses":0,"sets":1,"writes":1}}"#) }),
        ]
    }

    func testEveryVectorIsCovered() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.dir.path).filter { $0.hasSuffix(".req.hex") }
        let names = Set(files.map { String($0.dropLast(".req.hex".count)) })
        let covered = Set(cases().map { $0.0 }).union(Self.errorVectors)
        XCTAssertEqual(names, covered)
        XCTAssertTrue(Set(cases().map { $0.0 }).isDisjoint(with: Self.errorVectors))
    }

    func testProtocolDocumentShowsEveryVector() throws {
        let spec = try String(contentsOf: Self.dir.deletingLastPathComponent().appendingPathComponent("PROTOCOL.md"), encoding: .utf8)
        let flat = spec.filter { !$0.isWhitespace }
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.dir.path).filter { $0.hasSuffix(".hex") }
        for file in files {
            let hex = try load(file).hexString
            if hex.isEmpty { continue }
            XCTAssertTrue(flat.contains(hex), "PROTOCOL.md's appendix lacks \(file); rerun make_vectors.py")
        }
    }

    func testRequestsParseAndReencodeByteForByte() throws {
        for (name, expected, _) in cases() {
            let bytes = try load(name + ".req.hex")
            let (frame, used) = try XCTUnwrap(server.decode(bytes), name)
            XCTAssertEqual(used, bytes.count, name)
            let req = try Request.parse(frame)
            XCTAssertEqual(req, expected, name)
            let again = expected.frame(id: frame.requestID, quiet: frame.requestFlags.contains(.quiet)).encoded()
            XCTAssertEqual(again.hexString, bytes.hexString, name)
        }
    }

    func testResponsesEncodeByteForByteAndDecode() throws {
        for (name, _, build) in cases() {
            let reqBytes = try load(name + ".req.hex")
            let want = try load(name + ".resp.hex")
            let (req, _) = try XCTUnwrap(server.decode(reqBytes))
            guard let resp = build(req) else {
                XCTAssertTrue(want.isEmpty, "\(name): a quiet request must have no response")
                continue
            }
            XCTAssertEqual(resp.encoded().hexString, want.hexString, name)
            let (decoded, used) = try XCTUnwrap(client.decode(want), name)
            XCTAssertEqual(used, want.count)
            XCTAssertEqual(decoded, resp, name)
        }
    }

    func testTypedResponseParsersReadTheVectors() throws {
        let hit = try XCTUnwrap(client.decode(load("get_hit.resp.hex"))).frame
        let item = try Responses.parseGet(hit)
        XCTAssertEqual(item.value, Array("bar!!".utf8))
        XCTAssertEqual(item.flags, 42)
        XCTAssertEqual(item.version, V)
        XCTAssertNil(item.meta)
        let withMeta = try Responses.parseGet(XCTUnwrap(client.decode(load("get_touch_meta.resp.hex"))).frame)
        XCTAssertEqual(withMeta.meta, MetaBlock(tiersPresent: 2, encoding: 0, storedSize: 4))
        XCTAssertEqual(withMeta.extended, [1, 2])
        let m = try Responses.parseMGet(XCTUnwrap(client.decode(load("mget.resp.hex"))).frame, count: 2)
        XCTAssertEqual(m.count, 2)
        XCTAssertEqual(m[0]?.value, Array("bar!!".utf8))
        XCTAssertNil(m[1])
        XCTAssertEqual(try Responses.parseCounter(XCTUnwrap(client.decode(load("decr.resp.hex"))).frame), 7)
        let meta = try Responses.parseMeta(XCTUnwrap(client.decode(load("meta.resp.hex"))).frame)
        XCTAssertEqual(meta.size, 10240)
        XCTAssertEqual(meta.storedSize, 2100)
        let scan = try Responses.parseScan(XCTUnwrap(client.decode(load("scan.resp.hex"))).frame)
        XCTAssertEqual(scan.keys, [Array("a".utf8), Array("b".utf8)])
        XCTAssertEqual(scan.next, Array("b".utf8))
        let unverified = try Responses.parseGet(XCTUnwrap(client.decode(load("get_unverified.resp.hex"))).frame)
        XCTAssertTrue(unverified.unverified)
        XCTAssertFalse(unverified.stale)
        XCTAssertFalse(item.unverified)
        let withList = try XCTUnwrap(client.decode(load("sync_digest_members.resp.hex"))).frame
        XCTAssertEqual(try Responses.parseSyncDigest(withList, bits: 4, withList: true).count, 16)
        XCTAssertThrowsError(try Responses.parseSyncDigest(withList, bits: 4), "an answer to a request without a list has no list")
        XCTAssertEqual(Responses.syncDigestMemberList(withList, bits: 4), Array("10.0.0.1:7400\n10.0.0.2:7400\nreplicas=2".utf8))
        // Several lists in one answer (§7.19 "Member lists"): each ends at its replicas= line.
        let one = Array("10.0.0.1:7400\n10.0.0.2:7400\nreplicas=2".utf8), two = Array("a:1\nb:1\nc:1\nreplicas=3".utf8)
        XCTAssertEqual(Responses.splitMemberLists(Responses.syncDigestMemberList(withList, bits: 4)), [one])
        XCTAssertEqual(Responses.joinMemberLists([one, two]), one + [0x0A] + two)
        XCTAssertEqual(Responses.splitMemberLists(Responses.joinMemberLists([one, two])), [one, two])
        XCTAssertEqual(Responses.splitMemberLists([]), [])
        XCTAssertEqual(Responses.splitMemberLists(Array("a:1\nb:1".utf8)), [], "no replicas= line: no list")
        let digests = try Responses.parseSyncDigest(XCTUnwrap(client.decode(load("sync_digest.resp.hex"))).frame, bits: 4)
        XCTAssertEqual(digests.count, 16)
        XCTAssertEqual(digests[9], 0xFEDC_BA98_7654_3210)
        let keys = try Responses.parseSyncKeys(XCTUnwrap(client.decode(load("sync_keys.resp.hex"))).frame)
        XCTAssertEqual(keys.bucketsCovered, 2)
        XCTAssertEqual(keys.entries.map(\.tombstone), [false, true])
        XCTAssertEqual(keys.entries[1].namespace, Array("alice".utf8))
        XCTAssertEqual(try Responses.parseSyncCheck(XCTUnwrap(client.decode(load("sync_check.resp.hex"))).frame, entries: 2), [1])
        let hello = try Responses.parseHello(XCTUnwrap(client.decode(load("hello.resp.hex"))).frame)
        XCTAssertEqual(hello.server, "strata 0.1.0")
        XCTAssertTrue(hello.authenticated)
        XCTAssertEqual(hello.startVersion, 0x0001_7000_0000_0000)
        let fresh = try Responses.parseHello(XCTUnwrap(client.decode(load("hello_fresh.resp.hex"))).frame)
        XCTAssertTrue(fresh.authenticated)
        XCTAssertEqual(fresh.startVersion, 0)
        // A page may be empty and still carry a cursor (§7.11): the scan is not over.
        let emptyPage = try Responses.parseScan(XCTUnwrap(client.decode(load("scan_empty_page.resp.hex"))).frame)
        XCTAssertEqual(emptyPage.keys, [])
        XCTAssertEqual(emptyPage.next, variantKey)
        // Read-through states.
        let granted = try XCTUnwrap(client.decode(load("get_lease_granted.resp.hex"))).frame
        XCTAssertEqual(Responses.leaseState(granted), .granted(token: 0x075B_CD15))
        XCTAssertEqual(Responses.leaseState(try XCTUnwrap(client.decode(load("get_lease_filling.resp.hex"))).frame), .filling)
        let refresh = try XCTUnwrap(client.decode(load("get_lease_refresh_ahead.resp.hex"))).frame
        XCTAssertEqual(Responses.leaseState(refresh), .granted(token: 0x075B_CD16))
        XCTAssertEqual(try Responses.parseGet(refresh).value, Array("warm".utf8))
        let stale = try Responses.parseGet(XCTUnwrap(client.decode(load("get_stale.resp.hex"))).frame)
        XCTAssertTrue(stale.stale)
        XCTAssertFalse(stale.negative)
        let negative = try Responses.parseGet(XCTUnwrap(client.decode(load("get_negative.resp.hex"))).frame)
        XCTAssertTrue(negative.negative)
        XCTAssertEqual(negative.value, Array("HTTP 404".utf8))
    }

    /// A request the node refuses while parsing it (the connection stays open): the error it
    /// throws, answered, is the .resp vector.
    func checkRefused(_ name: String, _ status: Status) throws {
        let f = try XCTUnwrap(server.decode(load(name + ".req.hex")), name).frame
        let want = try load(name + ".resp.hex").hexString
        XCTAssertThrowsError(try Request.parse(f), name) { e in
            guard let w = e as? WireError else { return XCTFail("\(name): \(e)") }
            XCTAssertEqual(w.status, status, name)
            XCTAssertFalse(w.fatal, name)
            XCTAssertEqual(Responses.error(to: f, w.status, w.message).encoded().hexString, want, name)
        }
    }

    /// A header the decoder refuses (§2.2 checks 1–3, then close): its error response is the .resp vector.
    func checkHeaderRefused(_ name: String, _ decoder: FrameDecoder, _ status: Status, requestID: UInt32, opcode: UInt8) throws {
        let bytes = try load(name + ".req.hex")
        let want = try load(name + ".resp.hex").hexString
        XCTAssertThrowsError(try decoder.decode(bytes), name) { e in
            guard let w = e as? WireError else { return XCTFail("\(name): \(e)") }
            XCTAssertEqual(w.status, status, name)
            XCTAssertTrue(w.fatal, name)
            XCTAssertEqual(w.requestID, requestID, name)
            XCTAssertEqual(w.opcode, opcode, name)
            XCTAssertEqual(Responses.error(w).encoded().hexString, want, name)
        }
    }

    func testErrorVectors() throws {
        try checkRefused("error_unknown_opcode", .unknownOpcode)
        try checkRefused("error_invalid_flag", .invalidArgument)
        try checkRefused("error_wrong_extras", .malformed)
        try checkRefused("error_unsupported_version", .unsupportedVersion)
        try checkRefused("incr_bad_initial", .invalidArgument)
        let get = try XCTUnwrap(server.decode(load("error_auth_required.req.hex"))).frame
        XCTAssertEqual(Responses.error(to: get, .authRequired, "authenticate with HELLO first").encoded().hexString,
                       try load("error_auth_required.resp.hex").hexString)
        // Bad magic: request id 0, opcode 0. Too large: before authentication, the 16 KiB limit.
        try checkHeaderRefused("error_bad_magic", server, .malformed, requestID: 0, opcode: 0)
        try checkHeaderRefused("error_too_large_frame", FrameDecoder(magic: Wire.requestMagic, maxBody: 16 << 10), .tooLarge,
                               requestID: 95, opcode: Opcode.set.rawValue)
        // Unsolicited frames (§3): no request; opcode 0 and request id 0.
        let unsolicited: [(String, Status, String)] = [
            ("shutting_down_close", .shuttingDown, "the node is shutting down"),
            ("too_many_connections", .tooManyConnections, "too many connections (limit 10000)"),
        ]
        for (name, status, message) in unsolicited {
            XCTAssertTrue(try load(name + ".req.hex").isEmpty, name)
            let want = try load(name + ".resp.hex")
            XCTAssertEqual(Responses.error(WireError(status, message)).encoded().hexString, want.hexString, name)
            let f = try XCTUnwrap(client.decode(want), name).frame
            XCTAssertEqual(f.opcode, 0, name)
            XCTAssertEqual(f.requestID, 0, name)
            XCTAssertEqual(f.statusCode, status, name)
        }
    }
}

func hexBytes(_ s: String) -> [UInt8]? {
    var out: [UInt8] = []
    var high: UInt8? = nil
    for c in s.utf8 {
        let v: UInt8
        switch c {
        case 48...57: v = c - 48
        case 97...102: v = c - 87
        case 65...70: v = c - 55
        case 32, 10, 13, 9: continue
        default: return nil
        }
        if let h = high { out.append(h << 4 | v); high = nil } else { high = v }
    }
    return high == nil ? out : nil
}

extension Array where Element == UInt8 {
    var hexString: String { map { String(format: "%02x", $0) }.joined() }
}
