import Foundation
import XCTest
import StrataCore
@testable import StrataStore

final class MemoryLimitTests: XCTestCase {
    private func shard(count: Int = .max, cost: Int = .max, age: Int64 = 0) -> MemoryShard {
        MemoryShard(countLimit: count, costLimit: cost, ageLimitSeconds: age)
    }

    private func put(_ s: MemoryShard, _ key: String, _ value: [UInt8] = [1, 2, 3], now: Int64 = 1_000_000_000) {
        let k = bytes(key)
        _ = k.withUnsafeBytes {
            s.put(tag: 1, key: $0, hash: UInt32(truncatingIfNeeded: XXH64.hash(k)),
                  item: ItemState(value: value, flags: 0, extended: [], expiry: 0, version: 1, tombstone: false), now: now)
        }
    }

    private func has(_ s: MemoryShard, _ key: String, now: Int64 = 1_000_000_000) -> Bool {
        let k = bytes(key)
        return k.withUnsafeBytes { s.get(tag: 1, key: $0, hash: UInt32(truncatingIfNeeded: XXH64.hash(k)), now: now) } != nil
    }

    private func hash(_ key: String) -> UInt32 { UInt32(truncatingIfNeeded: XXH64.hash(bytes(key))) }

    /// 0 = small queue, 1 = main queue, nil = not held.
    private func queue(_ s: MemoryShard, _ key: String) -> Int? {
        let k = bytes(key)
        return k.withUnsafeBytes { s.queue(tag: 1, key: $0, hash: hash(key)) }
    }

    /// S3-FIFO at a count limit of 3 (the small queue's share is 0, so it is evicted from
    /// first): a record hit while in the small queue moves to main instead of being evicted,
    /// an unhit one leaves for the ghost queue, and coming back from the ghost enters main.
    func testCountLimitEvictsByS3FIFO() {
        let s = shard(count: 3)
        put(s, "a"); put(s, "b"); put(s, "c")
        XCTAssertEqual(queue(s, "a"), 0, "new keys enter the small queue")
        XCTAssertTrue(has(s, "a"))
        var order: [String] = []
        s.forEachRecord { order.append(String(decoding: UnsafeRawBufferPointer(start: s.keyStart($0), count: 1), as: UTF8.self)) }
        XCTAssertEqual(order, ["c", "b", "a"], "a hit does not relink")
        put(s, "d")
        XCTAssertNil(queue(s, "b"), "b, the oldest unhit record, is evicted")
        XCTAssertEqual(queue(s, "a"), 1, "a was hit: it moved to main")
        XCTAssertTrue(s.ghost.contains(hash("b")))
        XCTAssertFalse(s.ghost.contains(hash("a")))
        XCTAssertEqual(s.count, 3)
        XCTAssertEqual(s.evictions, 1)
        put(s, "b")
        XCTAssertEqual(queue(s, "b"), 1, "a ghost hit is admitted to main")
        XCTAssertFalse(s.ghost.contains(hash("b")))
        XCTAssertNil(queue(s, "c"), "c was the small queue's oldest")
        XCTAssertEqual(s.count, 3)
        #if DEBUG
        XCTAssertNil(s.checkInvariants())
        #endif
    }

    /// A scan of keys read once churns the small queue only: a working set hit twice survives
    /// it whole (under LRU a 1,000-key scan through a 100-item shard evicts every one).
    func testAScanOfOneHitWondersDoesNotEvictAHitWorkingSet() {
        let s = shard(count: 100)
        for i in 0..<50 { put(s, "hot\(i)") }
        for _ in 0..<2 { for i in 0..<50 { XCTAssertTrue(has(s, "hot\(i)")) } }
        for i in 0..<1000 { put(s, "scan\(i)") }
        XCTAssertEqual(s.count, 100)
        XCTAssertEqual(s.evictions, 950)
        for i in 0..<50 { XCTAssertEqual(queue(s, "hot\(i)"), 1, "hot\(i)") }
        XCTAssertEqual((0..<1000).filter { queue(s, "scan\($0)") != nil }.count, 50)
        #if DEBUG
        XCTAssertNil(s.checkInvariants())
        #endif
    }

    /// The main queue's oldest record is reinserted (its counter decremented) while its counter
    /// lasts; the oldest with a zero counter is evicted instead.
    func testMainQueueReinsertsAHitRecordAndEvictsAnUnhitOne() {
        let s = shard(count: 10) // small share 1, main 9
        for i in 0..<10 { put(s, "k\(i)") }
        for i in 0..<9 { XCTAssertTrue(has(s, "k\(i)")) }
        put(s, "x")                      // k0…k8 move to main, k9 leaves for the ghost
        XCTAssertNil(queue(s, "k9"))
        for i in 0..<9 { XCTAssertEqual(queue(s, "k\(i)"), 1) }
        XCTAssertTrue(has(s, "k0"))      // k0: counter 1 in main
        XCTAssertTrue(has(s, "x"))       // x moves to main at the next eviction and overfills it
        put(s, "y")
        XCTAssertEqual(queue(s, "x"), 1)
        XCTAssertEqual(queue(s, "k0"), 1, "k0 was hit: reinserted")
        XCTAssertNil(queue(s, "k1"), "k1, the next oldest, was not")
        XCTAssertEqual(s.count, 10)
        #if DEBUG
        XCTAssertNil(s.checkInvariants())
        #endif
    }

    func testOverwriteKeepsTheQueueAndTheCounter() {
        let s = shard(count: 3)
        put(s, "a"); put(s, "b"); put(s, "c")
        XCTAssertTrue(has(s, "a"))
        put(s, "d")                      // a → main
        put(s, "a", [9])                 // replaced in place: still main
        XCTAssertEqual(queue(s, "a"), 1)
        XCTAssertEqual(s.evictions, 1)
        #if DEBUG
        XCTAssertNil(s.checkInvariants())
        #endif
    }

    /// The ghost queue holds at most 90 % of the items the shard can hold, and its memory stays
    /// bounded however many keys pass through.
    func testGhostQueueIsBounded() {
        let s = shard(count: 100)
        for i in 0..<20_000 { put(s, "k\(i)") }
        XCTAssertEqual(s.ghost.count, 90)
        XCTAssertLessThanOrEqual(s.ghost.memoryBytes, 4 * (256 + 256))
        let b = shard(cost: 100 * 40) // 100 records of one 40-byte chunk (30-byte header, key, 3-byte value)
        for i in 0..<20_000 { put(b, "k\(i)") }
        XCTAssertEqual(b.ghost.count, 90)
        XCTAssertLessThanOrEqual(b.memoryBytes, 100 * 40, "the byte limit holds the records and the ghost queue")
        XCTAssertEqual(b.count, (100 * 40 - b.ghost.memoryBytes) / 40, "records fill what the ghost queue leaves")
        b.removeAll()
        XCTAssertEqual(b.ghost.count, 0)
    }

    /// Entries match on a hash's 31 high bits (the low bit marks the queue a key left), so
    /// the hashes here are even.
    func testGhostQueueIsAFIFOOfLiveEntries() {
        let g = GhostQueue()
        func h(_ n: Int) -> UInt32 { UInt32(n) * 2 }
        for n in 1...100 { g.add(h(n), limit: 50) }
        XCTAssertEqual(g.count, 50)
        XCTAssertFalse(g.contains(h(50)))
        XCTAssertTrue(g.contains(h(51)))
        XCTAssertEqual(g.remove(h(60)), false, "there, and it left the small queue")
        XCTAssertNil(g.remove(h(60)))
        g.add(h(101), limit: 50)
        XCTAssertTrue(g.contains(h(51)), "a removed entry no longer counts toward the limit")
        g.add(h(102), limit: 50)
        XCTAssertFalse(g.contains(h(51)))
        // Many adds, every other one hit: the ring is compacted, the order kept.
        for n in 1000..<5000 { g.add(h(n), limit: 50); if n % 2 == 1 { g.remove(h(n)) } }
        XCTAssertEqual(g.count, 49, "adding 4999 dropped the oldest live entry, then 4999 was hit")
        XCTAssertTrue(g.contains(h(4998)))
        XCTAssertTrue(g.contains(h(4902)))
        XCTAssertFalse(g.contains(h(4900)))
        XCTAssertFalse(g.contains(h(4999)))
        for n in stride(from: 4902, to: 4990, by: 2) { g.remove(h(n)) }
        for n in 6000..<6200 { g.add(h(n), limit: 50); g.remove(h(n)) }
        XCTAssertEqual(g.count, 5)
        XCTAssertTrue(stride(from: 4990, to: 5000, by: 2).allSatisfy { g.contains(h($0)) })
        XCTAssertLessThanOrEqual(g.memoryBytes, 4 * (128 + 128))
    }

