import Foundation
import XCTest
import StrataCore
@testable import StrataStore

/// The disk budget (issue 16, "A full or small disk"): the WAL and the log fitted to the
/// limit, most of the budget holding items, trimming in batches down to a low-water mark,
/// oldest-first eviction, and values that cannot fit refused before anything changes.
final class DiskBudgetTests: XCTestCase {
    func testSharesAreFittedToSmallLimitsOnly() {
        let small = DiskBudget(limit: 16 << 20, walLimit: 16 << 20, logLimit: 64 << 20, logSegmentBytes: 16 << 20, trimTo: 0.9)
        XCTAssertEqual(small.walLimit, 128 << 10)
        XCTAssertEqual(small.logLimit, 256 << 10)
        XCTAssertEqual(small.logSegmentBytes, 64 << 10)
        XCTAssertEqual(small.maxStoredItem, ((16 << 20) - (256 << 10) - 4 * (128 << 10)) / 32)
        // Room for the log's backlog, four WAL checkpoints and four more copies of the largest item.
        XCTAssertEqual(small.transientRoom, (256 << 10) + 4 * (128 << 10) + 4 * small.maxStoredItem)
        XCTAssertEqual(small.highWater, (16 << 20) - small.transientRoom)
        XCTAssertEqual(small.lowWater, Int(Double(small.highWater) * 0.9))
        XCTAssertGreaterThan(Double(small.highWater) / Double(16 << 20), 0.83, "most of a small limit holds items")
        // A configured largest item smaller than the share sizes the room instead.
        let capped = DiskBudget(limit: 16 << 20, walLimit: 16 << 20, logLimit: 64 << 20, logSegmentBytes: 16 << 20,
                                trimTo: 0.9, maxItemBytes: 1000)
        XCTAssertEqual(capped.transientRoom, (256 << 10) + 4 * (128 << 10) + 4000)

        let defaults = DiskBudget(StoreConfiguration(directory: "/unused"))
        XCTAssertEqual(defaults.walLimit, 16 << 20, "the default 4 GiB keeps the measured WAL size")
        XCTAssertEqual(defaults.logLimit, 16 << 20)
        XCTAssertEqual(defaults.logSegmentBytes, 16 << 20)

        let unlimited = DiskBudget(limit: 0, walLimit: 16 << 20, logLimit: 64 << 20, logSegmentBytes: 16 << 20, trimTo: 0.9)
        XCTAssertFalse(unlimited.isLimited)
        XCTAssertEqual(unlimited.highWater, Int.max)
        XCTAssertEqual(unlimited.maxStoredItem, Int.max)
        XCTAssertEqual(unlimited.walLimit, 16 << 20)

        // A configured size smaller than the share stays; trimTo is clamped to 0.05…1.
        let tight = DiskBudget(limit: 1 << 30, walLimit: 1 << 20, logLimit: 2 << 20, logSegmentBytes: 1 << 20, trimTo: 7)
        XCTAssertEqual(tight.walLimit, 1 << 20)
        XCTAssertEqual(tight.logLimit, 2 << 20)
        XCTAssertEqual(tight.trimTo, 1)
    }

