import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataWire

/// The GET fast path (issue 21, Connection+FastGet.swift) end to end: plain GETs that hit
/// memory are answered from the input buffer, and every edge the general path owns stays its
/// own — order behind slow requests, expiry, scopes, QUIET, frames split across reads.
final class FastGetTests: XCTestCase {
    /// Reads frames until `count` have arrived (bounded by the connection's read timeout).
    func read(_ c: NodeConnection, _ count: Int) throws -> [UInt32: Frame] {
        var got: [UInt32: Frame] = [:]
        while got.count < count { let f = try c.readFrame(); got[f.requestID] = f }
        return got
    }

    func testAFastHitIsTheGeneralPathsAnswerFieldForFieldAndCountedAlike() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path, extra: ["--max-age", "3600"])
        let c = try node.connect()
        let expiry = Int64(Date().timeIntervalSince1970 * 1e6) + 600_000_000
        var s = SetRequest(key: b("item"), value: [UInt8](repeating: 7, count: 300), namespace: b("ns"))
        s.flags = 0xDEAD_BEEF; s.extended = [1, 2, 3]; s.expiry = .at(unixMicros: expiry)
        let version = try c.set(s).cas
        var big = SetRequest(key: b("big"), value: (0..<40_000).map { UInt8(truncatingIfNeeded: $0) })
        big.tiers = 1
        let bigVersion = try c.set(big).cas
        var neg = SetRequest(key: b("failed"), value: b("loader said no")); neg.negative = true; neg.tiers = 1
        let negVersion = try c.set(neg).cas
        var st = SetRequest(key: b("old"), value: b("stale value")); st.tiers = 1
        XCTAssertEqual(try c.set(st).statusCode, .ok)
        XCTAssertEqual(try c.call(.invalidate(namespace: [], key: b("old"), tiers: 1, version: nil)).statusCode, .ok)
        let staleVersion = try XCTUnwrap(c.get(b("old"))).version
        let before = try nodeStats(c)

        // One pipeline: every answer is what Responses.get builds for the item.
        let requests: [(Frame, ItemPayload)] = [
            (Request.get(GetRequest(key: b("item"), namespace: b("ns"))).frame(id: 11),
             ItemPayload(value: s.value, flags: s.flags, expiresAt: expiry, extended: [1, 2, 3], version: version, tier: 1)),
            (Request.get(GetRequest(key: b("item"), namespace: b("ns"), tiers: 1)).frame(id: 12, quiet: true),
             ItemPayload(value: s.value, flags: s.flags, expiresAt: expiry, extended: [1, 2, 3], version: version, tier: 1)),
            (Request.get(GetRequest(key: b("big"), tiers: 3)).frame(id: 13),
             ItemPayload(value: big.value, flags: 0, expiresAt: Int64(bigVersion) + 3_600_000_000, extended: [], version: bigVersion, tier: 1)),
            (Request.get(GetRequest(key: b("failed"))).frame(id: 14),
             ItemPayload(value: neg.value, flags: 0, expiresAt: Int64(negVersion) + 3_600_000_000, extended: [], version: negVersion,
                         tier: 1, negative: true)),
            (Request.get(GetRequest(key: b("old"))).frame(id: 15),
             ItemPayload(value: st.value, flags: 0, expiresAt: Int64(staleVersion) + 3_600_000_000, extended: [], version: staleVersion,
                         tier: 1, stale: true)),
        ]
        try c.sendRaw(requests.flatMap { $0.0.encoded() })
        let got = try read(c, requests.count)
        for (req, item) in requests {
            XCTAssertEqual(got[req.requestID], Responses.get(to: req, item), "request \(req.requestID)")
        }
        let after = try nodeStats(c)
        func delta(_ name: String) -> Int { (after[name] as? Int ?? 0) - (before[name] as? Int ?? 0) }
        XCTAssertEqual(delta("ops_get"), 5)
        XCTAssertEqual(delta("memory_hits"), 5)
        XCTAssertEqual(delta("negative_hits"), 1)
        XCTAssertEqual(delta("stale_hits"), 1)
        let ns = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(c.stats(.one(b("ns"))).utf8)) as? [String: Any])
        XCTAssertEqual(ns["hits"] as? Int, 2, "\(ns)")
        XCTAssertEqual(node.terminate(), 0)
    }

    func testAGetPipelinedBehindASlowRequestSeesItsEffect() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let c = try node.connect()
        for round in 0..<10 {
            let key = b("k\(round)")
            var old = SetRequest(key: key, value: b("old")); old.tiers = 1
            XCTAssertEqual(try c.set(old).statusCode, .ok)
            XCTAssertEqual(try c.get(key)?.value, b("old"))
            var other = SetRequest(key: b("other"), value: b("o")); other.tiers = 1
            XCTAssertEqual(try c.set(other).statusCode, .ok)
            // Each batch starts on an idle connection, so the slow request is in flight (not
            // waiting) when the GETs behind it arrive.
            // A durable SET (in flight until the log is written) then GETs of its key: they wait for it.
            var batch = Request.set(SetRequest(key: key, value: b("new"))).frame(id: 1).encoded()
            batch += Request.get(GetRequest(key: key)).frame(id: 2).encoded()
            batch += Request.get(GetRequest(key: b("other"))).frame(id: 3).encoded()
            try c.sendRaw(batch)
            var got = try read(c, 3)
            XCTAssertEqual(got[1]?.statusCode, .ok)
            XCTAssertEqual(try Responses.parseGet(XCTUnwrap(got[2])).value, b("new"), "round \(round)")
            XCTAssertEqual(try Responses.parseGet(XCTUnwrap(got[3])).value, b("o"), "round \(round)")
            // A DELETE of both tiers (a worker runs it) then a GET of the key: a miss.
            batch = Request.delete(namespace: [], key: key, tiers: 0, version: nil, writeBehind: false).frame(id: 4).encoded()
            batch += Request.get(GetRequest(key: key)).frame(id: 5).encoded()
            try c.sendRaw(batch)
            got = try read(c, 2)
            XCTAssertEqual(got[4]?.statusCode, .ok)
            XCTAssertEqual(got[5]?.statusCode, .notFound, "round \(round)")
            // A FLUSH (keyless: everything after it waits for it) then a GET of another key: a miss.
            batch = Request.flush(namespace: [], all: false).frame(id: 6).encoded()
            batch += Request.get(GetRequest(key: b("other"))).frame(id: 7).encoded()
            try c.sendRaw(batch)
            got = try read(c, 2)
            XCTAssertEqual(got[6]?.statusCode, .ok)
            XCTAssertEqual(got[7]?.statusCode, .notFound, "round \(round): the flush ran first")
        }
        // A GET with a lease on a missing key (a worker grants it), then a plain GET of that key
        // and a hit on another: all answered, the plain GET a miss.
        var hit = SetRequest(key: b("h"), value: b("here")); hit.tiers = 1
        XCTAssertEqual(try c.set(hit).statusCode, .ok)
        var lease = GetRequest(key: b("leased")); lease.lease = true
        var batch = Request.get(lease).frame(id: 21).encoded()
        batch += Request.get(GetRequest(key: b("leased"))).frame(id: 22).encoded()
        batch += Request.get(GetRequest(key: b("h"))).frame(id: 23).encoded()
        try c.sendRaw(batch)
        let got = try read(c, 3)
        XCTAssertEqual(got[21]?.statusCode, .notFound)
        XCTAssertNotEqual((got[21]?.responseFlags ?? 0) & ResponseFlags.lease.rawValue, 0, "the lease was granted")
        XCTAssertEqual(got[22]?.statusCode, .notFound)
        XCTAssertEqual(try Responses.parseGet(XCTUnwrap(got[23])).value, b("here"))
    }

    func testAFlushFromAnotherConnectionIsSeenByTheNextGet() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let reader = try node.connect()
        let admin = try node.connect()
        for (round, all) in [(0, false), (1, true), (2, false)] {
            for ns in ["n", "m"] {
                var s = SetRequest(key: b("k"), value: b("round \(round)"), namespace: b(ns)); s.tiers = 1
                XCTAssertEqual(try admin.set(s).statusCode, .ok)
            }
            // The reader's fast GETs remember the namespace's entry...
            var batch: [UInt8] = []
            for i in 0..<4 { batch += Request.get(GetRequest(key: b("k"), namespace: b("n"))).frame(id: UInt32(i + 1)).encoded() }
            try reader.sendRaw(batch)
            for (_, f) in try read(reader, 4) { XCTAssertEqual(try Responses.parseGet(f).value, b("round \(round)")) }
            // ...and another connection flushes it (memory only: the records stay until swept).
            XCTAssertEqual(try admin.call(.flush(namespace: b("n"), all: all, tiers: 1)).statusCode, .ok)
            // (One GET at a time: a GET of another namespace in the same batch would make the
            // reader look its namespace up again anyway.)
            XCTAssertEqual(try reader.call(.get(GetRequest(key: b("k"), namespace: b("n")))).statusCode, .notFound,
                           "round \(round): the flushed namespace")
            let other = try reader.call(.get(GetRequest(key: b("k"), namespace: b("m"))))
            if all {
                XCTAssertEqual(other.statusCode, .notFound, "round \(round): FLUSH all")
            } else {
                XCTAssertEqual(try Responses.parseGet(other).value, b("round \(round)"))
            }
        }
    }

    func testAnExpiredItemIsNeverServed() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let c = try node.connect()
        let expiry = Int64(Date().timeIntervalSince1970 * 1e6) + 400_000
        for i in 0..<20 {
            var s = SetRequest(key: b("e\(i)"), value: b("soon gone")); s.expiry = .at(unixMicros: expiry); s.tiers = 1
            XCTAssertEqual(try c.set(s).statusCode, .ok)
        }
        var keep = SetRequest(key: b("kept"), value: b("stays")); keep.tiers = 1
        XCTAssertEqual(try c.set(keep).statusCode, .ok)
        XCTAssertEqual(try c.get(b("e0"))?.value, b("soon gone"))
        // Wait (bounded) until this machine's clock is past the expiry.
        for _ in 0..<100 where Int64(Date().timeIntervalSince1970 * 1e6) <= expiry { usleep(20_000) }
        XCTAssertGreaterThan(Int64(Date().timeIntervalSince1970 * 1e6), expiry)
        var batch: [UInt8] = []
        for i in 0..<20 { batch += Request.get(GetRequest(key: b("e\(i)"), tiers: 1)).frame(id: UInt32(i + 1)).encoded() }
        batch += Request.get(GetRequest(key: b("kept"))).frame(id: 100).encoded()
        try c.sendRaw(batch)
        let got = try read(c, 21)
        for i in 0..<20 { XCTAssertEqual(got[UInt32(i + 1)]?.statusCode, .notFound, "e\(i)") }
        XCTAssertEqual(try Responses.parseGet(XCTUnwrap(got[100])).value, b("stays"))
    }

    func testAGetInANamespaceOutsideTheUsersScopeIsForbidden() throws {
        let dir = TempDir()
        let users: [(String, String, String, [String]?)] = [("ops", "t-ops", "admin", nil), ("ro", "t-ro", "readonly", ["app1"])]
        let path = dir.path + "/users.json"
        try Data(CredentialsUnitTests.file(users)).write(to: URL(fileURLWithPath: path))
        let node = try NodeProcess(dataDir: dir.path + "/data", extra: ["--credentials", path])
        let admin = try node.connect(token: b("t-ops"))
        for ns in ["app1", "app2"] {
            var s = SetRequest(key: b("k"), value: b("in \(ns)"), namespace: b(ns)); s.tiers = 1
            XCTAssertEqual(try admin.set(s).statusCode, .ok)
        }
        let ro = try node.connect(token: b("t-ro"))
        var batch: [UInt8] = []
        for (i, ns) in ["app1", "app2", "app1", "app2", "app2", "app1"].enumerated() {
            batch += Request.get(GetRequest(key: b("k"), namespace: b(ns))).frame(id: UInt32(i + 1)).encoded()
        }
        try ro.sendRaw(batch)
        let got = try read(ro, 6)
        for (i, ns) in ["app1", "app2", "app1", "app2", "app2", "app1"].enumerated() {
            let f = try XCTUnwrap(got[UInt32(i + 1)])
            if ns == "app1" {
                XCTAssertEqual(try Responses.parseGet(f).value, b("in app1"))
            } else {
                XCTAssertEqual(f.statusCode, .forbidden, "request \(i + 1)")
            }
        }
    }

    func testQuietMissesStaySilentAndQuietHitsAreAnswered() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let c = try node.connect()
        for k in ["a", "c"] {
            var s = SetRequest(key: b(k), value: b("value of \(k)")); s.tiers = 1
            XCTAssertEqual(try c.set(s).statusCode, .ok)
        }
        var batch: [UInt8] = []
        batch += Request.get(GetRequest(key: b("a"))).frame(id: 1, quiet: true).encoded()
        batch += Request.get(GetRequest(key: b("b"))).frame(id: 2, quiet: true).encoded()
        batch += Request.get(GetRequest(key: b("c"), tiers: 1)).frame(id: 3, quiet: true).encoded()
        batch += Request.get(GetRequest(key: b("d"), tiers: 1)).frame(id: 4, quiet: true).encoded()
        batch += Request.ping.frame(id: 5).encoded()
        try c.sendRaw(batch)
        var ids: [UInt32] = []
        while ids.last != 5 && ids.count < 5 {
            let f = try c.readFrame()
            ids.append(f.requestID)
            if f.requestID == 1 || f.requestID == 3 {
                XCTAssertEqual(f.statusCode, .ok)
                XCTAssertTrue(f.requestFlags.contains(.quiet), "the request's flags are echoed")
            }
        }
        XCTAssertEqual(Set(ids), [1, 3, 5], "the quiet misses (2, 4) sent nothing")
    }

    func testAPipelineSentOneByteAtATimeIsAnsweredInFull() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let c = try node.connect()
        var expected: [UInt32: [UInt8]?] = [:]
        for i in 0..<8 {
            var s = SetRequest(key: b("key-\(i)"), value: [UInt8](repeating: UInt8(i), count: 50 + i), namespace: i % 2 == 0 ? [] : b("n"))
            s.tiers = 1
            XCTAssertEqual(try c.set(s).statusCode, .ok)
        }
        var batch: [UInt8] = []
        for i in 0..<16 {
            let k = i % 8, ns = k % 2 == 0 ? [] : b("n")
            let present = i < 12
            batch += Request.get(GetRequest(key: b(present ? "key-\(k)" : "absent-\(i)"), namespace: ns)).frame(id: UInt32(i + 1)).encoded()
            expected[UInt32(i + 1)] = present ? [UInt8](repeating: UInt8(k), count: 50 + k) : nil
        }
        for byte in batch { try c.sendRaw([byte]) }
        let got = try read(c, 16)
        for (id, value) in expected {
            let f = try XCTUnwrap(got[id])
            if let v = value { XCTAssertEqual(try Responses.parseGet(f).value, v, "request \(id)") } else { XCTAssertEqual(f.statusCode, .notFound) }
        }
    }
}
