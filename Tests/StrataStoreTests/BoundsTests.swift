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