    /// Each entry remembers the queue its key left, and the counts of each kind follow adds,
    /// hits, drops of the oldest and compactions.
    func testGhostQueueCountsTheQueueEachKeyLeft() {
        let g = GhostQueue()
        for n in 1...300 { g.add(UInt32(n) << 1, fromMain: n % 3 == 0, limit: 100) }
        XCTAssertEqual(g.count, 100)
        XCTAssertEqual(g.fromMain, (201...300).filter { $0 % 3 == 0 }.count)
        XCTAssertEqual(g.fromSmall, 100 - g.fromMain)
        XCTAssertEqual(g.remove(UInt32(300) << 1), true, "300 left main")
        XCTAssertEqual(g.remove(UInt32(299) << 1), false, "299 left small")
        XCTAssertEqual(g.remove(UInt32(299) << 1 | 1), nil, "matched on the high bits: gone")
        XCTAssertEqual(g.fromMain, (201...299).filter { $0 % 3 == 0 }.count)
        for n in 1000..<3000 { g.add(UInt32(n) << 1, fromMain: true, limit: 100); if n % 2 == 0 { g.remove(UInt32(n) << 1) } }
        XCTAssertEqual(g.count, 100)
        XCTAssertEqual(g.fromMain, 100)
        g.removeAll()
        XCTAssertEqual(g.fromMain, 0)
    }

    /// ARC's rule on the small queue's share: a ghost hit of a key the small queue evicted
    /// grows it, one of a key main evicted shrinks it, within 1–90 % of the limit; main's
    /// evictions are remembered in the ghost (marked) as well as the small queue's.
    func testAGhostHitMovesTheSmallQueuesShare() {
        let s = shard(count: 100)
        XCTAssertEqual(s.smallTarget, 10)
        for i in 0..<120 { put(s, "k\(i)") } // none hit: the oldest leave the small queue
        XCTAssertTrue(s.ghost.contains(hash("k0")))
        XCTAssertEqual(s.ghost.fromMain, 0)
        put(s, "k0")
        XCTAssertEqual(queue(s, "k0"), 1, "a ghost hit enters main")
        XCTAssertEqual(s.smallTarget, 12, "a key the small queue let go too soon: it grows by 2 items")
        // Keys hit while in the small queue move to main; main, over its share, evicts.
        for i in 200..<600 { put(s, "k\(i)"); XCTAssertTrue(has(s, "k\(i)")) }
        XCTAssertGreaterThan(s.ghost.fromMain, 0, "main's evictions are remembered too")
        let evictedFromMain = (200..<600).map { "k\($0)" }.first { queue(s, $0) == nil && s.ghost.contains(hash($0)) }
        XCTAssertNotNil(evictedFromMain)
        let before = s.smallTarget
        if let k = evictedFromMain { put(s, k) }
        XCTAssertLessThan(s.smallTarget, before, "a key main let go: it shrinks")
        for _ in 0..<1_000 { s.adaptSmallShare(fromMain: true, chunk: 40) }
        XCTAssertEqual(s.smallTarget, 1, "at least 1 % of the limit")
        for _ in 0..<1_000 { s.adaptSmallShare(fromMain: false, chunk: 40) }
        XCTAssertEqual(s.smallTarget, 90, "at most 90 %")
        let b = shard(cost: 100 * 40)
        XCTAssertEqual(b.smallTarget, 400, "under a byte limit, in bytes")
        b.adaptSmallShare(fromMain: false, chunk: 40)
        XCTAssertEqual(b.smallTarget, 480, "2 × the record's chunk")
        s.removeAll()
        XCTAssertEqual(s.smallTarget, 10, "a flush starts over")
        #if DEBUG
        XCTAssertNil(s.checkInvariants())
        #endif
    }

    func testAccountedBytesNeverExceedTheLimit() {
        let limit = 10_000
        let s = shard(cost: limit)
        for i in 0..<500 {
            put(s, "key\(i)", [UInt8](repeating: UInt8(i & 0xFF), count: (i * 37) % 700))
            XCTAssertLessThanOrEqual(s.usedBytes, limit)
        }
        XCTAssertGreaterThan(s.evictions, 0)
        #if DEBUG
        XCTAssertNil(s.checkInvariants())
        #endif
    }

    func testItemLargerThanTheShardIsRefused() {
        let s = shard(cost: 1000)
        put(s, "small")
        put(s, "big", [UInt8](repeating: 0, count: 2000))
        XCTAssertFalse(has(s, "big"))
        XCTAssertTrue(has(s, "small"))
    }

    func testAgeLimitDropsItemsNotUsedRecently() {
        let s = shard(age: 60)
        let t0: Int64 = 1_000_000_000_000
        put(s, "old", now: t0)
        put(s, "fresh", now: t0 + 50_000_000)
        put(s, "trigger", now: t0 + 70_000_000) // eviction runs on insert
        XCTAssertFalse(has(s, "old", now: t0 + 70_000_000))
        XCTAssertTrue(has(s, "fresh", now: t0 + 70_000_000))
    }

    func testLargeRecordsGetTheirOwnAllocationAndAreFreed() {
        let s = shard()
        let big = [UInt8](repeating: 7, count: 300_000)
        for i in 0..<20 { put(s, "big\(i % 3)", big) }
        XCTAssertEqual(s.count, 3)
        let k = bytes("big1")
        let got = k.withUnsafeBytes { s.get(tag: 1, key: $0, hash: UInt32(truncatingIfNeeded: XXH64.hash(k)), now: 1_000_000_000) }
        XCTAssertEqual(got?.value, big)
        #if DEBUG
        XCTAssertNil(s.checkInvariants())
        #endif
    }

    func testIndexSurvivesManyInsertsAndDeletes() {
        let s = shard()
        var model: Set<String> = []
        var rng = SplitMix(seed: 7)
        for _ in 0..<20_000 {
            let key = "k\(rng.next() % 3000)"
            if rng.next() % 3 == 0 {
                let k = bytes(key)
                k.withUnsafeBytes { _ = s.delete(tag: 1, key: $0, hash: UInt32(truncatingIfNeeded: XXH64.hash(k))) }
                model.remove(key)
            } else {
                put(s, key, [UInt8](repeating: 1, count: Int(rng.next() % 200)))
                model.insert(key)
            }
        }
        XCTAssertEqual(s.count, model.count)
        for key in model { XCTAssertTrue(has(s, key), key) }
        #if DEBUG
        XCTAssertNil(s.checkInvariants())
        #endif
    }

    func testStoreSendsItemsTooLargeForMemoryToDiskOnly() throws {
        let f = try StoreFixture { $0.memoryCostLimit = 16 * 10_000; $0.memoryShards = 16 }
        let big = [UInt8](repeating: 3, count: 20_000)
        _ = try f.store.set(bytes("big"), big)
        XCTAssertNil(try f.store.get(bytes("big"), tiers: .memory))
        XCTAssertEqual(try f.store.get(bytes("big"))?.value, big)
        XCTAssertEqual(try f.store.metadata(bytes("big"))?.tiers, .disk)
    }

