import Foundation
import XCTest
import StrataCore
@testable import StrataStore

/// Issue 16: store limits that hold (namespaces flushed by name, write-behind bytes).
final class NamespaceBoundTests: XCTestCase {
    /// A flush of a namespace that never existed records nothing: the registry does not grow,
    /// however many names are flushed, and nothing goes to the log.
    func testFlushingUnknownNamespacesLeavesNoEntry() throws {
        let f = try StoreFixture()
        _ = try f.store.set(bytes("k"), bytes("v"), namespace: bytes("real"))
        let before = f.store.knownNamespaceCount
        let logBefore = f.store.stats().logBytes
        for i in 0..<20_000 { try f.store.flush(namespace: bytes("ghost-\(i)")) }
        XCTAssertEqual(f.store.knownNamespaceCount, before, "a flush of an unknown namespace left a registry entry")
        XCTAssertEqual(f.store.stats().logBytes, logBefore, "a flush of an unknown namespace wrote a log record")
        XCTAssertEqual(try f.store.get(bytes("k"), namespace: bytes("real"))?.value, bytes("v"))
        // Reads of unknown namespaces create nothing either.
        for i in 0..<1_000 { XCTAssertNil(try f.store.get(bytes("k"), namespace: bytes("ghost-\(i)"))) }
        XCTAssertEqual(f.store.knownNamespaceCount, before)
        try f.reopen()
        XCTAssertEqual(f.store.knownNamespaceCount, before, "no ghost namespace reached the database")
    }

    /// Deletes, touches, counters without an initial value, replaces and invalidates in
    /// namespaces that hold nothing find nothing and leave no entry either; in a real namespace
    /// they work as before, and a versioned delete (a replica's tombstone) is still recorded.
    func testWritesThatOnlyChangeExistingItemsLeaveNoEntryForUnknownNamespaces() throws {
        let f = try StoreFixture()
        _ = try f.store.set(bytes("k"), bytes("1"), namespace: bytes("real"))
        let before = f.store.knownNamespaceCount
        for i in 0..<5_000 {
            let ns = bytes("ghost-\(i)")
            XCTAssertEqual(try f.store.remove(bytes("k"), namespace: ns), .notFound)
            XCTAssertFalse(try f.store.touch(bytes("k"), namespace: ns, expiry: .seconds(60)))
            XCTAssertEqual(try f.store.increment(bytes("k"), namespace: ns), .notFound)
            XCTAssertEqual(try f.store.set(bytes("k"), bytes("v"), namespace: ns, options: SetOptions(mode: .replace)), .notFound)
            _ = try f.store.invalidate(bytes("k"), namespace: ns)
        }
        XCTAssertEqual(f.store.knownNamespaceCount, before, "writes that found nothing left registry entries")
        guard case .value(2, _) = try f.store.increment(bytes("k"), namespace: bytes("real")) else { return XCTFail("incr in a real namespace") }
        XCTAssertEqual(try f.store.remove(bytes("k"), namespace: bytes("real")), .removed)
        // A versioned delete may arrive before the write it orders against: it is kept.
        _ = try f.store.remove(bytes("late"), namespace: bytes("replica-ns"), version: UInt64(f.clock.nowMicros()))
        XCTAssertEqual(f.store.knownNamespaceCount, before + 1)
    }

    /// A namespace whose items are only on disk (memory empty after a reopen) is known and its
    /// flush still works: items gone from disk and after another reopen.
    func testFlushingANamespaceWithItemsOnDiskStillWorks() throws {
        let f = try StoreFixture()
        for i in 0..<10 {
            _ = try f.store.set(bytes("k\(i)"), bytes("a"), namespace: bytes("alice"))
            _ = try f.store.set(bytes("k\(i)"), bytes("b"), namespace: bytes("bob"))
        }
        try f.reopen()
        XCTAssertEqual(f.store.knownNamespaceCount, 2)
        try f.store.flush(namespace: bytes("alice"))
        for i in 0..<10 {
            XCTAssertNil(try f.store.get(bytes("k\(i)"), namespace: bytes("alice"), tiers: .disk))
            XCTAssertEqual(try f.store.get(bytes("k\(i)"), namespace: bytes("bob"))?.value, bytes("b"))
        }
        // A namespace written only to the log (the applier held back) is known, and flushed.
        try f.reopen { $0.applierDelayForTests = 0.5 }
        _ = try f.store.set(bytes("p"), bytes("pending"), namespace: bytes("carol"))
        try f.store.flush(namespace: bytes("carol"))
        XCTAssertNil(try f.store.get(bytes("p"), namespace: bytes("carol")))
        try f.reopen { $0.applierDelayForTests = 0 }
        for i in 0..<10 { XCTAssertNil(try f.store.get(bytes("k\(i)"), namespace: bytes("alice"))) }
        XCTAssertNil(try f.store.get(bytes("p"), namespace: bytes("carol")))
        XCTAssertEqual(try f.store.get(bytes("k3"), namespace: bytes("bob"))?.value, bytes("b"))
    }
}

final class WriteBehindBytesTests: XCTestCase {
    /// Eight threads write 1 MiB write-behind values as fast as they can against a 4 MiB
    /// bound: the bytes answered and not yet in the log never pass it (the peak is recorded
    /// at every reservation), every write is kept, and a value larger than the bound is
    /// never written behind (it waits for the log, like a durable write).
    func testPendingWriteBehindBytesNeverPassTheBound() throws {
        let limit = 4 << 20
        let f = try StoreFixture { $0.maxWriteBehindBytes = limit }
        let value = [UInt8](repeating: 7, count: 1 << 20)
        let store = f.store!
        DispatchQueue.concurrentPerform(iterations: 8) { t in
            for i in 0..<40 {
                _ = try? store.set(bytes("t\(t)-\(i)"), value, options: SetOptions(writeBehind: true))
                XCTAssertLessThanOrEqual(store.stats().writeBehindPendingBytes, limit)
            }
        }
        let s = store.stats()
        XCTAssertLessThanOrEqual(s.writeBehindPeakBytes, limit, "peak write-behind bytes")
        XCTAssertGreaterThan(s.writeBehindPeakBytes, 0)
        XCTAssertGreaterThan(s.writeBehindTotal, 0, "some writes went behind")
        let total = s.writeBehindTotal
        _ = try store.set(bytes("huge"), [UInt8](repeating: 1, count: limit + 1), options: SetOptions(writeBehind: true))
        XCTAssertEqual(store.stats().writeBehindTotal, total, "a value past the bound waited for the log")
        XCTAssertTrue(eventually { store.stats().writeBehindPendingBytes == 0 }, "every reservation was released")
        try f.reopen()
        for t in 0..<8 { for i in stride(from: 0, to: 40, by: 13) { XCTAssertEqual(try f.store.get(bytes("t\(t)-\(i)"))?.value.count, 1 << 20) } }
        XCTAssertEqual(try f.store.get(bytes("huge"))?.value.count, limit + 1)
    }
}
