import XCTest
import StrataCore
@testable import StrataStore

/// The seed libraries' limits and scopes (issue 16): `maxAge` counted from the write
/// (SDWebImage's maxCacheAge), flushes and removes that honour their tiers (SDWebImage's
/// clearMemory, YYCache's removeObjectForKey:withType:), per-namespace counters (MMKV's
/// per-user scopes). Real SQLite files in temp dirs, the injected clock for ages.
final class SeedLimitsTests: XCTestCase {
    /// Rows in the database file itself, whatever their state (the sweep has not run).
    func rawRows(_ f: StoreFixture) throws -> Int64 {
        try f.store.sync()
        return try openDatabase(f.dir).scalarInt("SELECT count(*) FROM items") ?? -1
    }

    // MARK: maxAge

    func testMaxAgeCountsFromTheWriteNotTheLastReadInEveryTierBeforeAnySweep() throws {
        // Sweeps that look at no rows: nothing but the reads themselves can hide the item.
        let f = try StoreFixture { $0.maxAge = 100; $0.sweepBatch = 0 }
        _ = try f.store.set(bytes("a"), bytes("1"))
        let written = f.clock.nowMicros()
        let m = try XCTUnwrap(try f.store.metadata(bytes("a")))
        XCTAssertEqual(m.expiresAt, Int64(m.version) + 100_000_000, "META tells when the item turns too old")
        XCTAssertGreaterThanOrEqual(m.version, UInt64(written))
        f.clock.advance(seconds: 60)
        XCTAssertEqual(try f.store.get(bytes("a"))?.value, bytes("1"), "60 s after the write: served")
        XCTAssertEqual(try f.store.get(bytes("a"), tiers: .disk)?.value, bytes("1"))
        f.clock.advance(seconds: 41) // 101 s after the write, 41 s after the last read
        XCTAssertNil(try f.store.get(bytes("a")), "a read does not restart the age")
        XCTAssertNil(try f.store.get(bytes("a"), tiers: .memory))
        XCTAssertNil(try f.store.get(bytes("a"), tiers: .disk))
        XCTAssertNil(try f.store.metadata(bytes("a")))
        XCTAssertFalse(try f.store.contains(bytes("a")))
        XCTAssertEqual(try f.store.keys().keys, [])
        XCTAssertEqual(try rawRows(f), 1, "the row is still in the file: the read hid it, no sweep removed it")
    }

    func testMaxAgeAppliesToItemsAlreadyStoredAndTheSweepRemovesThem() throws {
        let f = try StoreFixture()
        _ = try f.store.set(bytes("old"), bytes("1"))
        f.clock.advance(seconds: 200)
        _ = try f.store.set(bytes("new"), bytes("2"))
        f.clock.advance(seconds: 10)
        XCTAssertNotNil(try f.store.get(bytes("old")), "no limit yet")
        try f.reopen { $0.maxAge = 100 }
        XCTAssertNil(try f.store.get(bytes("old")), "written 210 s ago: too old the moment the limit is set")
        XCTAssertEqual(try f.store.get(bytes("new"))?.value, bytes("2"))
        XCTAssertTrue(eventually { (try? self.rawRows(f)) == 1 }, "the background sweep removes the old row")
        XCTAssertEqual(f.store.stats().disk.expirations, 1)
    }

    func testMaxAgeHidesAWriteStillInTheLogBacklog() throws {
        let f = try StoreFixture { $0.maxAge = 100; $0.applierDelayForTests = 30 }
        _ = try f.store.set(bytes("p"), bytes("1"), options: SetOptions(tiers: .disk))
        XCTAssertEqual(try f.store.get(bytes("p"), tiers: .disk)?.value, bytes("1"))
        XCTAssertGreaterThan(f.store.stats().logBacklogRecords, 0, "still in the log, not in SQLite")
        f.clock.advance(seconds: 101)
        XCTAssertNil(try f.store.get(bytes("p"), tiers: .disk))
        XCTAssertNil(try f.store.metadata(bytes("p")))
        XCTAssertEqual(try f.store.keys().keys, [])
    }