    /// An overwrite too large for the memory tier, written to both tiers, drops the older memory
    /// copy: every read finds the new value (an outside review, dur16: the old one was served
    /// until evicted).
    func testAnOverwriteTooLargeForMemoryDropsTheOlderMemoryCopy() throws {
        let f = try StoreFixture { $0.memoryCostLimit = 16 * 10_000; $0.memoryShards = 16 }
        _ = try f.store.set(bytes("k"), bytes("small"))
        XCTAssertEqual(try f.store.get(bytes("k"), tiers: .memory)?.value, bytes("small"))
        let big = [UInt8](repeating: 4, count: 20_000)
        _ = try f.store.set(bytes("k"), big)
        XCTAssertNil(try f.store.get(bytes("k"), tiers: .memory), "the older copy went")
        XCTAssertTrue(try f.store.get(bytes("k"))?.value == big, "the new value")
        XCTAssertEqual(try f.store.metadata(bytes("k"))?.tiers, .disk)
        try f.store.sync()
        XCTAssertTrue(try f.store.get(bytes("k"))?.value == big, "the new value, once applied")
    }

    /// A write to the memory tier alone that the tier can never hold is refused (TOO_LARGE),
    /// not acknowledged and lost, and leaves the key's older copy as it was; with no memory
    /// tier (`--memory-limit 0`) every memory-only write is.
    func testAMemoryOnlyWriteTheTierCannotHoldIsRefused() throws {
        let f = try StoreFixture { $0.memoryCostLimit = 16 * 10_000; $0.memoryShards = 16 }
        _ = try f.store.set(bytes("k"), bytes("small"), options: SetOptions(tiers: .memory))
        XCTAssertThrowsError(try f.store.set(bytes("k"), [UInt8](repeating: 3, count: 20_000), options: SetOptions(tiers: .memory))) { e in
            XCTAssertEqual((e as? StoreError)?.code, .valueTooLarge, "\(e)")
            XCTAssertTrue("\(e)".contains("at most 10000 bytes"), "\(e)")
        }
        XCTAssertEqual(try f.store.get(bytes("k"), tiers: .memory)?.value, bytes("small"), "the older copy stays")
        let none = try StoreFixture { $0.memoryCostLimit = 0 }
        XCTAssertThrowsError(try none.store.set(bytes("k"), bytes("v"), options: SetOptions(tiers: .memory))) { e in
            XCTAssertEqual((e as? StoreError)?.code, .valueTooLarge, "\(e)")
            XCTAssertTrue("\(e)".contains("--memory-limit 0"), "\(e)")
        }
        // Both tiers: the disk tier holds it.
        _ = try none.store.set(bytes("k"), bytes("v"))
        XCTAssertEqual(try none.store.get(bytes("k"))?.value, bytes("v"))
    }

    func testMemoryEvictionNeverLosesAnItemWrittenToDisk() throws {
        let f = try StoreFixture { $0.memoryCountLimit = 16; $0.memoryShards = 1 }
        for i in 0..<200 { _ = try f.store.set(bytes("k\(i)"), bytes("v\(i)")) }
        XCTAssertLessThanOrEqual(f.store.stats().memory.items, 16)
        for i in 0..<200 { XCTAssertEqual(try f.store.get(bytes("k\(i)"))?.value, bytes("v\(i)")) }
    }
}

final class DiskLimitTests: XCTestCase {
    /// LRU eviction counts a read the memory tier served as a use (it never reaches the row's
    /// access time): an item read only from memory is not the first to leave the disk (an
    /// outside review, sec6: 0 of 400 such items kept; 400 of 400 when read from disk).
    func testAReadFromMemoryCountsForDiskEviction() throws {
        let f = try StoreFixture { $0.diskCountLimit = 10; $0.accessResolution = 1 }
        for i in 0..<10 {
            _ = try f.store.set(bytes("k\(i)"), bytes("v"))
            f.clock.advance(seconds: 1)
        }
        f.clock.advance(seconds: 120)
        let hit = try f.store.get(bytes("k0")) // from memory
        XCTAssertEqual(hit?.value, bytes("v"))
        XCTAssertEqual(f.store.stats().disk.hits, 0, "served by the memory tier")
        f.clock.advance(seconds: 1)
        _ = try f.store.set(bytes("new"), bytes("v"), options: SetOptions(tiers: .disk))
        try f.store.sync()
        XCTAssertEqual(f.store.stats().disk.items, 10)
        XCTAssertNotNil(try f.store.get(bytes("k0"), tiers: .disk), "the item read from memory was evicted from disk")
        XCTAssertNil(try f.store.get(bytes("k1"), tiers: .disk))
    }

    func testDiskCountLimitEvictsLeastRecentlyUsed() throws {
        let f = try StoreFixture { $0.diskCountLimit = 10; $0.accessResolution = 1 }
        for i in 0..<10 {
            _ = try f.store.set(bytes("k\(i)"), bytes("v"), options: SetOptions(tiers: .disk))
            f.clock.advance(seconds: 1)
        }
        // Reading k0 marks it recently used (access times are flushed in the background).
        XCTAssertNotNil(try f.store.get(bytes("k0"), tiers: .disk))
        f.clock.advance(seconds: 1)
        XCTAssertTrue(try eventually { try f.store.sync(); return try self.accessOf(f, "k0") > self.accessOf(f, "k9") })
        _ = try f.store.set(bytes("new"), bytes("v"), options: SetOptions(tiers: .disk))
        try f.store.sync() // the count limit holds in SQLite once the applier has the write
        XCTAssertEqual(f.store.stats().disk.items, 10)
        XCTAssertNil(try f.store.get(bytes("k1"), tiers: .disk))
        XCTAssertNotNil(try f.store.get(bytes("k0"), tiers: .disk))
        XCTAssertNotNil(try f.store.get(bytes("new"), tiers: .disk))
    }

    /// On a store whose tombstones tell replicas what was deleted (a `--cluster` node), eviction
    /// takes live items before tombstones, LRU or oldest first, and the idle age does not take
    /// them (an outside review, cl20: an evicted tombstone let a replica that missed the delete
    /// copy the deleted value back, 8 of 8 keys).
    /// A store keeping tombstones for replicas under a count limit of 10: `deletes` tombstones,
    /// then `sets` writes, a second apart, applied.
    private func tombstonesThenWrites(_ eviction: DiskEviction, deletes: Int, sets: Int,
                                      _ tweak: (inout StoreConfiguration) -> Void = { _ in }) throws -> StoreFixture {
        let f = try StoreFixture { $0.diskCountLimit = 10; $0.accessResolution = 1; $0.diskEviction = eviction
                                   $0.expiredItemsLeaveTombstones = true; tweak(&$0) }
        let now = UInt64(f.clock.nowMicros())
        for i in 0..<deletes { _ = try f.store.remove(bytes("gone\(i)"), version: now + UInt64(i) + 1) }
        f.clock.advance(seconds: 1)
        for i in 0..<sets {
            _ = try f.store.set(bytes("k\(i)"), bytes("v"), options: SetOptions(tiers: .disk))
            f.clock.advance(seconds: 1)
        }
        try f.store.sync()
        return f
    }

    func testEvictionSparesTombstonesKeptForReplicas() throws {
        for eviction in [DiskEviction.lru, .oldest] {
            let f = try tombstonesThenWrites(eviction, deletes: 3, sets: 20) { $0.diskAgeLimit = 30; $0.maintenanceInterval = 0.02 }
            XCTAssertEqual(f.store.stats().disk.items, 10, "\(eviction)")
            for i in 0..<3 {
                guard case .tombstone = try f.store.read(bytes("gone\(i)"), tiers: .disk) else { return XCTFail("\(eviction): tombstone gone\(i) evicted") }
            }
            f.clock.advance(seconds: 60) // past the idle age: the live rows may go, the tombstones stay
            Thread.sleep(forTimeInterval: 0.3)
            for i in 0..<3 {
                guard case .tombstone = try f.store.read(bytes("gone\(i)"), tiers: .disk) else { return XCTFail("\(eviction): tombstone gone\(i) aged out") }
            }
        }
    }

