import XCTest
@testable import StrataWire

/// §6: an error message is UTF-8 of at most 1024 bytes — cut where a character starts.
final class ResponseMessageTests: XCTestCase {
    func testALongMessageIsCutOnACharacterBoundary() {
        let euro = String(repeating: "€", count: 342) // 3 bytes each: 1026
        let cut = Responses.messageBytes(euro)
        XCTAssertEqual(cut.count, 1023, "341 whole characters")
        XCTAssertEqual(String(validatingUTF8: cut.map { CChar(bitPattern: $0) } + [0]), String(repeating: "€", count: 341))
        let mixed = "a" + String(repeating: "€", count: 341) + "b" // 1 + 1023 + 1 = 1025
        XCTAssertEqual(Responses.messageBytes(mixed), Array(("a" + String(repeating: "€", count: 341)).utf8))
        XCTAssertEqual(Responses.messageBytes("short"), Array("short".utf8))
        let exact = String(repeating: "x", count: 1024)
        XCTAssertEqual(Responses.messageBytes(exact).count, 1024)
        // Bytes that were not UTF-8 became U+FFFD (3 bytes) in the String: never split either.
        let replaced = String(decoding: [UInt8](repeating: 0xFF, count: 1000), as: UTF8.self)
        XCTAssertEqual(Responses.messageBytes(replaced).count, 1023)
    }
}

/// Requests' fields checked at decoding, whatever else they carry.
final class RequestFieldTests: XCTestCase {
    func testSyncCheckEntriesNeedAWritesKeyAndNamespace() {
        for (ns, key) in [([UInt8](), [UInt8]()), ([], [UInt8](repeating: 0x61, count: 1025)), ([UInt8](repeating: 0x61, count: 65), [0x6B])] {
            let r = Request.syncCheck(SyncCheck(requester: Array("n1:1".utf8), entries: [SyncKeyEntry(namespace: ns, key: key, version: 5, tombstone: false)]))
            XCTAssertThrowsError(try Request.parse(r.frame(id: 1))) { e in
                XCTAssertEqual((e as? WireError)?.status, .invalidArgument, "\(e)")
            }
        }
        let ok = Request.syncCheck(SyncCheck(requester: Array("n1:1".utf8), entries: [SyncKeyEntry(namespace: [], key: [0x6B], version: 5, tombstone: false)]))
        XCTAssertNoThrow(try Request.parse(ok.frame(id: 1)))
    }

    func testATruncatedValueIsNamedAsTheValue() {
        var f = Request.syncCheck(SyncCheck(requester: Array("n1:1".utf8), entries: [SyncKeyEntry(namespace: [], key: [0x6B], version: 5, tombstone: false)])).frame(id: 1)
        f.value.removeLast()
        XCTAssertThrowsError(try Request.parse(f)) { e in
            XCTAssertEqual((e as? WireError)?.message.contains("value too short"), true, "\(e)")
        }
    }

    func testDeleteAndInvalidateWithVersionZeroLetTheNodeAssignOne() throws {
        let d = Request.delete(namespace: [], key: [0x6B], tiers: 0, version: 0, writeBehind: false)
        guard case let .delete(_, _, _, version, _) = try Request.parse(d.frame(id: 1)) else { return XCTFail("not a delete") }
        XCTAssertNil(version)
        let i = Request.invalidate(namespace: [], key: [0x6B], tiers: 0, version: 0)
        guard case let .invalidate(_, _, _, v) = try Request.parse(i.frame(id: 1)) else { return XCTFail("not an invalidate") }
        XCTAssertNil(v)
        let kept = Request.delete(namespace: [], key: [0x6B], tiers: 0, version: 7, writeBehind: false)
        guard case let .delete(_, _, _, seven, _) = try Request.parse(kept.frame(id: 1)) else { return XCTFail("not a delete") }
        XCTAssertEqual(seven, 7)
    }
}

/// §7.19 "Member lists": the optional last field of SYNC_DIGEST's and SYNC_KEYS's extras.
final class SyncMembersFieldTests: XCTestCase {
    func testTheMembersDigestIsOptionalAndRoundTrips() throws {
        for members in [nil, UInt64(0x0123_4567_89AB_CDEF)] as [UInt64?] {
            let digest = Request.syncDigest(SyncRequest(requester: Array("n1:1".utf8), bucketBits: 4, maxVersion: 9, members: members))
            let f = digest.frame(id: 1)
            XCTAssertEqual(f.extras.count, members == nil ? 9 : 17)
            guard case .syncDigest(let back) = try Request.parse(f) else { return XCTFail("not a sync digest") }
            XCTAssertEqual(back.members, members)
            let keys = Request.syncKeys(SyncRequest(requester: Array("n1:1".utf8), bucketBits: 4, maxVersion: 9, buckets: [1, 2], members: members))
            guard case .syncKeys(let k) = try Request.parse(keys.frame(id: 2)) else { return XCTFail("not sync keys") }
            XCTAssertEqual(k.members, members)
            XCTAssertEqual(k.buckets, [1, 2])
        }
        var bad = Request.syncDigest(SyncRequest(requester: Array("n1:1".utf8), bucketBits: 4, maxVersion: 9)).frame(id: 3)
        bad.extras += [1, 2, 3]
        XCTAssertThrowsError(try Request.parse(bad), "12 bytes of extras: neither form")
    }
}