    func testWritesTreatAnItemPastMaxAgeAsAbsentAndANewVersionRestartsTheAge() throws {
        let f = try StoreFixture { $0.maxAge = 100; $0.maintenanceInterval = 3600 }
        _ = try f.store.set(bytes("k"), bytes("old"))
        _ = try f.store.set(bytes("n"), bytes("7"))
        _ = try f.store.set(bytes("t"), bytes("v"))
        f.clock.advance(seconds: 90)
        XCTAssertTrue(try f.store.touch(bytes("t"), expiry: .never), "a touch gives a new version")
        f.clock.advance(seconds: 20)
        XCTAssertEqual(try f.store.set(bytes("k"), bytes("new"), options: SetOptions(mode: .add)).isStored, true)
        XCTAssertEqual(try f.store.get(bytes("k"))?.value, bytes("new"))
        XCTAssertEqual(try f.store.increment(bytes("n")), .notFound, "a counter past maxAge is absent")
        XCTAssertEqual(try f.store.get(bytes("t"))?.value, bytes("v"), "touched 20 s ago: young again")
        XCTAssertEqual(try f.store.remove(bytes("n")), .notFound)
    }

    func testMemoryOnlyItemsObeyMaxAgeToo() throws {
        let f = try StoreFixture { $0.maxAge = 10 }
        _ = try f.store.set(bytes("m"), bytes("1"), options: SetOptions(tiers: .memory))
        f.clock.advance(seconds: 11)
        XCTAssertNil(try f.store.get(bytes("m")))
        XCTAssertEqual(try f.store.keys(tiers: .memory).keys, [])
    }

    func testIdleAgeLimitTrimsMemoryWithoutInserts() throws {
        let f = try StoreFixture { $0.memoryAgeLimit = 100 }
        _ = try f.store.set(bytes("idle"), bytes("1"), options: SetOptions(tiers: .memory))
        f.clock.advance(seconds: 101)
        XCTAssertTrue(eventually { f.store.stats().memory.items == 0 }, "the sweeper trims idle items")
        XCTAssertEqual(f.store.stats().memory.evictions, 1)
    }

    // MARK: Flush per tier

    func testFlushOfMemoryOnlyKeepsTheDisk() throws {
        let f = try StoreFixture()
        _ = try f.store.set(bytes("a"), bytes("1"), namespace: bytes("ns"))
        _ = try f.store.set(bytes("m"), bytes("2"), namespace: bytes("ns"), options: SetOptions(tiers: .memory))
        try f.store.flush(namespace: bytes("ns"), tiers: .memory)
        XCTAssertNil(try f.store.get(bytes("a"), namespace: bytes("ns"), tiers: .memory))
        XCTAssertNil(try f.store.get(bytes("m"), namespace: bytes("ns")), "a memory-only item is gone")
        let back = try XCTUnwrap(try f.store.get(bytes("a"), namespace: bytes("ns")))
        XCTAssertEqual(back.tier, .disk, "a later read finds the disk copy")
        XCTAssertEqual(try f.store.get(bytes("a"), namespace: bytes("ns"))?.tier, .memory, "and promotes it")

        _ = try f.store.set(bytes("b"), bytes("3"))
        try f.store.flushAll(tiers: .memory)
        XCTAssertEqual(f.store.stats().memory.items, 0, "memory is freed at once")
        XCTAssertEqual(try f.store.get(bytes("b"))?.tier, .disk)
        XCTAssertEqual(try f.store.get(bytes("a"), namespace: bytes("ns"))?.tier, .disk)
    }

    func testFlushOfDiskOnlyKeepsMemoryCopies() throws {
        let f = try StoreFixture()
        _ = try f.store.set(bytes("a"), bytes("1"), namespace: bytes("ns"))
        try f.store.flush(namespace: bytes("ns"), tiers: .disk)
        XCTAssertNil(try f.store.get(bytes("a"), namespace: bytes("ns"), tiers: .disk))
        XCTAssertEqual(try f.store.get(bytes("a"), namespace: bytes("ns"))?.tier, .memory, "the memory copy stays")
        _ = try f.store.set(bytes("b"), bytes("2"))
        try f.store.flushAll(tiers: .disk)
        XCTAssertNil(try f.store.get(bytes("b"), tiers: .disk))
        XCTAssertEqual(try f.store.get(bytes("b"))?.value, bytes("2"))
        try f.store.flushAll()
        XCTAssertNil(try f.store.get(bytes("b")))
        XCTAssertNil(try f.store.get(bytes("a"), namespace: bytes("ns")))
    }

    // MARK: Remove per tier