    /// On a store whose replicas compare versions (a `--cluster` node), a versioned write older
    /// than one a disk limit removed — a replica's older copy, offered by anti-entropy, a hint
    /// or a read repair — is refused as the row would have refused it (an outside review, cl20:
    /// a count limit evicted a newer write and the older copy of a replica that missed it was
    /// copied back and read for good). The removed write itself and newer ones are stored. The
    /// idle age counts as a limit. Without the tombstones kept for replicas nothing is remembered.
    func testACopyOlderThanAnEvictedWriteIsRefused() throws {
        for eviction in [DiskEviction.lru, .oldest, nil] {
            let f = try StoreFixture { $0.diskCountLimit = 10; $0.accessResolution = 1; $0.diskEviction = eviction ?? .lru
                                       $0.expiredItemsLeaveTombstones = true
                                       if eviction == nil { $0.diskCountLimit = 0; $0.diskAgeLimit = 30; $0.maintenanceInterval = 0.02 } }
            guard case .stored(let v) = try f.store.set(bytes("k"), bytes("new"), options: SetOptions(tiers: .disk)) else { return XCTFail() }
            f.clock.advance(seconds: 2)
            for i in 0..<20 { _ = try f.store.set(bytes("f\(i)"), bytes("v"), options: SetOptions(tiers: .disk)); f.clock.advance(seconds: 1) }
            try f.store.sync()
            if eviction == nil { f.clock.advance(seconds: 20) } // k past the idle age, the fillers not
            XCTAssertTrue(try eventually(20, interval: 0.05) { try f.store.sync(); return try f.store.get(bytes("k"), tiers: .disk) == nil },
                          "\(String(describing: eviction)): k was not removed")
            XCTAssertEqual(f.store.evictedDelete(bytes("k"), namespace: [])?.evicted, v)
            var older = SetOptions(tiers: .disk); older.version = v - 5
            guard case .superseded(let current) = try f.store.set(bytes("k"), bytes("old"), options: older) else {
                return XCTFail("\(String(describing: eviction)): an older copy than the evicted write was stored")
            }
            XCTAssertEqual(current, v)
            guard case .superseded = try f.store.remove(bytes("k"), version: v - 5) else { return XCTFail("an older delete took") }
            XCTAssertNil(try f.store.get(bytes("k"), tiers: .disk))
            // The removed write itself may come back (a client bringing the owner up to date
            // before it decides a counter: cl24), and a newer one is stored.
            var same = SetOptions(tiers: .disk); same.version = v
            guard case .stored = try f.store.set(bytes("k"), bytes("new"), options: same) else { return XCTFail("the evicted write itself was refused") }
            XCTAssertEqual(try f.store.get(bytes("k"), tiers: .disk)?.value, bytes("new"))
            var newer = SetOptions(tiers: .disk); newer.version = v + 1
            guard case .stored = try f.store.set(bytes("k"), bytes("newer"), options: newer) else { return XCTFail("a newer copy was refused") }
            XCTAssertEqual(try f.store.get(bytes("k"), tiers: .disk)?.value, bytes("newer"))
        }
        // A store without tombstones for replicas (a node without --cluster) remembers nothing.
        let f = try StoreFixture { $0.diskCountLimit = 10; $0.diskEviction = .oldest }
        guard case .stored(let v) = try f.store.set(bytes("k"), bytes("new"), options: SetOptions(tiers: .disk)) else { return XCTFail() }
        for i in 0..<20 { _ = try f.store.set(bytes("f\(i)"), bytes("v"), options: SetOptions(tiers: .disk)) }
        try f.store.sync()
        XCTAssertNil(f.store.evictedDelete(bytes("k"), namespace: []))
        var older = SetOptions(tiers: .disk); older.version = v - 5
        guard case .stored = try f.store.set(bytes("k"), bytes("old"), options: older) else { return XCTFail() }
    }

    /// A count limit lowered at a reopen holds without waiting for a write (maintenance trims),
    /// in eviction order: the oldest writes go first.
    func testACountLimitLoweredAtReopenHoldsWithoutWrites() throws {
        let f = try StoreFixture { $0.diskEviction = .oldest }
        for i in 0..<100 { _ = try f.store.set(bytes("k\(i)"), bytes("v"), options: SetOptions(tiers: .disk)) }
        try f.store.sync()
        try f.reopen { $0.diskCountLimit = 40; $0.maintenanceInterval = 0.02 }
        XCTAssertTrue(eventually(20, interval: 0.05) { f.store.stats().disk.items == 40 }, "\(f.store.stats().disk.items) items")
        XCTAssertNil(try f.store.get(bytes("k59"), tiers: .disk))
        XCTAssertNotNil(try f.store.get(bytes("k60"), tiers: .disk))
        XCTAssertNotNil(try f.store.get(bytes("k99"), tiers: .disk))
    }

    func testReadsMoveTheAccessTimeAtMostOncePerResolution() throws {
        let f = try StoreFixture() // accessResolution 60 s
        _ = try f.store.set(bytes("k"), bytes("v"), options: SetOptions(tiers: .disk))
        try f.store.sync()
        let written = try accessOf(f, "k")
        f.clock.advance(seconds: 30)
        for _ in 0..<5 { XCTAssertNotNil(try f.store.get(bytes("k"), tiers: .disk)) }
        // Closing flushes every buffered access time, so nothing can still be on its way.
        try f.reopen()
        XCTAssertEqual(try accessOf(f, "k"), written, "reads within the resolution write nothing")
        f.clock.advance(seconds: 31)
        XCTAssertNotNil(try f.store.get(bytes("k"), tiers: .disk))
        XCTAssertTrue(try eventually { try f.store.sync(); return try self.accessOf(f, "k") == written + 61 })
    }

    private func accessOf(_ f: StoreFixture, _ key: String) throws -> Int64 {
        try f.store.sync() // SQLite is filled behind the log
        let db = try openDatabase(f.dir)
        let s = try db.statement("SELECT access FROM items WHERE key=?")
        s.bind(1, bytes(key))
        return try s.step() ? s.int(0) : -1
    }

    /// The memory of removed writes holds the newest `capacity` keys within `byteLimit` bytes,
    /// the newest version of each, and forgets the oldest first.
    func testEvictedVersionsAreBounded() {
        let e = EvictedVersions(capacity: 100, byteLimit: 1_000)
        for i in 0..<150 { e.record(ItemKey(namespace: [], key: bytes("k\(i)")), version: UInt64(i + 1), tombstone: false) }
        XCTAssertEqual(e.count, 100)
        XCTAssertNil(e.lookup(ItemKey(namespace: [], key: bytes("k49"))))
        XCTAssertEqual(e.lookup(ItemKey(namespace: [], key: bytes("k50")))?.version, 51)
        e.record(ItemKey(namespace: [], key: bytes("k50")), version: 10, tombstone: true) // older: kept as was
        XCTAssertEqual(e.lookup(ItemKey(namespace: [], key: bytes("k50"))), EvictedVersions.Entry(version: 51, tombstone: false))
        e.record(ItemKey(namespace: [], key: bytes("k50")), version: 900, tombstone: true)
        XCTAssertEqual(e.lookup(ItemKey(namespace: [], key: bytes("k50")))?.deleteVersion, 900)
        XCTAssertEqual(e.lookup(ItemKey(namespace: [], key: bytes("k51")))?.deleteVersion, 51) // one below a removed item's
        for i in 0..<20 { e.record(ItemKey(namespace: [], key: [UInt8](repeating: UInt8(i), count: 100)), version: 5, tombstone: false) }
        XCTAssertLessThanOrEqual(e.count, 10) // 1,000 bytes of keys
        XCTAssertNotNil(e.lookup(ItemKey(namespace: [], key: [UInt8](repeating: 19, count: 100))))
    }

