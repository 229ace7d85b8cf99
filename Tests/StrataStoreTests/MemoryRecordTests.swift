import XCTest
import StrataCore
@testable import StrataStore

/// The memory tier's compact record layout (MemoryShard+Record.swift): a 30-byte header, with
/// flags, expiry, extended data, long values and wide namespace tags only when present.
final class MemoryRecordTests: XCTestCase {
    private let now: Int64 = 1_000_000_000

    private func hash(_ key: [UInt8], _ tag: UInt32) -> UInt32 { UInt32(truncatingIfNeeded: XXH64.hash(key, seed: UInt64(tag))) }

    @discardableResult
    private func put(_ s: MemoryShard, _ key: [UInt8], tag: UInt32 = 1, _ item: ItemState, now: Int64? = nil) -> Bool {
        key.withUnsafeBytes { s.put(tag: tag, key: $0, hash: hash(key, tag), item: item, now: now ?? self.now) }
    }

    private func peek(_ s: MemoryShard, _ key: [UInt8], tag: UInt32 = 1) -> ItemState? {
        key.withUnsafeBytes { s.peek(tag: tag, key: $0, hash: hash(key, tag), now: now, withValue: true)?.state }
    }

    private func assertSame(_ a: ItemState?, _ b: ItemState, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        guard let a else { return XCTFail("\(what): not held", file: file, line: line) }
        XCTAssertEqual(a.value, b.value, what, file: file, line: line)
        XCTAssertEqual(a.flags, b.flags, what, file: file, line: line)
        XCTAssertEqual(a.extended, b.extended, what, file: file, line: line)
        XCTAssertEqual(a.expiry, b.expiry, what, file: file, line: line)
        XCTAssertEqual(a.version, b.version, what, file: file, line: line)
        XCTAssertEqual(a.marks, b.marks, what, file: file, line: line)
    }