    /// Bytes of every file the store keeps in its directory (database, WAL, log segments).
    static func directoryBytes(_ path: String) -> Int {
        var total = 0
        for dir in [path, path + "/log"] {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [] {
                var st = stat()
                if stat(dir + "/" + name, &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG { total += Int(st.st_size) }
            }
        }
        return total
    }

    /// Outside review dur3 F3: a store reopened with a lower byte limit stayed at 2–3 × it
    /// until writes came. Maintenance now trims to the limit by itself, and the vacuum gives
    /// the pages back: the directory gets under the new limit with no write at all. The first
    /// version of this trim counted the replayed log's segments, still on disk right after the
    /// reopen, and emptied the store (a clean-clone CI run): it must trim, not empty — and a
    /// write at once after the reopen must not empty it either.
    func testALimitLoweredAtReopenIsReachedWithoutWritesAndKeepsItems() throws {
        let f = try StoreFixture()
        func fill() throws {
            for i in 0..<2_000 { _ = try f.store.set(bytes("k\(i)"), Self.noise(i, 10_000), options: SetOptions(tiers: .disk)) }
            try f.store.sync()
        }
        try fill()
        XCTAssertGreaterThan(Self.directoryBytes(f.dir.path), 20 << 20)
        let limit = 8 << 20
        try f.reopen { $0.diskByteLimit = limit; $0.maintenanceInterval = 0.02 }
        let until = Date().addingTimeInterval(60)
        while Self.directoryBytes(f.dir.path) > limit && Date() < until { usleep(50_000) }
        XCTAssertLessThanOrEqual(Self.directoryBytes(f.dir.path), limit, "under the lowered limit without a write")
        XCTAssertGreaterThan(f.store.stats().disk.evictions, 0)
        XCTAssertGreaterThan(f.store.stats().disk.items, 300, "trimmed to the limit, not emptied")
        _ = try f.store.set(bytes("after"), Self.noise(9_999, 10_000), options: SetOptions(tiers: .disk))
        try f.store.sync()
        XCTAssertGreaterThan(f.store.stats().disk.items, 300, "a write after the trim keeps the rest")

        // Again, with a write at once after the reopen (before any maintenance pass).
        try f.reopen { $0.diskByteLimit = Int.max; $0.maintenanceInterval = 3_600 }
        try fill()
        try f.reopen { $0.diskByteLimit = limit; $0.maintenanceInterval = 3_600 }
        _ = try f.store.set(bytes("first"), Self.noise(10_000, 10_000), options: SetOptions(tiers: .disk))
        try f.store.sync()
        XCTAssertGreaterThan(f.store.stats().disk.items, 300, "the first write after a reopen trims, not empties")
        XCTAssertEqual(try f.store.get(bytes("first"), tiers: .disk)?.value, Self.noise(10_000, 10_000))
    }

    func testTheDirectorysBytesAreKnownFromTheStart() throws {
        let f = try StoreFixture()
        for i in 0..<2_000 { _ = try f.store.set(bytes("k\(i)"), Self.noise(i, 10_000), options: SetOptions(tiers: .disk)) }
        try f.store.sync()
        XCTAssertGreaterThan(Self.directoryBytes(f.dir.path), 20 << 20)
        let limit = 8 << 20
        try f.reopen { $0.diskByteLimit = limit; $0.maintenanceInterval = 3_600 }
        // At least the 2,000 incompressible values (20,000,000 B): 20 MiB held only while a WAL or
        // log segment was left beside the file at the reopen (CI once measured 20,827,856 B).
        XCTAssertGreaterThan(f.store.stats().disk.bytes, 2_000 * 10_000, "the directory's bytes are known from the start (an outside review read 0)")
    }

    static func noise(_ seed: Int, _ count: Int) -> [UInt8] {
        var rng = SplitMix(seed: UInt64(seed) &+ 0x5eed)
        return (0..<count).map { _ in UInt8(truncatingIfNeeded: rng.next()) } // incompressible
    }

    /// Fills a store of each limit with 1.5 × its size of incompressible 16 KiB values, every
    /// set acknowledged durably and read back at once. Returns the peak share of the limit that
    /// held live items, and the peak bytes on disk.
    func fill(limit: Int, value: Int = 16 << 10) throws -> (utilisation: Double, peakBytes: Int) {
        let f = try StoreFixture { $0.diskByteLimit = limit }
        var peakItems = 0, peakBytes = 0
        let n = limit * 3 / 2 / value
        for i in 0..<n {
            let v = Self.noise(i, value)
            _ = try f.store.set(bytes("k\(i)"), v, options: SetOptions(tiers: .disk))
            // Never evicted by its own admission.
            XCTAssertEqual(try f.store.get(bytes("k\(i)"), tiers: .disk)?.value.count, value, "k\(i) at \(limit >> 20) MiB")
            if i % 8 == 7 {
                try f.store.sync()
                peakItems = max(peakItems, f.store.stats().disk.items)
                peakBytes = max(peakBytes, Self.directoryBytes(f.dir.path))
            }
        }
        try f.store.sync()
        XCTAssertGreaterThan(f.store.stats().disk.evictions, 0, "1.5 × the limit was written")
        XCTAssertNotNil(try f.store.get(bytes("k\(n - 1)"), tiers: .disk))
        return (Double(peakItems * value) / Double(limit), peakBytes)
    }

    func testSmallLimitsHoldItemsInMostOfTheBudgetAndNeverPassIt() throws {
        var figures: [String] = []
        // 48 and 64 MiB too at the soak battery's full counts.
        let sizes = ProcessInfo.processInfo.environment["STRATA_SOAK"] == nil ? [16, 32] : [16, 32, 48, 64]
        for mib in sizes {
            let limit = mib << 20
            let (share, peak) = try fill(limit: limit)
            // (Items are counted every 8 writes, so the high-water mark may be missed by up to 8
            // of them — 0.8 % at 16 MiB: a CI run counted 818 of 819, 79.9 %. Hence 78 %.)
            XCTAssertGreaterThanOrEqual(share, 0.78, "\(mib) MiB: \(Int(share * 100)) % of the budget held items at the high-water mark")
            XCTAssertLessThanOrEqual(peak, limit + (16 << 10) + 4096, "\(mib) MiB: on disk \(peak) bytes")
            figures.append("\(mib) MiB: \(Int(share * 100)) % items, peak \(peak * 100 / limit) % of the limit on disk")
        }
        reportFigure("disk budget utilisation (16 KiB values)", figures.joined(separator: "; "))
    }

    /// A key rewritten with the same bytes writes no SQLite pages (SQLite skips an identical
    /// row), so the WAL never reached its checkpoint limit and the log's applied segments were
    /// never let go: an outside review saw 205 MiB of segments for a 1 MiB backlog, the
    /// directory past the limit, and every other item evicted (gone after a restart).
    func testRewritingAKeyWithTheSameBytesLetsTheLogGo() throws {
        let limit = 64 << 20
        let f = try StoreFixture { $0.diskByteLimit = limit }
        let keep = (0..<10).map { Self.noise($0 + 10, 512 << 10) }
        for (i, v) in keep.enumerated() { _ = try f.store.set(bytes("keep\(i)"), v) }
        let same = Self.noise(99, 1 << 20)
        var peak = 0
        for i in 0..<200 {
            _ = try f.store.set(bytes("same"), same)
            if i % 20 == 19 { try f.store.sync(); peak = max(peak, f.store.stats().logBytes) }
        }
        try f.store.sync()
        XCTAssertLessThan(peak, 24 << 20, "the log's applied segments go at checkpoints (200 MiB written)")
        XCTAssertEqual(f.store.stats().disk.evictions, 0, "nothing evicted: the items take a tenth of the budget")
        try f.reopen()
        for (i, v) in keep.enumerated() { XCTAssertTrue(try f.store.get(bytes("keep\(i)"), tiers: .disk)?.value == v, "keep\(i) lost") }
    }

    func testValueThatCannotFitIsRefusedBeforeAnythingChanges() throws {
        let f = try StoreFixture { $0.diskByteLimit = 16 << 20 }
        let big = Self.noise(1, 6 << 20)
        XCTAssertThrowsError(try f.store.set(bytes("big"), big)) { e in
            XCTAssertEqual((e as? StoreError)?.code, .valueTooLarge, "\(e)")
            XCTAssertTrue("\(e)".contains("disk limit"), "\(e)")
        }
        XCTAssertNil(try f.store.get(bytes("big")))
        XCTAssertEqual(f.store.stats().disk.items, 0)
        // Compressible data of the same size fits (the limit is on stored bytes), and the memory
        // tier alone is not bound by the disk limit.
        XCTAssertNoThrow(try f.store.set(bytes("zeros"), [UInt8](repeating: 0, count: 6 << 20)))
        XCTAssertNoThrow(try f.store.set(bytes("mem"), big, options: SetOptions(tiers: .memory)))
        XCTAssertEqual(try f.store.get(bytes("zeros"), tiers: .disk)?.value.count, 6 << 20)
    }

    /// A large value (under the largest a limit takes) is never evicted to make room for
    /// itself: the older items go (an outside review saw a second 5 MB value under a 16 MiB
    /// limit evict both, itself included).
    func testALargeValueIsNotEvictedForItself() throws {
        let f = try StoreFixture { $0.diskByteLimit = 16 << 20 }
        let size = f.store.disk.budget.maxStoredItem - 1000
        var written: [String] = []
        for i in 0..<40 {
            let v = Self.noise(10 + i, size)
            XCTAssertNoThrow(try f.store.set(bytes("k\(i)"), v, options: SetOptions(tiers: .disk)), "k\(i)")
            try f.store.sync()
            XCTAssertEqual(try f.store.get(bytes("k\(i)"), tiers: .disk)?.value, v, "k\(i), just answered, was evicted")
            written.append("k\(i)")
        }
        XCTAssertNil(try f.store.get(bytes("k0"), tiers: .disk), "the oldest made room")
    }

    /// Samples the directory every 200 µs while `write` runs; returns the largest total seen.
    func peakDirectoryBytes(_ path: String, during write: () throws -> Void) rethrows -> Int {
        let stop = Completion<Void>(), done = Completion<Int>()
        _ = startThread(name: "dir-sampler") {
            var peak = 0
            repeat { peak = max(peak, Self.directoryBytes(path)) } while stop.wait(seconds: 0.0002) == nil
            done.fulfil(peak)
        }
        do { try write() } catch { stop.fulfil(()); _ = done.wait(); throw error }
        usleep(300_000) // the applier's and the checkpoints' last steps
        stop.fulfil(())
        return done.wait()
    }

    /// The directory stays under `--disk-limit` with values up to the largest one the limit
    /// takes, written one after another and by eight writers at once (an outside review saw
    /// 5 MB values take a 16 MiB directory to 21–30 MB: the log kept applied segments, rows
    /// were written before eviction made room, and eight writers could each add a value to
    /// the log's backlog at once).
    func testLargeValuesKeepTheDirectoryUnderTheLimit() throws {
        let limit = 16 << 20
        var figures: [String] = []
        for (size, writers) in [(0, 1), (0, 8), (100_000, 1), (100_000, 8)] {
            let f = try StoreFixture { $0.diskByteLimit = limit }
            let value = size == 0 ? f.store.disk.budget.maxStoredItem - 1000 : size
            let perWriter = limit * 2 / value / writers
            let peak = try peakDirectoryBytes(f.dir.path) {
                let failures = Counter()
                let store = f.store!
                let finished = (0..<writers).map { w in
                    let done = Completion<Void>()
                    _ = startThread(name: "writer-\(w)") {
                        for i in 0..<perWriter {
                            let k = w * perWriter + i
                            do { _ = try store.set(bytes("k\(k)"), Self.noise(k, value), options: SetOptions(tiers: .disk)) } catch { failures.add() }
                        }
                        done.fulfil(())
                    }
                    return done
                }
                for d in finished { d.wait() }
                XCTAssertEqual(failures.load(), 0)
                try f.store.sync()
            }
            XCTAssertGreaterThan(f.store.stats().disk.evictions, 0, "twice the limit was written")
            XCTAssertLessThanOrEqual(peak, limit, "\(value) B values, \(writers) writers: the directory reached \(peak) bytes")
            figures.append("\(value) B × \(writers) writers: peak \(peak * 100 / limit) %")
        }
        reportFigure("disk budget with large values (16 MiB limit)", figures.joined(separator: "; "))
    }

    /// Once full, eviction takes the store down to the low-water mark in one go, so the
    /// writes after it evict nothing until the budget fills again.
    func testTrimmingGoesDownToTheLowWaterMark() throws {
        let limit = 16 << 20, value = 16 << 10
        let f = try StoreFixture { $0.diskByteLimit = limit; $0.diskTrimTo = 0.5 }
        var i = 0
        func put() throws {
            _ = try f.store.set(bytes("k\(i)"), Self.noise(i, value), options: SetOptions(tiers: .disk))
            try f.store.sync()
            i += 1
        }
        while f.store.stats().disk.evictions == 0 && i < 4 * limit / value { try put() }
        let first = f.store.stats()
        XCTAssertGreaterThan(first.disk.evictions, 0)
        // Down to about half the budget (items are the bulk of the file).
        XCTAssertLessThanOrEqual(first.disk.items * value, limit * 55 / 100, "items left after the trim: \(first.disk.items)")
        XCTAssertGreaterThan(first.disk.evictions, 200, "one batch, not one item at a time")
        // A third of the budget more goes in without any eviction.
        for _ in 0..<(limit / 3 / value) { try put() }
        XCTAssertEqual(f.store.stats().disk.evictions, first.disk.evictions)
    }

    /// `--disk-evict oldest`: the oldest writes go first, exactly; a read does not save an
    /// item, an overwrite makes it new.
    func testOldestEvictionIsExactByWriteTime() throws {
        let f = try StoreFixture { $0.diskEviction = .oldest; $0.diskCountLimit = 3000 }
        for i in 0..<3000 { _ = try f.store.set(bytes("k\(i)"), bytes("v\(i)"), options: SetOptions(tiers: .disk)) }
        try f.store.sync()
        for i in 0..<100 { XCTAssertNotNil(try f.store.get(bytes("k\(i)"), tiers: .disk)) } // read: no help
        for i in 100..<200 { _ = try f.store.set(bytes("k\(i)"), bytes("w\(i)"), options: SetOptions(tiers: .disk)) } // rewritten: new
        for i in 3000..<3300 { _ = try f.store.set(bytes("k\(i)"), bytes("v\(i)"), options: SetOptions(tiers: .disk)) }
        try f.store.sync()
        // 300 new keys pushed out the 300 oldest writes: 0..<100 and 200..<400.
        for i in Array(0..<100) + Array(200..<400) {
            XCTAssertNil(try f.store.get(bytes("k\(i)"), tiers: .disk), "k\(i) was among the oldest writes")
        }
        for i in Array(100..<200) + Array(400..<3300) {
            XCTAssertNotNil(try f.store.get(bytes("k\(i)"), tiers: .disk), "k\(i) is newer")
        }
        XCTAssertEqual(f.store.stats().disk.items, 3000)
    }

    /// Below the free-space floor new data is refused at once (DISK_FULL) while deletes,
    /// versioned removes, invalidates and flushes still run; once space exists, writes are
    /// taken again.
    func testTheFloorRefusesNewDataButNotWhatFreesSpace() throws {
        let free = Counter()
        free.add(10 << 20)
        let f = try StoreFixture { c in
            c.freeSpaceFloor = 2 << 20 // (within 8 × the floor, every write reads the free space)
            c.freeSpaceProbe = { free.load() }
        }
        for i in 0..<10 { _ = try f.store.set(bytes("k\(i)"), bytes("v\(i)"), options: SetOptions(tiers: .disk)) }
        free.add(-(8 << 20) - 1) // just under the floor
        XCTAssertThrowsError(try f.store.set(bytes("new"), bytes("v"))) { e in
            XCTAssertEqual((e as? StoreError)?.code, .diskFull, "\(e)")
            XCTAssertTrue("\(e)".contains("deletes"), "\(e)")
        }
        XCTAssertNil(try f.store.get(bytes("new")), "nothing of the refused write is visible")
        XCTAssertEqual(try f.store.remove(bytes("k0")), .removed)
        XCTAssertNoThrow(try f.store.remove(bytes("k1"), version: UInt64(f.clock.nowMicros()) + 1_000_000))
        XCTAssertNoThrow(try f.store.flush(namespace: bytes("other")))
        // An INVALIDATE rewrites a value the store holds (PROTOCOL.md §6), with and without a version.
        guard case .invalidated = try f.store.invalidate(bytes("k3")) else { return XCTFail("k3 not invalidated") }
        guard case .invalidated = try f.store.invalidate(bytes("k4"), version: UInt64(f.clock.nowMicros()) + 2_000_000) else {
            return XCTFail("k4 not invalidated")
        }
        XCTAssertEqual(try f.store.get(bytes("k3"))?.stale, true)
        XCTAssertNil(try f.store.get(bytes("k0")))
        XCTAssertEqual(try f.store.get(bytes("k2"))?.value, bytes("v2"), "reads go on")
        free.add(2 << 20)
        XCTAssertNoThrow(try f.store.set(bytes("new"), bytes("v")))
        try f.store.sync()
        XCTAssertEqual(try f.store.get(bytes("new"), tiers: .disk)?.value, bytes("v"))
    }

    /// A value is charged four times its size against the floor (its log record, then its WAL
    /// frames, its database pages and the pages an overwrite frees after it), and the backlog's
    /// frames and pages still to come count too (outside reviews dur6/dur8: writers of large
    /// values took a disk to 0 bytes free when only the record was charged).
    func testTheFloorChargesAValuesWholeFootprintAndTheBacklogs() throws {
        let free = Counter()
        free.add(20 << 20)
        let f = try StoreFixture { c in
            c.freeSpaceFloor = 2 << 20
            c.freeSpaceProbe = { free.load() }
            c.applierDelayForTests = 30 // what is answered stays in the backlog
        }
        // 20 MiB free, a 2 MiB floor: 4 × 2 MiB leaves 12 MiB.
        XCTAssertNoThrow(try f.store.set(bytes("two"), Self.noise(1, 2 << 20), options: SetOptions(tiers: .disk)))
        // 2 MiB written, not applied, owe 3 × 2 = 6 MiB: 4 × 1 MiB leaves 20 − 4 − 6 = 10 MiB.
        XCTAssertNoThrow(try f.store.set(bytes("one"), Self.noise(2, 1 << 20), options: SetOptions(tiers: .disk)))
        // 3 MiB owe 9 MiB: 4 × 0.5 MiB leaves 9 MiB.
        XCTAssertNoThrow(try f.store.set(bytes("half"), Self.noise(3, 1 << 19), options: SetOptions(tiers: .disk)))
        // 3.5 MiB owe 10.5 MiB: 4 × 2 MiB would leave 1.5 MiB, under the floor (without the
        // backlog's share it would leave 12 MiB).
        XCTAssertThrowsError(try f.store.set(bytes("more"), Self.noise(4, 2 << 20), options: SetOptions(tiers: .disk))) { e in
            XCTAssertEqual((e as? StoreError)?.code, .diskFull, "\(e)")
        }
        XCTAssertEqual(try f.store.remove(bytes("two")), .removed, "removals are taken below the floor")
    }

    /// Writers admitted together each count the others' charges until their records are in the
    /// log (dur7: a probe between two admissions forgot the first, and 64 writers went under
    /// half the floor).
    func testAdmittedChargesCountUntilTheirRecordsAreAppended() {
        let floor = SpaceFloor(floor: 2 << 20, probe: { 10 << 20 }) // every admission within 8 × the floor probes
        XCTAssertTrue(floor.admits(1 << 20))  // 10 − 4 = 6 MiB
        XCTAssertTrue(floor.admits(1 << 20))  // 10 − 4 − 4 = 2 MiB
        XCTAssertFalse(floor.admits(1 << 20), "10 − 4 − 4 − 4 < 0: under the floor")
        floor.appended(1 << 20)
        floor.appended(1 << 20)
        XCTAssertTrue(floor.admits(1 << 20), "appended: the log's backlog counts them from here")
    }

    func testTheFloorIsSizedToTheFilesystem() {
        XCTAssertEqual(SpaceFloor.defaultFloor(filesystemBytes: 16 << 20), 1 << 20)
        XCTAssertEqual(SpaceFloor.defaultFloor(filesystemBytes: 1 << 20), 256 << 10)
        XCTAssertEqual(SpaceFloor.defaultFloor(filesystemBytes: 1 << 40), 64 << 20)
        XCTAssertNotNil(SpaceFloor.filesystemBytes("/tmp/no/such/dir/yet"), "sized from the nearest existing parent")
        // A 16 MiB filesystem under the default 4 GiB limit: WAL and log sized for 16 MiB.
        let b = DiskBudget(StoreConfiguration(directory: "/unused"), filesystemBytes: 16 << 20)
        XCTAssertEqual(b.walLimit, 128 << 10)
        XCTAssertEqual(b.logLimit, 256 << 10)
        XCTAssertEqual(b.highWater, (4 << 30) - b.transientRoom, "eviction still follows the configured limit")
        XCTAssertEqual(b.maxStoredItem, ((16 << 20) - (256 << 10) - 4 * (128 << 10)) / 32, "the largest value fits the file system")
    }

    /// Large values are read a gate-full at a time: eight threads reading a 3 MiB value never
    /// hold more than `maxLargeReadBytes` of them at once, and every read is whole.
    func testLargeReadsAreBoundedInMemoryAndWhole() throws {
        let f = try StoreFixture { $0.maxLargeReadBytes = 8 << 20 }
        let big = Self.noise(3, 3 << 20)
        _ = try f.store.set(bytes("big"), big, options: SetOptions(tiers: .disk))
        _ = try f.store.set(bytes("small"), bytes("s"), options: SetOptions(tiers: .disk))
        try f.store.sync()
        let gate = f.store.disk.largeReads
        let maxHeld = Counter(), wrong = Counter(), left = Counter()
        let done = Completion<Void>()
        left.add(8)
        for _ in 0..<8 {
            startThread(name: "reader") { [store = f.store!] in
                for _ in 0..<5 {
                    if (try? store.get(bytes("big"), tiers: .disk))??.value != big { wrong.add() }
                    if (try? store.get(bytes("small"), tiers: .disk))??.value != bytes("s") { wrong.add() }
                }
                left.add(-1)
                if left.load() == 0 { done.fulfil(()) }
            }
        }
        var finished = false
        while !finished {
            let held = gate.inUse
            if held > maxHeld.load() { maxHeld.add(held - maxHeld.load()) }
            finished = left.load() == 0
        }
        done.wait()
        XCTAssertEqual(wrong.load(), 0)
        XCTAssertGreaterThan(maxHeld.load(), 0, "the gate was used")
        XCTAssertLessThanOrEqual(maxHeld.load(), 8 << 20)
        XCTAssertEqual(gate.inUse, 0)
    }

    /// A compressible value takes its turn at the large reads' bound by its decoded size: 3 MiB
    /// of zeros stored in a few KiB is told to `largeReadDone` (the node counts it as output
    /// before the next large read) and leaves the gate as it found it (an outside review, px4).
    func testACompressibleLargeValueIsALargeReadByItsDecodedSize() throws {
        let told = Counter(), calls = Counter()
        let f = try StoreFixture { $0.maxLargeReadBytes = 8 << 20; $0.largeReadDone = { told.add($0); calls.add() } }
        let zeros = [UInt8](repeating: 0, count: 3 << 20)
        _ = try f.store.set(bytes("zeros"), zeros, options: SetOptions(tiers: .disk))
        _ = try f.store.set(bytes("small"), bytes("s"), options: SetOptions(tiers: .disk))
        try f.store.sync()
        XCTAssertEqual(try f.store.get(bytes("small"), tiers: .disk)?.value, bytes("s"))
        XCTAssertEqual(calls.load(), 0, "a small value is no large read")
        XCTAssertEqual(try f.store.get(bytes("zeros"), tiers: .disk)?.value, zeros)
        XCTAssertEqual(calls.load(), 1)
        XCTAssertEqual(told.load(), 3 << 20)
        XCTAssertEqual(f.store.disk.largeReads.inUse, 0)
    }

    /// A large value still in the durability log (written, not yet applied) is answered from
    /// the log's index — and, like one read from SQLite, takes its turn at the large reads'
    /// bound and is told to `largeReadDone` (the node's output bound), and an event loop hands
    /// it to a worker. Before, 24 connections' GETs of a 32 MiB value not yet applied were all
    /// answered at once, past `--max-output-bytes` (444 MiB against 256, a CI run).
    func testALargeValueStillInTheLogIsALargeReadToo() throws {
        let told = Counter(), calls = Counter(), asked = Counter()
        let f = try StoreFixture {
            $0.applyDelay = 60; $0.logLimit = 256 << 20; $0.maxLargeReadBytes = 8 << 20
            $0.largeReadDone = { told.add($0); calls.add() }
            $0.largeReadsMayStart = { _, _ in asked.add(); return true }
        }
        let big = Self.noise(1, 3 << 20)
        _ = try f.store.set(bytes("big"), big, options: SetOptions(tiers: .disk))
        _ = try f.store.set(bytes("small"), bytes("s"), options: SetOptions(tiers: .disk))
        XCTAssertEqual(f.store.stats().logBacklogRecords, 2, "both still in the log")
        XCTAssertEqual(try f.store.get(bytes("small"), tiers: .disk)?.value, bytes("s"))
        XCTAssertEqual(calls.load(), 0, "a small value is no large read")
        // On an event loop the read bails (and runs again on a worker).
        InlineDiskRead.begin()
        XCTAssertThrowsError(try f.store.get(bytes("big"), tiers: .disk))
        XCTAssertTrue(InlineDiskRead.end(), "the loop's read bailed")
        XCTAssertEqual(calls.load(), 0)
        XCTAssertEqual(try f.store.get(bytes("big"), tiers: .disk)?.value, big)
        XCTAssertEqual(f.store.stats().logBacklogRecords, 2, "answered from the log")
        XCTAssertEqual(calls.load(), 1)
        XCTAssertEqual(told.load(), 3 << 20)
        XCTAssertGreaterThan(asked.load(), 0, "the output bound was asked")
        XCTAssertEqual(f.store.disk.largeReads.inUse, 0)
        // Once applied, the same read from SQLite is told the same size.
        try f.store.sync()
        XCTAssertEqual(try f.store.get(bytes("big"), tiers: .disk)?.value, big)
        XCTAssertEqual(calls.load(), 2)
        XCTAssertEqual(told.load(), 2 * (3 << 20))
    }

    /// `logHasRoom` says when a write would wait for the applier (the node then hands sets to
    /// a worker instead of blocking its event loop).
    func testLogHasRoomTurnsFalseAtTheLimitAndBackWhenApplied() throws {
        let f = try StoreFixture { $0.logLimit = 64 << 10; $0.applierDelayForTests = 0.3 }
        XCTAssertTrue(f.store.logHasRoom(for: 4096))
        var i = 0
        while f.store.logHasRoom(for: 4096) && i < 1000 {
            _ = try f.store.set(bytes("k\(i)"), Self.noise(i, 4096), options: SetOptions(tiers: .disk))
            i += 1
        }
        XCTAssertFalse(f.store.logHasRoom(for: 4096), "\(i) writes of 4 KiB did not fill a 64 KiB backlog")
        XCTAssertLessThanOrEqual(i, 16, "a 4 KiB value (1/16 of the backlog) is promised its room: the backlog never passes 64 KiB")
        XCTAssertTrue(eventually(10) { f.store.logHasRoom(for: 4096) }, "the applier made room again")
    }
}