    /// A burst of small items far below the byte limit evicts nothing (an outside review, sec5:
    /// under a 32–64 MiB limit, batches of thousands of 100 B rows were each counted as four
    /// pages a row, and 70–98 % of the items were evicted with the directory at 5–20 % of the limit).
    func testABurstOfSmallItemsFarBelowTheByteLimitEvictsNothing() throws {
        let f = try StoreFixture { $0.diskByteLimit = 32 << 20 }
        var rng = SplitMix(seed: 7)
        let n = 3_000
        let noise = (0..<(n + 100)).map { _ in UInt8(truncatingIfNeeded: rng.next()) } // incompressible
        // The writer held, so the log's applier hands it all of them in one batch.
        let hold = DispatchSemaphore(value: 0)
        f.store.disk.enqueue(DiskJob(.barrier, inline: true) { _ in hold.wait() })
        for i in 0..<n {
            _ = try f.store.set(bytes("item-\(i)"), Array(noise[i..<i + 100]), options: SetOptions(tiers: .disk, writeBehind: true))
        }
        hold.signal()
        try f.store.sync()
        try f.store.sync()
        XCTAssertEqual(f.store.stats().disk.evictions, 0)
        XCTAssertEqual(f.store.stats().disk.items, n)
    }

    func testDiskByteLimitHoldsAtWriteTime() throws {
        let limit = 3 << 20
        let f = try StoreFixture { $0.diskByteLimit = limit; $0.walLimit = 256 << 10 }
        var rng = SplitMix(seed: 1)
        for i in 0..<400 {
            let noise = (0..<20_000).map { _ in UInt8(truncatingIfNeeded: rng.next()) } // incompressible
            _ = try f.store.set(bytes("k\(i)"), noise, options: SetOptions(tiers: .disk))
        }
        try f.store.sync()
        try f.store.sync() // SQLite is filled behind the log
        let db = try openDatabase(f.dir)
        // Every page of the file counts, free ones included, plus the WAL.
        let pages = try XCTUnwrap(db.scalarInt("PRAGMA page_count"))
        let pageSize = try XCTUnwrap(db.scalarInt("PRAGMA page_size"))
        let wal = (try? FileManager.default.attributesOfItem(atPath: f.dir.path + "/strata.db-wal")[.size] as? Int) ?? 0
        XCTAssertLessThanOrEqual(Int(pages * pageSize) + wal, limit + 64 << 10) // + one batch of slack
        XCTAssertEqual(try db.scalarInt("PRAGMA auto_vacuum"), 2) // incremental: free pages go back
        XCTAssertGreaterThan(f.store.stats().disk.evictions, 200)
        XCTAssertNotNil(try f.store.get(bytes("k399"), tiers: .disk)) // the newest survive
    }

    /// Sustained writes from several threads: the checkpoint thread copies the WAL beside the
    /// writer, the WAL file stays bounded, and every item is intact afterwards.
    func testWALStaysBoundedUnderSustainedWrites() throws {
        let walLimit = 256 << 10
        // The WAL's bound is 4 × walLimit plus one applier transaction: batches of 8 keep the
        // slack below as it was (8 rows of 4 KiB).
        let f = try StoreFixture { $0.walLimit = walLimit; $0.maxApplyBatch = 8 }
        let threads = 8, perThread = 250
        let failures = Counter()
        let maxWAL = Counter()
        let done = Completion<Void>()
        let left = Counter()
        left.add(threads)
        let walPath = f.dir.path + "/strata.db-wal"
        for t in 0..<threads {
            startThread(name: "test-writer") { [store = f.store!] in
                var rng = SplitMix(seed: UInt64(t + 1))
                for i in 0..<perThread {
                    let value = (0..<4096).map { _ in UInt8(truncatingIfNeeded: rng.next()) } // incompressible
                    if (try? store.set(Array("t\(t)-\(i)".utf8), value, options: SetOptions(tiers: .disk))) == nil { failures.add() }
                    var st = stat()
                    if stat(walPath, &st) == 0 && Int(st.st_size) > maxWAL.load() { maxWAL.add(Int(st.st_size) - maxWAL.load()) }
                }
                left.add(-1)
                if left.load() == 0 { done.fulfil(()) }
            }
        }
        done.wait()
        try f.store.sync()
        XCTAssertEqual(failures.load(), 0)
        let stats = f.store.stats()
        // 8 MiB through a 256 KiB WAL: the copier ran, and with the writer's own checkpoints
        // (also taken once walLimit of applied log is held) the WAL was started over many times.
        // (The copier's share varies with timing: a CI run saw 2 passes.)
        print("FIGURE wal checkpoints: \(stats.walCopies) copier passes, \(stats.writerCheckpoints) by the writer")
        XCTAssertGreaterThan(stats.walCopies, 0, "the checkpoint thread ran")
        XCTAssertGreaterThan(stats.walCopies + stats.writerCheckpoints, 5, "checkpoints kept up with 8 MiB of writes")
        // The log's 16 MiB segment is never wholly applied here, so held log is no reason to
        // checkpoint: measured against the segment's start, the writer checkpointed after
        // nearly every batch of 8 rows (223 of 256).
        XCTAssertLessThan(stats.writerCheckpoints, 64)
        // At 4 × walLimit the writer waits for the copier's pass to end and checkpoints the rest
        // itself, so the WAL passes 4 × walLimit by at most one applier transaction (8 rows
        // here; a generous 24 pages each). Before that wait it reached 8.5–14.6 × walLimit here
        // (a clean-clone CI run caught 14.6 ×): a checkpoint cannot run while the copier's holds
        // SQLite's checkpoint lock. Measured since: 4.1–4.3 ×.
        print("FIGURE wal bound: the WAL reached \(maxWAL.load()) bytes, \(String(format: "%.1f", Double(maxWAL.load()) / Double(walLimit))) × walLimit")
        XCTAssertLessThanOrEqual(maxWAL.load(), 4 * walLimit + 8 * 24 * 4096)
        for t in 0..<threads {
            var rng = SplitMix(seed: UInt64(t + 1))
            for i in 0..<perThread {
                let value = (0..<4096).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                XCTAssertEqual(try f.store.get(Array("t\(t)-\(i)".utf8), tiers: .disk)?.value, value, "t\(t)-\(i)")
            }
        }
        XCTAssertEqual(try openDatabase(f.dir).textRows("PRAGMA integrity_check"), ["ok"])
    }

    func testAgeLimitTrimsDiskInBackground() throws {
        let f = try StoreFixture { $0.diskAgeLimit = 100 }
        _ = try f.store.set(bytes("old"), bytes("v"), options: SetOptions(tiers: .disk))
        f.clock.advance(seconds: 90)
        _ = try f.store.set(bytes("young"), bytes("v"), options: SetOptions(tiers: .disk))
        f.clock.advance(seconds: 20)
        XCTAssertTrue(eventually { f.store.stats().disk.items == 1 })
        XCTAssertNil(try f.store.get(bytes("old"), tiers: .disk))
        XCTAssertNotNil(try f.store.get(bytes("young"), tiers: .disk))
    }

    /// Outside review nu2: an item read from memory only (its reads never reach the disk row's
    /// access time) kept being trimmed from disk by the idle age, so a restart lost the hottest
    /// keys. The trim now asks the memory tier: read within the limit, the row stays (and its
    /// access time moves); idle in both tiers, it goes.
    func testAnItemReadFromMemoryKeepsItsDiskCopyPastTheIdleAge() throws {
        let f = try StoreFixture { $0.diskAgeLimit = 100; $0.memoryAgeLimit = 100 }
        _ = try f.store.set(bytes("hot"), bytes("v"))
        _ = try f.store.set(bytes("cold"), bytes("v"))
        try f.store.sync()
        for _ in 0..<4 {
            f.clock.advance(seconds: 40)
            XCTAssertEqual(try f.store.get(bytes("hot"))?.tier, .memory, "served by memory")
        }
        // 160 s since the write, 0 since the last read: cold goes from disk, hot stays.
        XCTAssertTrue(eventually { f.store.stats().disk.items == 1 })
        usleep(200_000) // more sweeps
        XCTAssertNotNil(try f.store.get(bytes("hot"), tiers: .disk), "the disk copy of a read item stays")
        try f.reopen()
        XCTAssertEqual(try f.store.get(bytes("hot"))?.value, bytes("v"), "and so it survives a restart")
        XCTAssertNil(try f.store.get(bytes("cold")))
        // Idle in both tiers past the limit: it goes too.
        f.clock.advance(seconds: 250)
        XCTAssertTrue(eventually { f.store.stats().disk.items == 0 })
    }