    /// Every combination of the optional fields (and marks, namespace tags either side of 255,
    /// key lengths up to the limit) reads back exactly what was written, beside each other in
    /// one shard.
    func testEveryOptionalFieldCombinationRoundTrips() {
        let s = MemoryShard(countLimit: .max, costLimit: .max, ageLimitSeconds: 0)
        var written: [([UInt8], UInt32, ItemState)] = []
        var n = 0
        for combo in 0..<64 {
            for tag: UInt32 in [1, 254, 255, 70_000] {
                n += 1
                let keyLen = [1, 14, 1024, MemoryShard.maxKeyLen][n % 4]
                var key = [UInt8](repeating: UInt8(truncatingIfNeeded: n), count: keyLen)
                key[0] = UInt8(combo); if keyLen > 1 { key[1] = UInt8(truncatingIfNeeded: tag) }
                let long = combo & 16 != 0 && combo < 24 && tag == 1 // a value past the 21-bit inline length (8 of them: 16 MiB)
                let value = [UInt8]((0..<(long ? (1 << 21) + 3 : 100 + combo)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ n) })
                let item = ItemState(value: value,
                                     flags: combo & 1 != 0 ? 0xDEAD_BEEF : 0,
                                     extended: combo & 2 != 0 ? [UInt8](repeating: 0xE7, count: 4096) : [],
                                     expiry: combo & 4 != 0 ? Int64.max - 5 : 0,
                                     version: 0x0123_4567_89AB_CDEF &+ UInt64(n),
                                     marks: UInt8((combo >> 3) & 1) * ItemMarks.stale | UInt8(combo >> 5) * ItemMarks.negative)
                XCTAssertTrue(put(s, key, tag: tag, item), "combination \(combo), tag \(tag)")
                written.append((key, tag, item))
            }
        }
        for (key, tag, item) in written { assertSame(peek(s, key, tag: tag), item, "key \(key.prefix(2)) tag \(tag)") }
        XCTAssertNil(peek(s, written[0].0, tag: 2), "another namespace's key")
        XCTAssertEqual(MemoryTier.keysForTests(s, tag: 70_000, now: now).count, 64)
        #if DEBUG
        XCTAssertNil(s.checkInvariants())
        #endif
    }

    func testTombstonesAndLongKeys() {
        let s = MemoryShard(countLimit: .max, costLimit: .max, ageLimitSeconds: 0)
        let t = ItemState(value: [], flags: 0, extended: [], expiry: 0, version: 9, tombstone: true)
        XCTAssertTrue(put(s, bytes("gone"), t))
        assertSame(peek(s, bytes("gone")), t, "tombstone")
        XCTAssertNil(bytes("gone").withUnsafeBytes { s.get(tag: 1, key: $0, hash: hash(bytes("gone"), 1), now: now) }, "a tombstone is a miss")
        let tooLong = [UInt8](repeating: 1, count: MemoryShard.maxKeyLen + 1)
        XCTAssertFalse(put(s, tooLong, ItemState(value: [1], flags: 0, extended: [], expiry: 0, version: 1, marks: 0)))
    }

    /// What an item costs: a 14-byte key and a 100-byte value fill a 144-byte chunk (30-byte
    /// header); an expiry adds 8 bytes, flags 4, extended data 2 + its length.
    func testRecordSizes() {
        func chunk(_ item: ItemState, tag: UInt32 = 1) -> Int {
            let s = MemoryShard(countLimit: .max, costLimit: .max, ageLimitSeconds: 0)
            put(s, [UInt8](repeating: 0x6B, count: 14), tag: tag, item)
            return s.usedBytes
        }
        let v = [UInt8](repeating: 1, count: 100)
        XCTAssertEqual(chunk(ItemState(value: v, flags: 0, extended: [], expiry: 0, version: 1, marks: 0)), 144)
        XCTAssertEqual(chunk(ItemState(value: v, flags: 0, extended: [], expiry: 5, version: 1, marks: 0)), 152)
        XCTAssertEqual(chunk(ItemState(value: v, flags: 7, extended: [], expiry: 5, version: 1, marks: 0)), 160)
        XCTAssertEqual(chunk(ItemState(value: v, flags: 0, extended: [], expiry: 0, version: 1, marks: 0), tag: 300), 152)
        XCTAssertEqual(chunk(ItemState(value: [], flags: 0, extended: [1, 2], expiry: 0, version: 1, marks: 0)), 48)
    }

    /// The index grows by half at 3/4 full (sizes that are not powers of two) and finds every
    /// key through growth, deletions (backward shift) and wrap-around.
    func testIndexGrowsByHalfAndFindsEveryKey() {
        let s = MemoryShard(countLimit: .max, costLimit: .max, ageLimitSeconds: 0)
        let item = ItemState(value: [7], flags: 0, extended: [], expiry: 0, version: 1, marks: 0)
        var sizes: Set<Int> = [s.indexCapacity]
        for i in 0..<20_000 {
            put(s, bytes("key\(i)"), item)
            sizes.insert(s.indexCapacity)
            XCTAssertLessThanOrEqual(s.count * 4, s.indexCapacity * 3)
        }
        XCTAssertEqual(sizes.sorted().prefix(4), [1024, 1536, 2304, 3456])
        for i in stride(from: 0, to: 20_000, by: 3) {
            XCTAssertTrue(bytes("key\(i)").withUnsafeBytes { s.delete(tag: 1, key: $0, hash: hash(bytes("key\(i)"), 1)) })
        }
        for i in 0..<20_000 {
            XCTAssertEqual(peek(s, bytes("key\(i)")) != nil, i % 3 != 0, "key\(i)")
        }
        #if DEBUG
        XCTAssertNil(s.checkInvariants())
        #endif
    }

    /// The last access is kept in seconds mod 2^24: idle times are exact across the wrap.
    func testIdleAgeAcrossTheAccessClockWrap() {
        let s = MemoryShard(countLimit: .max, costLimit: .max, ageLimitSeconds: 60)
        let wrap: Int64 = 1 << 24
        let t0 = (wrap - 30) * 1_000_000 // 30 s before the wrap
        let item = ItemState(value: [1], flags: 0, extended: [], expiry: 0, version: 1, marks: 0)
        put(s, bytes("a"), item, now: t0)
        XCTAssertEqual(s.sweep(from: 0, budget: 10_000, now: t0 + 50_000_000, isLiveTag: { _ in true }), 0)
        XCTAssertEqual(s.count, 1, "idle 50 s of 60, across the wrap")
        _ = s.sweep(from: 0, budget: 10_000, now: t0 + 61_000_000, isLiveTag: { _ in true })
        XCTAssertEqual(s.count, 0, "idle 61 s")
        XCTAssertEqual(s.evictions, 1)
    }
}

extension MemoryTier {
    static func keysForTests(_ s: MemoryShard, tag: UInt32, now: Int64) -> [[UInt8]] {
        var out: [[UInt8]] = []
        s.collectKeys(tag: tag, now: now, into: &out)
        return out
    }
}
