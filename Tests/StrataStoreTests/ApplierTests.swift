import Foundation
import XCTest
import StrataCore
import TestSupport
@testable import StrataStore

/// The applier lets written records gather (`StoreConfiguration.applyDelay`) so SQLite gets
/// large transactions, and goes at once for whoever waits for SQLite; the writer gives its
/// page cache back when idle (`writerIdleRelease`).
final class ApplierTests: XCTestCase {
    private func value(_ i: Int) -> [UInt8] { Array("value-\(i)".utf8) }

    /// A batch keeps only each item's last write, in log order; flushes and other items stay.
    func testCoalescedKeepsEachItemsLastWriteInOrder() {
        func put(_ at: UInt64, _ k: String, _ ns: String = "") -> LoggedWrite {
            let state = ItemState(value: bytes("v\(at)"), flags: 0, extended: [], expiry: 0, version: at, marks: 0)
            return LoggedWrite(position: at, end: at + 1, kind: .put(ItemKey(namespace: bytes(ns), key: bytes(k)), state, .raw, bytes("v\(at)")))
        }
        let batch = [put(0, "a"), put(1, "b"), LoggedWrite(position: 2, end: 3, kind: .delete(ItemKey(namespace: [], key: bytes("a")))),
                     put(3, "a", "other"), LoggedWrite(position: 4, end: 5, kind: .flushAll), put(5, "b"), put(6, "c")]
        XCTAssertEqual(DurabilityLog.coalesced(batch).map(\.position), [2, 3, 4, 5, 6])
        let distinct = [put(0, "a"), put(1, "b"), put(2, "c")]
        XCTAssertEqual(DurabilityLog.coalesced(distinct).map(\.position), [0, 1, 2])
        XCTAssertEqual(DurabilityLog.coalesced([put(9, "x")]).map(\.position), [9])
    }

    /// Writes spread over half a second go to SQLite in one transaction, and every one of them
    /// is readable from the disk tier while it waits (the log's index answers).
    func testWritesGatherIntoOneBatchAndAreReadableMeanwhile() throws {
        let f = try StoreFixture { $0.applyDelay = 1.5 }
        for round in 0..<10 {
            for j in 0..<20 { _ = try f.store.set(bytes("k\(round * 20 + j)"), value(round * 20 + j), options: SetOptions(tiers: .disk)) }
            Thread.sleep(forTimeInterval: 0.05)
        }
        XCTAssertEqual(f.store.log.applyBatches.load(), 0, "nothing applied before the delay")
        XCTAssertEqual(f.store.stats().logBacklogRecords, 200)
        for i in 0..<200 { XCTAssertEqual(try f.store.get(bytes("k\(i)"), tiers: .disk)?.value, value(i)) }
        XCTAssertTrue(eventually(10) { f.store.stats().logBacklogRecords == 0 })
        XCTAssertEqual(f.store.log.applyBatches.load(), 1, "one transaction for the 200 writes")
        XCTAssertEqual(f.store.stats().disk.items, 200)
    }

    /// FLUSH and `sync` wait for SQLite: they wake the applier instead of waiting out the delay.
    func testWhoeverWaitsForSQLiteDoesNotWaitForTheDelay() throws {
        let f = try StoreFixture { $0.applyDelay = 60 }
        for i in 0..<10 { _ = try f.store.set(bytes("k\(i)"), value(i), options: SetOptions(tiers: .disk)) }
        var t0 = monotonicSeconds()
        try f.store.sync()
        XCTAssertLessThan(monotonicSeconds() - t0, 5)
        XCTAssertEqual(f.store.stats().logBacklogRecords, 0)
        _ = try f.store.set(bytes("late"), bytes("v"), options: SetOptions(tiers: .disk))
        t0 = monotonicSeconds()
        try f.store.flush(namespace: [])
        XCTAssertLessThan(monotonicSeconds() - t0, 5)
        XCTAssertNil(try f.store.get(bytes("late"), tiers: .disk))
        XCTAssertEqual(f.store.stats().logBacklogRecords, 0)
    }

