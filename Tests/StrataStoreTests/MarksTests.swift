import XCTest
import StrataCore
@testable import StrataStore

/// Stale marks (invalidate) and negative entries: stored in both tiers, survive a reopen,
/// checked by the checksum, and ordered by versions like every other write.
final class MarksTests: XCTestCase {
    func testInvalidateKeepsTheValueFlaggedStaleWithANewerVersionInBothTiers() throws {
        let f = try StoreFixture()
        guard case .stored(let v1) = try f.store.set(bytes("k"), bytes("old"), options: SetOptions(flags: 7, extended: bytes("x"))) else {
            return XCTFail("not stored")
        }
        guard case .invalidated(let v2) = try f.store.invalidate(bytes("k")) else { return XCTFail("not invalidated") }
        XCTAssertGreaterThan(v2, v1)
        for tiers in [Tiers.memory, .disk] {
            let item = try XCTUnwrap(try f.store.get(bytes("k"), tiers: tiers), "\(tiers)")
            XCTAssertEqual(item.value, bytes("old"))
            XCTAssertTrue(item.stale)
            XCTAssertFalse(item.negative)
            XCTAssertEqual(item.version, v2)
            XCTAssertEqual(item.flags, 7)
            XCTAssertEqual(item.extended, bytes("x"))
        }
        // Survives a reopen (the marks are in the row and its checksum).
        try f.reopen()
        XCTAssertEqual(try f.store.get(bytes("k"))?.stale, true)
        // A new write makes it fresh again.
        _ = try f.store.set(bytes("k"), bytes("new"))
        let fresh = try XCTUnwrap(try f.store.get(bytes("k")))
        XCTAssertEqual(fresh.value, bytes("new"))
        XCTAssertFalse(fresh.stale)
    }

    func testInvalidateOfAnAbsentKeyAndVersionedInvalidates() throws {
        let f = try StoreFixture()
        XCTAssertEqual(try f.store.invalidate(bytes("nothing")), .notFound)
        _ = try f.store.set(bytes("k"), bytes("v"), options: SetOptions(version: 100))
        // A replica's invalidate carries the version the first node chose.
        XCTAssertEqual(try f.store.invalidate(bytes("k"), version: 90), .superseded(current: 100))
        XCTAssertEqual(try f.store.get(bytes("k"))?.stale, false)
        XCTAssertEqual(try f.store.invalidate(bytes("k"), version: 120), .invalidated(version: 120))
        XCTAssertEqual(try f.store.get(bytes("k"))?.version, 120)
        // An older fill arriving late is ignored; a newer one replaces the stale value.
        XCTAssertEqual(try f.store.set(bytes("k"), bytes("late"), options: SetOptions(version: 110)), .superseded(current: 120))
        XCTAssertEqual(try f.store.set(bytes("k"), bytes("fresh"), options: SetOptions(version: 130)), .stored(version: 130))
        XCTAssertEqual(try f.store.get(bytes("k"))?.stale, false)
    }

    func testNegativeEntriesAreLiveItemsFlaggedNegativeUntilTheyExpire() throws {
        let f = try StoreFixture()
        var o = SetOptions(expiry: .seconds(5))
        o.negative = true
        _ = try f.store.set(bytes("url"), bytes("HTTP 404"), options: o)
        for tiers in [Tiers.memory, .disk] {
            let item = try XCTUnwrap(try f.store.get(bytes("url"), tiers: tiers))
            XCTAssertTrue(item.negative)
            XCTAssertEqual(item.value, bytes("HTTP 404"))
        }
        // Absent for every write's condition: replace, CAS, touch and a counter find nothing...
        XCTAssertEqual(try f.store.set(bytes("url"), bytes("x"), options: SetOptions(mode: .replace)), .notFound)
        XCTAssertEqual(try f.store.set(bytes("url"), bytes("x"), options: SetOptions(mode: .cas(1))), .notFound)
        XCTAssertNil(try f.store.touchVersioned(bytes("url"), expiry: .seconds(100)))
        XCTAssertEqual(try f.store.increment(bytes("url")), .notFound)
        try f.reopen()
        XCTAssertEqual(try f.store.get(bytes("url"))?.negative, true, "and nothing changed it")
        // ...a GET with touch answers it without extending it...
        guard case .hit(let read) = try f.store.read(bytes("url"), touch: .seconds(100)) else { return XCTFail("expected the negative entry") }
        XCTAssertTrue(read.negative)
        f.clock.advance(seconds: 6)
        XCTAssertNil(try f.store.get(bytes("url")), "expired at its own time")
        // ...add stores over it, and a delete removes it reporting NOT_FOUND.
        _ = try f.store.set(bytes("url"), bytes("HTTP 404"), options: o)
        guard case .stored = try f.store.set(bytes("url"), bytes("x"), options: SetOptions(mode: .add)) else { return XCTFail("add over a negative entry") }
        XCTAssertEqual(try f.store.get(bytes("url"))?.negative, false)
        _ = try f.store.set(bytes("url"), bytes("HTTP 404"), options: o)
        XCTAssertEqual(try f.store.remove(bytes("url")), .notFound)
        XCTAssertNil(try f.store.get(bytes("url")))
        // Invalidating a negative entry removes it (there is no value to serve stale).
        _ = try f.store.set(bytes("n2"), bytes("failed"), options: o)
        XCTAssertEqual(try f.store.invalidate(bytes("n2")), .notFound, "as DELETE answers: no value to mark stale")
        XCTAssertNil(try f.store.get(bytes("n2")))
    }

    func testStaleSetOptionStoresAnItemAlreadyStale() throws {
        let f = try StoreFixture()
        var o = SetOptions(tiers: .disk, version: 500)
        o.stale = true
        XCTAssertEqual(try f.store.set(bytes("k"), bytes("v"), options: o), .stored(version: 500))
        XCTAssertEqual(try f.store.get(bytes("k"))?.stale, true)
    }

    func testADamagedMarkIsCaughtByTheChecksum() throws {
        let f = try StoreFixture()
        _ = try f.store.set(bytes("k"), bytes("value"), options: SetOptions(tiers: .disk))
        _ = try f.store.invalidate(bytes("k"), tiers: .disk)
        f.store.close() // (closing applies the log's backlog to SQLite)
        do { try openDatabase(f.dir).execute("UPDATE items SET tombstone = 0") }
        try f.reopen()
        XCTAssertNil(try f.store.get(bytes("k"), tiers: .disk), "a row whose marks changed must fail its checksum")
    }

    func testVersionOneFilesAreMigrated() throws {
        let f = try StoreFixture()
        _ = try f.store.set(bytes("k"), bytes("v"), options: SetOptions(tiers: .disk))
        f.store.close()
        do { try openDatabase(f.dir).execute("PRAGMA user_version=1") }
        try f.reopen()
        XCTAssertEqual(try f.store.get(bytes("k"))?.value, bytes("v"))
        f.store.close()
        XCTAssertEqual(try openDatabase(f.dir).scalarInt("PRAGMA user_version"), DiskTier.schemaVersion)
    }
}