    func testRemoveOfTheDiskTierLeavesTheMemoryCopy() throws {
        let f = try StoreFixture()
        _ = try f.store.set(bytes("k"), bytes("1"))
        XCTAssertEqual(try f.store.remove(bytes("k"), tiers: .disk), .removed)
        XCTAssertNil(try f.store.get(bytes("k"), tiers: .disk))
        XCTAssertEqual(try f.store.get(bytes("k"))?.tier, .memory)
        // Versioned: the tombstone goes to disk, the memory copy (older) stays.
        _ = try f.store.set(bytes("v"), bytes("1"))
        let version = f.store.hlc.next()
        XCTAssertEqual(try f.store.remove(bytes("v"), tiers: .disk, version: version), .removed)
        XCTAssertEqual(try f.store.read(bytes("v"), tiers: .disk), .tombstone(version: version))
        XCTAssertEqual(try f.store.get(bytes("v"), tiers: .memory)?.value, bytes("1"))
        // A write to both tiers is then decided against the tombstone: an older caller version loses.
        XCTAssertEqual(try f.store.set(bytes("v"), bytes("2"), options: SetOptions(version: version - 1)), .superseded(current: version))
        try f.reopen()
        XCTAssertNil(try f.store.get(bytes("k")), "after a restart memory is empty and the disk has no row")
    }

    func testRemoveOfTheMemoryTierLeavesTheDiskCopy() throws {
        let f = try StoreFixture()
        _ = try f.store.set(bytes("k"), bytes("1"))
        XCTAssertEqual(try f.store.remove(bytes("k"), tiers: .memory), .removed)
        XCTAssertNil(try f.store.get(bytes("k"), tiers: .memory))
        XCTAssertEqual(try f.store.get(bytes("k"))?.tier, .disk, "a later read finds it on disk")
        try f.reopen()
        XCTAssertEqual(try f.store.get(bytes("k"))?.value, bytes("1"), "nothing reached the log")
    }

    // MARK: Namespace counters

    func testNamespaceStatsCountItemsBytesHitsMissesAndSets() throws {
        let f = try StoreFixture()
        _ = try f.store.set(bytes("a"), bytes("12345"), namespace: bytes("alice"))
        _ = try f.store.set(bytes("b"), bytes("xy"), namespace: bytes("alice"))
        _ = try f.store.set(bytes("b"), bytes("xyz"), namespace: bytes("alice"))
        _ = try f.store.set(bytes("c"), bytes("1"), namespace: bytes("bob"))
        _ = try f.store.set(bytes("e"), bytes("1"), namespace: bytes("alice"), options: SetOptions(expiry: .seconds(5)))
        f.clock.advance(seconds: 6)
        _ = try f.store.get(bytes("a"), namespace: bytes("alice"))
        _ = try f.store.get(bytes("zz"), namespace: bytes("alice"))
        let a = try f.store.namespaceStats(bytes("alice"))
        XCTAssertEqual(a.diskItems, 2, "live items: the expired one is not counted")
        XCTAssertEqual(a.diskBytes, 8)
        XCTAssertEqual(a.hits, 1)
        XCTAssertEqual(a.misses, 1)
        XCTAssertEqual(a.sets, 4)
        XCTAssertEqual(try f.store.namespaceStats(bytes("bob")).diskItems, 1)
        let none = try f.store.namespaceStats(bytes("nobody"))
        XCTAssertEqual([none.diskItems, none.hits, none.sets], [0, 0, 0])
        let usage = try f.store.namespaceUsage(waitForBacklog: true)
        XCTAssertEqual(usage[bytes("alice")]?.items, 2)
        XCTAssertEqual(f.store.namespaceCounters()[bytes("bob")]?.sets, 1)
    }
}

/// `strata check` (TieredCache.check): rows that are never served are not live items.
final class CheckCountsTests: XCTestCase {
    func testCheckCountsExpiredAndFlushedRowsApartFromLiveItems() throws {
        let f = try StoreFixture { $0.sweepBatch = 0 } // no sweep removes anything before the check
        _ = try f.store.set(bytes("live"), bytes("1"))
        _ = try f.store.set(bytes("brief"), bytes("2"), options: SetOptions(expiry: .seconds(5)))
        _ = try f.store.set(bytes("x"), bytes("3"), namespace: bytes("gone"))
        try f.store.flush(namespace: bytes("gone"))
        _ = try f.store.remove(bytes("t"), version: f.store.hlc.next())
        f.store.close()
        let now = f.clock.nowMicros()
        let r = try TieredCache.check(directory: f.dir.path, now: now + 10_000_000)
        XCTAssertEqual(r.rows, 4)
        XCTAssertEqual(r.liveItems, 1, "only the item a read would return")
        XCTAssertEqual(r.expiredRows, 1)
        XCTAssertEqual(r.flushedRows, 1)
        XCTAssertEqual(r.tombstones, 1)
        XCTAssertTrue(r.isClean)
        XCTAssertEqual(try TieredCache.check(directory: f.dir.path, now: now).liveItems, 2, "before the expiry it is live")
    }
}