    /// A batch's worth of records goes without waiting for the delay, and so does what the
    /// batch limit left behind (it waited as long); fewer than a batch wait.
    func testABatchsWorthGoesAtOnce() throws {
        let f = try StoreFixture { $0.applyDelay = 60; $0.maxApplyBatch = 50 }
        for i in 0..<120 { _ = try f.store.set(bytes("k\(i)"), value(i), options: SetOptions(tiers: .disk)) }
        XCTAssertTrue(eventually(10) { f.store.log.appliedRecords.load() == 120 },
                      "applied: \(f.store.log.appliedRecords.load())")
        for i in 0..<10 { _ = try f.store.set(bytes("n\(i)"), value(i), options: SetOptions(tiers: .disk)) }
        Thread.sleep(forTimeInterval: 0.3)
        XCTAssertEqual(f.store.log.appliedRecords.load(), 120, "fewer than a batch wait for the delay")
        XCTAssertEqual(f.store.stats().logBacklogRecords, 10)
    }

    /// A quarter of the log's limit in bytes goes without waiting for the delay either.
    func testAQuarterOfTheLogLimitGoesAtOnce() throws {
        let f = try StoreFixture { $0.applyDelay = 60; $0.logLimit = 1 << 20 }
        let big = [UInt8](repeating: 7, count: 40_000)
        var v = big
        for i in 0..<10 { // 400 KB of records, incompressible enough not to shrink below 256 KiB
            var rng = SplitMix(seed: UInt64(i))
            for j in 0..<v.count { v[j] = UInt8(truncatingIfNeeded: rng.next()) }
            _ = try f.store.set(bytes("k\(i)"), v, options: SetOptions(tiers: .disk))
        }
        XCTAssertTrue(eventually(10) { f.store.log.appliedRecords.load() >= 6 },
                      "applied: \(f.store.log.appliedRecords.load())")
    }

    /// Closing applies what gathered: the next open replays nothing.
    func testCloseAppliesWhatGathered() throws {
        let f = try StoreFixture { $0.applyDelay = 60 }
        for i in 0..<25 { _ = try f.store.set(bytes("k\(i)"), value(i), options: SetOptions(tiers: .disk)) }
        XCTAssertEqual(f.store.stats().logBacklogRecords, 25)
        let t0 = monotonicSeconds()
        try f.reopen()
        XCTAssertLessThan(monotonicSeconds() - t0, 10)
        XCTAssertEqual(f.store.log.replayedRecords, 0, "everything was applied at close")
        for i in 0..<25 { XCTAssertEqual(try f.store.get(bytes("k\(i)"), tiers: .disk)?.value, value(i)) }
    }

    /// The log's index gives its tables back once a burst is applied.
    func testTheIndexShrinksOnceABurstIsApplied() throws {
        let f = try StoreFixture { $0.applyDelay = 60; $0.maxApplyBatch = 1 << 20; $0.logLimit = 256 << 20 }
        for i in 0..<60_000 { _ = try f.store.set(bytes("k\(i)"), bytes("v"), options: SetOptions(tiers: .disk)) }
        XCTAssertEqual(f.store.log.appliedRecords.load(), 0)
        XCTAssertGreaterThan(f.store.log.index.capacity, 60_000)
        try f.store.sync()
        XCTAssertEqual(f.store.log.index.count, 0)
        XCTAssertLessThan(f.store.log.index.capacity, 64 * 1024, "the burst's tables were given back")
    }

    /// The writer's page cache fills while batches come and is given back once they stop.
    func testTheWriterGivesItsCacheBackWhenIdle() throws {
        let f = try StoreFixture { $0.applyDelay = 0; $0.writerIdleRelease = 0.3 }
        var rng = SplitMix(seed: 5)
        for i in 0..<2000 {
            let v = (0..<600).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            _ = try f.store.set(bytes("k\(i)"), v, options: SetOptions(tiers: .disk))
        }
        try f.store.sync()
        // 2,000 rows of 600 B span ~300 pages, all changed since the last checkpoint.
        XCTAssertTrue(eventually(5) { f.store.disk.writerCacheBytes.load(ordering: .relaxed) > 512 << 10 },
                      "cache after the batches: \(f.store.disk.writerCacheBytes.load(ordering: .relaxed))")
        XCTAssertTrue(eventually(10) { f.store.disk.writerCacheBytes.load(ordering: .relaxed) < 128 << 10 },
                      "cache once idle: \(f.store.disk.writerCacheBytes.load(ordering: .relaxed))")
        XCTAssertEqual(try f.store.get(bytes("k1999"), tiers: .disk)?.value.count, 600)
    }
}