    /// Past `exactEvictionRows` the disk tier evicts from a random sample of rows (there is no
    /// index on access times): the oldest of the sample go. Recently read and recently written
    /// items survive; what goes is old.
    func testSampledEvictionOfALargeTableKeepsRecentItems() throws {
        // Small applier batches: each commit evicts only a few rows, from a sample of its own.
        let f = try StoreFixture { $0.diskCountLimit = 3000; $0.accessResolution = 1; $0.maxApplyBatch = 8 }
        XCTAssertGreaterThan(3000, DiskTier.exactEvictionRows)
        for i in 0..<3000 {
            _ = try f.store.set(bytes("old\(i)"), bytes("v"), options: SetOptions(tiers: .disk))
            if i % 100 == 99 { f.clock.advance(seconds: 1) }
        }
        try f.store.sync()
        f.clock.advance(seconds: 10)
        for i in 0..<100 { XCTAssertNotNil(try f.store.get(bytes("old\(i)"), tiers: .disk)) } // the oldest, now read
        f.clock.advance(seconds: 1)
        try f.store.sync() // (the reads' access times are written by the next maintenance step)
        XCTAssertTrue(try eventually { try f.store.sync(); return try self.accessOf(f, "old0") > self.accessOf(f, "old2999") })
        for i in 0..<1000 {
            _ = try f.store.set(bytes("new\(i)"), bytes("v"), options: SetOptions(tiers: .disk))
            if i % 100 == 99 { f.clock.advance(seconds: 1) }
        }
        try f.store.sync()
        XCTAssertEqual(f.store.stats().disk.items, 3000, "the count limit holds")
        let readKept = try (0..<100).filter { try f.store.get(bytes("old\($0)"), tiers: .disk) != nil }.count
        let newKept = try (0..<1000).filter { try f.store.get(bytes("new\($0)"), tiers: .disk) != nil }.count
        let olderKept = try (100..<1100).filter { try f.store.get(bytes("old\($0)"), tiers: .disk) != nil }.count
        XCTAssertGreaterThanOrEqual(readKept, 95, "recently read items survive")
        XCTAssertGreaterThanOrEqual(newKept, 990, "recently written items survive")
        XCTAssertLessThanOrEqual(olderKept, 100, "the items evicted are the old, unread ones")
    }

    func testFreeSpaceFloorTrimsDisk() throws {
        let free = Counter()
        let f = try StoreFixture { c in
            c.freeDiskSpaceLimit = 1000
            c.freeSpaceFloor = 0 // (the refusal floor is tested in DiskBudgetTests)
            c.freeSpaceProbe = { 10_000 - free.load() }
        }
        for i in 0..<100 { _ = try f.store.set(bytes("k\(i)"), bytes("v"), options: SetOptions(tiers: .disk)) }
        try f.store.sync() // (while the applier commits, an item may count in SQLite and in the backlog at once)
        XCTAssertEqual(f.store.stats().disk.items, 100)
        free.add(9_500) // only 500 bytes left: below the floor
        _ = try f.store.set(bytes("trigger"), bytes("v"), options: SetOptions(tiers: .disk))
        try f.store.sync() // the floor is enforced when the applier commits
        XCTAssertLessThan(f.store.stats().disk.items, 100)
        XCTAssertNotNil(try f.store.get(bytes("trigger"), tiers: .disk))
    }

    func testExpiredItemsArePurgedInBackgroundAfterReopen() throws {
        let f = try StoreFixture()
        for i in 0..<300 { _ = try f.store.set(bytes("e\(i)"), bytes("v"), options: SetOptions(expiry: .seconds(5), tiers: .disk)) }
        for i in 0..<10 { _ = try f.store.set(bytes("keep\(i)"), bytes("v"), options: SetOptions(tiers: .disk)) }
        f.store.close()
        f.clock.advance(seconds: 10)
        try f.reopen()
        XCTAssertNil(try f.store.get(bytes("e1"))) // never returned, even before the purge
        XCTAssertTrue(eventually { f.store.stats().disk.items == 10 })
        XCTAssertGreaterThanOrEqual(f.store.stats().disk.expirations, 299)
    }

    func testExplicitTrimToCount() throws {
        let f = try StoreFixture()
        for i in 0..<50 { _ = try f.store.set(bytes("k\(i)"), bytes("v")) }
        try f.store.trim(toCount: 20)
        XCTAssertEqual(f.store.stats().disk.items, 20)
        XCTAssertLessThanOrEqual(f.store.stats().memory.items, 20)
    }

    func testFullDiskRefusesTheWriteAndLosesNothing() throws {
        // The applier takes each write at once (no gathering), so SQLite meets its cap while
        // the writes come and only a few dozen wait past it (with the default 1 s every write
        // of the loop would be taken into the log first).
        let f = try StoreFixture { $0.sqliteMaxPageCount = 60; $0.walLimit = 64 << 10; $0.applyDelay = 0 }
        var stored: [Int] = []
        var refused: StoreError?
        func value(_ i: Int) -> [UInt8] {
            var rng = SplitMix(seed: UInt64(i))
            return (0..<1500).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        }
        for i in 0..<400 {
            do {
                _ = try f.store.set(bytes("k\(i)"), value(i), options: SetOptions(tiers: .disk))
                stored.append(i)
            } catch let e as StoreError {
                refused = e
                break
            }
        }
        let e = try XCTUnwrap(refused, "the page cap was never reached")
        XCTAssertEqual(e.code, .diskFull)
        XCTAssertTrue(e.message.contains("disk full"), e.message)
        XCTAssertFalse(stored.isEmpty)
        for i in stored {
            XCTAssertEqual(try f.store.get(bytes("k\(i)"), tiers: .disk)?.value, value(i))
        }
        // Space freed by deletes can be used again: removals are applied ahead of the
        // acknowledged writes that wait for space (the applier may have taken a few dozen
        // writes past the cap before the first refusal: they wait in the log, readable), those
        // then fit, and new writes are taken.
        let freed = stored.count / 2
        for i in stored.prefix(freed) { XCTAssertEqual(try f.store.remove(bytes("k\(i)")), .removed) }
        XCTAssertTrue(eventually { (try? f.store.set(bytes("small"), bytes("v"), options: SetOptions(tiers: .disk))) != nil },
                      "\(f.log.all.suffix(3))")
        for i in stored.dropFirst(freed) {
            XCTAssertEqual(try f.store.get(bytes("k\(i)"), tiers: .disk)?.value, value(i), "still there once the backlog applied")
        }
    }

    /// Writes 1,500-byte values k0, k1, … to a store capped at 60 pages until one is refused;
    /// the indices of those taken.
    private func fillUntilRefused(_ f: StoreFixture) throws -> [Int] {
        var stored: [Int] = []
        for i in 0..<400 {
            var rng = SplitMix(seed: UInt64(i))
            let v = (0..<1500).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            do { _ = try f.store.set(bytes("k\(i)"), v, options: SetOptions(tiers: .disk)); stored.append(i) } catch { break }
        }
        return stored
    }

    /// While SQLite refuses the backlog nothing drains it: a large value (over 1/16 of the log's
    /// room) is refused at once instead of waiting for room that never comes, and a delete is
    /// taken though the backlog is over its limit (an outside review, dur6: large SETs never got
    /// an answer on a full disk).
    func testALargeValueIsRefusedAtOnceWhileSQLiteCannotWrite() throws {
        let f = try StoreFixture { $0.sqliteMaxPageCount = 60; $0.walLimit = 64 << 10 }
        let stored = try fillUntilRefused(f)
        XCTAssertFalse(stored.isEmpty)
        XCTAssertTrue(eventually { f.store.log.refusal != nil }, "SQLite refuses the backlog")
        var rng = SplitMix(seed: 99)
        let big = (0..<(2 << 20)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        let t0 = monotonicSeconds()
        XCTAssertThrowsError(try f.store.set(bytes("big"), big, options: SetOptions(tiers: .disk))) { e in
            XCTAssertEqual((e as? StoreError)?.code, .diskFull, "\(e)")
        }
        XCTAssertLessThan(monotonicSeconds() - t0, 2, "refused, not held")
        XCTAssertEqual(try f.store.remove(bytes("k\(stored[0])")), .removed)
    }

    /// A write-behind write is answered before its record is written, so a failed log write
    /// (a disk filled to its last byte by another process) must not undo it: it is kept and
    /// retried until the disk takes it, while durable writes get DISK_FULL and change nothing
    /// (an outside review, dur7: acknowledged write-behind deletes were undone, up to 1,391
    /// deleted items came back with no crash, and write-behind sets were lost).
    func testWriteBehindWritesSurviveAFailedLogWrite() throws {
        let failing = Counter()
        let f = try StoreFixture { $0.logWritesFailForTests = { failing.load() > 0 } }
        for i in 0..<20 { _ = try f.store.set(bytes("d\(i)"), bytes("orig\(i)"), options: SetOptions(tiers: .disk)) }
        _ = try f.store.set(bytes("s"), bytes("old"), options: SetOptions(tiers: .disk))
        try f.store.sync()
        failing.add(1)
        for i in 0..<20 { XCTAssertEqual(try f.store.remove(bytes("d\(i)"), writeBehind: true), .removed) }
        // A kept write keeps its index entry (moved, never removed and put back): a reader can
        // never fall through to SQLite's older row meanwhile (dur8: deleted items read back).
        let kept = f.store.log.index.lookup(ItemKey(namespace: [], key: bytes("d0")))
        XCTAssertNotNil(kept)
        _ = try f.store.set(bytes("s"), bytes("new"), options: SetOptions(tiers: .disk, writeBehind: true))
        _ = try f.store.set(bytes("w"), bytes("fresh"), options: SetOptions(tiers: .disk, writeBehind: true))
        XCTAssertThrowsError(try f.store.set(bytes("durable"), bytes("x"), options: SetOptions(tiers: .disk))) { e in
            XCTAssertEqual((e as? StoreError)?.code, .diskFull, "\(e)")
        }
        Thread.sleep(forTimeInterval: 0.35) // several retries fail
        func check(_ when: String) throws {
            for i in 0..<20 { XCTAssertNil(try f.store.get(bytes("d\(i)")), "d\(i) stays deleted \(when)") }
            XCTAssertEqual(try f.store.get(bytes("s"))?.value, bytes("new"), when)
            XCTAssertEqual(try f.store.get(bytes("w"))?.value, bytes("fresh"), when)
            XCTAssertNil(try f.store.get(bytes("durable")), "a refused durable write changed nothing \(when)")
        }
        try check("while the log cannot write")
        XCTAssertTrue(f.store.log.index.lookup(ItemKey(namespace: [], key: bytes("d0"))) === kept, "the same entry, moved")
        XCTAssertTrue(f.log.all.contains { $0.contains("log_write_failed") && $0.contains("kept=") }, "\(f.log.all.suffix(3))")
        failing.add(-1) // space again
        XCTAssertTrue(eventually { f.store.stats().writeBehindPending == 0 }, "the kept writes reached the log")
        try f.store.sync()
        try check("once written")
        try f.reopen()
        try check("after a restart")
    }

    /// A durable write refused because its record could not be written changes nothing — also
    /// where memory held the key's only copy (an outside review, dur10: under a disk limit that
    /// had evicted the rows, refused DELETEs left their keys missing). Here the copies are
    /// memory-only writes; a kept write-behind write of a key in the failed batch still wins.
    func testARefusedDurableWriteKeepsAMemoryOnlyCopy() throws {
        let failing = Counter()
        let f = try StoreFixture { $0.logWritesFailForTests = { failing.load() > 0 } }
        _ = try f.store.set(bytes("del"), bytes("kept-d"), options: SetOptions(tiers: .memory))
        _ = try f.store.set(bytes("set"), bytes("kept-s"), options: SetOptions(tiers: .memory))
        _ = try f.store.set(bytes("both"), bytes("one"), options: SetOptions(tiers: .memory))
        _ = try f.store.set(bytes("disk"), bytes("on-disk"))
        try f.store.sync()
        failing.add(1)
        for (name, op) in [("a DELETE", { try f.store.remove(bytes("del")) as Any }),
                           ("a SET", { try f.store.set(bytes("set"), bytes("new")) as Any }),
                           ("a SET of a key on disk", { try f.store.set(bytes("disk"), bytes("new")) as Any })] {
            XCTAssertThrowsError(try op(), name) { XCTAssertEqual(($0 as? StoreError)?.code, .diskFull, "\(name): \($0)") }
        }
        // A write-behind write of "both" kept, then a durable one refused: the kept one is read.
        _ = try f.store.set(bytes("both"), bytes("two"), options: SetOptions(writeBehind: true))
        XCTAssertThrowsError(try f.store.set(bytes("both"), bytes("three"))) { XCTAssertEqual(($0 as? StoreError)?.code, .diskFull, "\($0)") }
        func check(_ when: String) throws {
            XCTAssertEqual(try f.store.get(bytes("del"))?.value, bytes("kept-d"), "the refused DELETE changed nothing \(when)")
            XCTAssertEqual(try f.store.get(bytes("set"))?.value, bytes("kept-s"), "the refused SET changed nothing \(when)")
            XCTAssertEqual(try f.store.get(bytes("disk"))?.value, bytes("on-disk"), when)
            XCTAssertEqual(try f.store.get(bytes("both"))?.value, bytes("two"), "the kept write-behind write \(when)")
        }
        try check("while the log cannot write")
        failing.add(-1)
        XCTAssertTrue(eventually { f.store.stats().writeBehindPending == 0 })
        try check("once it can")
    }

    /// A write made while a durable write waits for its failing log batch stands when that
    /// write is undone (an outside review, dur11: a memory-only SET acknowledged meanwhile was
    /// replaced by the refused DELETE's restore, 83 of 83 overlaps).
    func testAWriteMadeWhileARefusedWriteWaitedStands() throws {
        let failing = Counter()
        let f = try StoreFixture { $0.logWritesFailForTests = {
            guard failing.load() > 0 else { return false }
            Thread.sleep(forTimeInterval: 0.3) // the batch takes a while to fail
            return true
        } }
        _ = try f.store.set(bytes("k"), bytes("before"), options: SetOptions(tiers: .memory))
        try f.store.sync()
        failing.add(1)
        let refused = Completion<StoreError?>()
        let store: TieredCache = f.store
        Thread.detachNewThread {
            do { _ = try store.remove(bytes("k")); refused.fulfil(nil) } catch { refused.fulfil(error as? StoreError) }
        }
        Thread.sleep(forTimeInterval: 0.1)
        _ = try f.store.set(bytes("k"), bytes("during"), options: SetOptions(tiers: .memory))
        XCTAssertEqual(refused.wait()?.code, .diskFull)
        XCTAssertEqual(try f.store.get(bytes("k"))?.value, bytes("during"), "the write made meanwhile stands")
    }

    /// While kept write-behind writes wait for the disk, a durable write is refused before it
    /// changes anything — it would fail the same way after being visible for ~0.1 s (dur11: a
    /// waiting DELETE made reads miss, and a write-behind DELETE meanwhile answered NOT_FOUND
    /// and deleted nothing, the value coming back with the refusal).
    func testADurableWriteIsRefusedAtOnceWhileKeptWritesWait() throws {
        let failing = Counter(), full = Counter()
        // A disk held full: log writes fail, and (once the write-behind set is kept) no space is free.
        let f = try StoreFixture { $0.logWritesFailForTests = { failing.load() > 0 }
                                   $0.freeSpaceProbe = { full.load() > 0 ? 0 : 1 << 40 } }
        _ = try f.store.set(bytes("k"), bytes("v"))
        try f.store.sync()
        failing.add(1)
        _ = try f.store.set(bytes("wb"), bytes("x"), options: SetOptions(writeBehind: true))
        XCTAssertTrue(eventually { f.store.log.failingWithKeptRecords }, "the write-behind set is kept")
        full.add(1)
        let t0 = monotonicSeconds()
        XCTAssertThrowsError(try f.store.remove(bytes("k"))) { XCTAssertEqual(($0 as? StoreError)?.code, .diskFull, "\($0)") }
        XCTAssertLessThan(monotonicSeconds() - t0, 0.05, "refused before it changed anything, not after a failed batch")
        XCTAssertEqual(try f.store.get(bytes("k"))?.value, bytes("v"))
        XCTAssertEqual(try f.store.remove(bytes("k"), writeBehind: true), .removed, "a write-behind delete still deletes")
        XCTAssertNil(try f.store.get(bytes("k")))
        failing.add(-1)
        full.add(-1)
        // Space back, the kept writes not retried yet: a durable write goes on (dur12: it got
        // DISK_FULL with room on the disk until the retry came).
        let t1 = monotonicSeconds()
        XCTAssertNoThrow(try f.store.set(bytes("k2"), bytes("right away")))
        XCTAssertLessThan(monotonicSeconds() - t1, 1)
        XCTAssertTrue(eventually { f.store.stats().writeBehindPending == 0 })
        XCTAssertNil(try f.store.get(bytes("k")))
        _ = try f.store.set(bytes("k"), bytes("again"))
        XCTAssertEqual(try f.store.get(bytes("k"))?.value, bytes("again"), "durable writes work again")
    }

    /// Tombstones are spared only while they are at most half the rows: a burst of deletes
    /// past a count limit does not leave the disk holding no live item (an outside review,
    /// cl21: 60 deletes under a limit of 40 kept 0 of 30 new writes, for the tombstones' 24 h).
    func testABurstOfTombstonesDoesNotCrowdOutLiveItems() throws {
        for eviction in [DiskEviction.lru, .oldest] {
            let f = try tombstonesThenWrites(eviction, deletes: 30, sets: 10)
            let live = try (0..<10).filter { try f.store.get(bytes("k\($0)"), tiers: .disk) != nil }.count
            XCTAssertGreaterThanOrEqual(live, 5, "\(eviction): \(live) of 10 new writes kept")
        }
    }

    /// Durable writes copy what memory held only once memory may hold an item no other place
    /// holds at its version (the copy costs workload 2 a few per cent of CPU): after a memory-only
    /// write, a disk-only remove or flush, or a disk eviction — not on a store that only wrote both tiers.
    func testMemoryIsCopiedForUndoOnlyOnceItMayHoldTheOnlyCopy() throws {
        for (what, op) in [("a memory-only set", { (s: TieredCache) in _ = try s.set(bytes("m"), bytes("v"), options: SetOptions(tiers: .memory)) }),
                           ("a disk-only remove", { (s: TieredCache) in _ = try s.remove(bytes("k"), tiers: .disk) }),
                           ("a disk-only flush", { (s: TieredCache) in try s.flush(namespace: [], tiers: .disk) }),
                           ("a disk-only flush of all", { (s: TieredCache) in try s.flushAll(tiers: .disk) })] {
            let f = try StoreFixture()
            _ = try f.store.set(bytes("k"), bytes("v"))
            _ = try f.store.remove(bytes("gone"))
            try f.store.flush(namespace: bytes("other"))
            XCTAssertFalse(f.store.memoryOnlyCopiesMayExist, "both tiers only: \(what)")
            try op(f.store)
            XCTAssertTrue(f.store.memoryOnlyCopiesMayExist, what)
        }
    }

    /// Kept write-behind writes that fill the log's room do not make writers wait for room that
    /// cannot come while the log cannot write: a durable write gets DISK_FULL at once (dur8:
    /// every write hung while 2.5 MB of write-behind sets were kept).
    func testKeptWriteBehindWritesDoNotHoldOtherWritesWaiting() throws {
        let failing = Counter()
        let f = try StoreFixture { $0.logWritesFailForTests = { failing.load() > 0 }; $0.logLimit = 64 << 10 }
        failing.add(1)
        var rng = SplitMix(seed: 7)
        for i in 0..<8 {
            let v = (0..<(40 << 10)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            _ = try f.store.set(bytes("wb\(i)"), v, options: SetOptions(tiers: .disk, writeBehind: true))
        }
        Thread.sleep(forTimeInterval: 0.25) // the batch failed; 320 KiB kept, over the 64 KiB room
        let t0 = monotonicSeconds()
        XCTAssertThrowsError(try f.store.set(bytes("durable"), bytes("x"), options: SetOptions(tiers: .disk))) { e in
            XCTAssertEqual((e as? StoreError)?.code, .diskFull, "\(e)")
        }
        XCTAssertLessThan(monotonicSeconds() - t0, 2, "refused, not held")
        XCTAssertTrue(f.store.logHasRoom(for: 1000), "an event loop holds no SET for room that cannot come (dur9)")
        failing.add(-1)
        XCTAssertTrue(eventually { f.store.stats().writeBehindPending == 0 })
        XCTAssertNotNil(try f.store.get(bytes("wb7")))
    }

    /// A store closed while its log still cannot write retries the kept write-behind writes
    /// for `stopPatience`, then gives them up and says so — it does not hang.
    func testAStopGivesUpKeptWriteBehindWritesAfterItsPatience() throws {
        let failing = Counter()
        failing.add(1)
        let f = try StoreFixture { $0.logWritesFailForTests = { failing.load() > 0 } }
        _ = try f.store.set(bytes("w"), bytes("v"), options: SetOptions(tiers: .disk, writeBehind: true))
        let t0 = monotonicSeconds()
        f.store.close()
        let took = monotonicSeconds() - t0
        XCTAssertGreaterThanOrEqual(took, DurabilityLog.stopPatience - 0.5)
        XCTAssertLessThan(took, DurabilityLog.stopPatience + 5)
        XCTAssertTrue(f.log.all.contains { $0.contains("log_write_behind_lost records=1") }, "\(f.log.all.suffix(3))")
    }

    func testAFlushOnAFullDiskAnswersAtOnceAndAppliesOnceThereIsRoom() throws {
        // No gathering: SQLite meets its cap while the writes come, so removing half of them
        // makes room for the rest (see testFullDiskRefusesTheWriteAndLosesNothing).
        let f = try StoreFixture { $0.sqliteMaxPageCount = 60; $0.walLimit = 64 << 10; $0.applyDelay = 0 }
        let stored = try fillUntilRefused(f)
        XCTAssertFalse(stored.isEmpty)
        // SQLite cannot write: the FLUSH is logged and answered DISK_FULL now, not when space
        // returns (it used to wait, and the client timed out).
        let t0 = monotonicSeconds()
        XCTAssertThrowsError(try f.store.flush(namespace: [])) { e in
            XCTAssertEqual((e as? StoreError)?.code, .diskFull, "\(e)")
            XCTAssertTrue((e as? StoreError)?.message.contains("takes effect once SQLite can write again") == true, "\(e)")
        }
        XCTAssertLessThan(monotonicSeconds() - t0, 5)
        // Room again (deletes are applied ahead): the flush is applied from the log.
        for i in stored.prefix(stored.count / 2) { _ = try? f.store.remove(bytes("k\(i)")) }
        XCTAssertTrue(eventually(10) { stored.allSatisfy { (try? f.store.get(bytes("k\($0)"), tiers: .disk)) == .some(nil) } },
                      "the flush took effect: \(f.log.all.suffix(3))")
    }
}
