import Foundation
import XCTest
import Synchronization
import StrataCore
@testable import StrataStore

final class IntegrityTests: XCTestCase {
    /// A full disk shows up as SQLITE_FULL, or as an I/O error whose OS error is ENOSPC
    /// (growing the -shm or WAL file): both are "full", other I/O errors are not.
    func testAnIOErrorFromAFullDiskCountsAsFull() {
        let ioerrShmSize: Int32 = 10 | (19 << 8) // SQLITE_IOERR_SHMSIZE
        XCTAssertTrue(SQLiteError(code: 13, message: "database or disk is full").isFull)
        XCTAssertTrue(SQLiteError(code: ioerrShmSize, message: "disk I/O error", systemErrno: ENOSPC).isFull)
        XCTAssertTrue(SQLiteError(code: 10 | (3 << 8), message: "disk I/O error", systemErrno: EDQUOT).isFull)
        XCTAssertFalse(SQLiteError(code: ioerrShmSize, message: "disk I/O error", systemErrno: EIO).isFull)
        XCTAssertFalse(SQLiteError(code: 11, message: "malformed", systemErrno: ENOSPC).isFull)
    }

    func testCorruptedValueIsDetectedByChecksumReadAsMissAndRemoved() throws {
        let f = try StoreFixture()
        _ = try f.store.set(bytes("good"), bytes("fine value"), options: SetOptions(tiers: .disk))
        _ = try f.store.set(bytes("bad"), bytes("this value will be damaged"), options: SetOptions(tiers: .disk))
        try f.store.sync() // SQLite is filled behind the log
        let db = try openDatabase(f.dir)
        let s = try db.statement("UPDATE items SET value=? WHERE key=?")
        s.bind(1, bytes("this value wall be damaged"))
        s.bind(2, bytes("bad"))
        try s.run()
        XCTAssertNil(try f.store.get(bytes("bad")))
        XCTAssertEqual(f.store.stats().corruptItems, 1)
        XCTAssertEqual(try f.store.get(bytes("good"))?.value, bytes("fine value"))
        try f.store.sync()
        XCTAssertTrue(try eventually { try db.scalarInt("SELECT count(*) FROM items WHERE key=x'626164'") == 0 })
        XCTAssertTrue(f.log.all.contains { $0.contains("corrupt_item") })
    }

    /// A damaged size column (negative) fails the checksum like any other damage; it used to
    /// trap converting the size (found by the flipped-bytes battery).
    func testANegativeSizeInARowIsDamageNotACrash() throws {
        let f = try StoreFixture()
        _ = try f.store.set(bytes("k"), bytes("v"), options: SetOptions(tiers: .disk))
        try f.store.sync() // SQLite is filled behind the log
        let db = try openDatabase(f.dir)
        try db.execute("UPDATE items SET size=-5")
        XCTAssertNil(try f.store.get(bytes("k"), tiers: .disk))
        XCTAssertEqual(f.store.stats().corruptItems, 1)
    }

    func testDamagedMetadataIsCaughtByChecksumToo() throws {
        let f = try StoreFixture()
        _ = try f.store.set(bytes("k"), bytes("v"), options: SetOptions(flags: 1, tiers: .disk))
        try f.store.sync() // SQLite is filled behind the log
        let db = try openDatabase(f.dir)
        try db.execute("UPDATE items SET flags=2")
        XCTAssertNil(try f.store.get(bytes("k")))
    }

    func testCorruptCompressedValueNeverDecodesPastItsRecordedSize() throws {
        let f = try StoreFixture()
        let text = bytes(String(repeating: "abcdefgh", count: 500))
        _ = try f.store.set(bytes("z"), text, options: SetOptions(tiers: .disk))
        try f.store.sync() // SQLite is filled behind the log
        let db = try openDatabase(f.dir)
        // Claim a smaller size and fix up nothing else: checksum and size bound both refuse it.
        try db.execute("UPDATE items SET size=10")
        XCTAssertNil(try f.store.get(bytes("z")))
        XCTAssertEqual(f.store.stats().corruptItems, 1)
    }

    func testCorruptDatabaseFileIsQuarantinedAndReplacedOnOpen() throws {
        let dir = TempDir()
        let path = dir.path + "/" + DiskTier.fileName
        _ = FileManager.default.createFile(atPath: path, contents: Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 31) }))
        var config = StoreConfiguration(directory: dir.path)
        let log = LogSink()
        config.log = { log.append($0) }
        let store = try TieredCache(configuration: config)
        defer { store.close() }
        XCTAssertEqual(store.stats().quarantines, 1)
        let moved = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasPrefix("strata.db.corrupt-") }
        XCTAssertEqual(moved.count, 1)
        XCTAssertTrue(log.all.contains { $0.contains("disk_quarantined") })
        _ = try store.set(bytes("k"), bytes("v"))
        XCTAssertEqual(try store.get(bytes("k"), tiers: .disk)?.value, bytes("v"))
    }

    func testQuickCheckFailureInBackgroundQuarantinesWhileRunning() throws {
        let f = try StoreFixture { $0.quickCheckOnOpen = false }
        for i in 0..<3000 { _ = try f.store.set(bytes("key\(i)"), [UInt8](repeating: UInt8(i & 0xFF), count: 200) + bytes("\(i)"), options: SetOptions(tiers: .disk)) }
        f.store.close()
        // Damage pages in the middle of the file (not the header) so open succeeds.
        let path = f.dir.path + "/" + DiskTier.fileName
        let fh = try XCTUnwrap(FileHandle(forUpdatingAtPath: path))
        let size = try fh.seekToEnd()
        for offset in stride(from: UInt64(8192), to: size - 4096, by: 8192) {
            try fh.seek(toOffset: offset)
            fh.write(Data(repeating: 0xA5, count: 4096))
        }
        try fh.close()
        try f.reopen { $0.quickCheckOnOpen = true }
        XCTAssertTrue(eventually(10) { f.store.stats().quarantines >= 1 })
        XCTAssertTrue(f.log.all.contains { $0.contains("disk_quarantined") })
        XCTAssertTrue(eventually { (try? f.store.set(bytes("after"), bytes("v"), options: SetOptions(tiers: .disk)))?.isStored == true })
        XCTAssertEqual(try f.store.get(bytes("after"), tiers: .disk)?.value, bytes("v"))
    }

    /// Two reports of one damage (a failed quick_check and a read that hit the same pages)
    /// move the file aside once: the second names the file it saw, which is gone. An outside
    /// review saw the fresh database quarantined too, 7 ms after the damaged one.
    func testTwoReportsOfOneDamageQuarantineOnce() throws {
        let f = try StoreFixture { $0.quickCheckOnOpen = false }
        _ = try f.store.set(bytes("before"), bytes("v"), options: SetOptions(tiers: .disk))
        try f.store.sync()
        let disk = f.store.disk
        let epoch = disk.readerLock.withLock { disk.readerEpoch }
        for reason in ["quick_check: damage", "SQLite reported corruption while reading: damage"] {
            let done = Completion<Void>()
            disk.enqueue(DiskJob(.quarantine(reason: reason, epoch: epoch), inline: true) { _ in done.fulfil(()) })
            done.wait()
        }
        XCTAssertEqual(f.store.stats().quarantines, 1)
        let moved = try FileManager.default.contentsOfDirectory(atPath: f.dir.path)
            .filter { $0.hasPrefix("strata.db.corrupt-") && !$0.hasSuffix("-wal") && !$0.hasSuffix("-shm") }
        XCTAssertEqual(moved.count, 1, "\(moved)")
        _ = try f.store.set(bytes("after"), bytes("v"), options: SetOptions(tiers: .disk))
        try f.store.sync()
        XCTAssertEqual(try f.store.get(bytes("after"), tiers: .disk)?.value, bytes("v"), "the fresh database stays in use")
    }

    /// A database moved aside while the store runs is refilled from what the log's segments
    /// still hold, applied or not (outside review op4: 200 items the log held were lost when
    /// quick_check moved a damaged file aside; only unapplied records filled the fresh one).
    /// A flush in the log is replayed into the fresh file in order, and leaves memory alone.
    /// A database file cut short (its header counts more pages than it holds) is moved aside
    /// when the store opens — before anything is read from it — not found later by the
    /// start-up quick_check while reads miss or fail on it (an outside review, dur13: 10–33 ms of
    /// misses for every acknowledged item, once a `disk I/O error`). Records still in the log
    /// refill the fresh file.
    func testADatabaseFileCutShortIsMovedAsideAtOpen() throws {
        let f = try StoreFixture { $0.quickCheckOnOpen = false }
        for i in 0..<400 { _ = try f.store.set(bytes("k\(i)"), [UInt8](repeating: UInt8(i & 0xFF), count: 2000), options: SetOptions(tiers: .disk)) }
        try f.store.sync()
        f.store.close()
        let path = f.dir.path + "/" + DiskTier.fileName
        let size = try XCTUnwrap(FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
        XCTAssertGreaterThan(size, 16_384)
        XCTAssertNil(DiskTier.cutShort(path), "a whole file is not cut short")
        XCTAssertEqual(truncate(path, off_t(size / 2)), 0)
        XCTAssertNotNil(DiskTier.cutShort(path))
        try f.reopen()
        XCTAssertEqual(f.store.stats().quarantines, 1)
        XCTAssertTrue(f.log.all.contains { $0.contains("event=disk_quarantined") && $0.contains("cut short") }, "\(f.log.all)")
        for i in [0, 199, 399] { XCTAssertNoThrow(try f.store.get(bytes("k\(i)"), tiers: .disk)) }
        _ = try f.store.set(bytes("new"), bytes("v"), options: SetOptions(tiers: .disk))
        XCTAssertEqual(try f.store.get(bytes("new"), tiers: .disk)?.value, bytes("v"))
    }

    func testAFileMovedAsideWhileRunningIsRefilledFromTheLog() throws {
        let f = try StoreFixture { $0.quickCheckOnOpen = false }
        for i in 0..<200 { _ = try f.store.set(bytes("k\(i)"), bytes("v\(i)"), options: SetOptions(tiers: .disk)) }
        _ = try f.store.set(bytes("gone"), bytes("x"), namespace: bytes("ns"), options: SetOptions(tiers: .disk))
        try f.store.flush(namespace: bytes("ns"))
        _ = try f.store.set(bytes("after-flush"), bytes("y"), namespace: bytes("ns"))
        _ = try f.store.remove(bytes("k7"))
        try f.store.sync() // all applied to the file about to be moved aside
        let disk = f.store.disk
        let epoch = disk.readerLock.withLock { disk.readerEpoch }
        let done = Completion<Void>()
        disk.enqueue(DiskJob(.quarantine(reason: "quick_check: damage", epoch: epoch), inline: true) { _ in done.fulfil(()) })
        done.wait()
        XCTAssertEqual(f.store.stats().quarantines, 1)
        XCTAssertTrue(f.log.all.contains { $0.contains("event=disk_refilled_from_log") && $0.contains("level=warn") }, "\(f.log.all)")
        for i in [0, 1, 100, 199] { XCTAssertEqual(try f.store.get(bytes("k\(i)"), tiers: .disk)?.value, bytes("v\(i)"), "k\(i)") }
        XCTAssertNil(try f.store.get(bytes("k7"), tiers: .disk), "the delete replayed too")
        XCTAssertNil(try f.store.get(bytes("gone"), namespace: bytes("ns"), tiers: .disk), "the flush replayed in order")
        XCTAssertEqual(try f.store.get(bytes("after-flush"), namespace: bytes("ns"))?.value, bytes("y"))
        XCTAssertEqual(try f.store.get(bytes("after-flush"), namespace: bytes("ns"), tiers: .memory)?.value, bytes("y"),
                       "the replayed flush did not touch memory")
        // The refilled file says how far it holds the log: a reopen replays nothing twice.
        try f.reopen()
        XCTAssertEqual(try f.store.get(bytes("k199"), tiers: .disk)?.value, bytes("v199"))
        XCTAssertNil(try f.store.get(bytes("gone"), namespace: bytes("ns")))
        XCTAssertFalse(f.log.all.contains { $0.contains("event=log_replayed") }, "\(f.log.all)")
    }

    func testNewerSchemaIsRefusedWithAClearError() throws {
        let dir = TempDir()
        do {
            let db = try SQLiteConnection(path: dir.path + "/" + DiskTier.fileName)
            try db.execute("PRAGMA user_version=99")
        }
        XCTAssertThrowsError(try TieredCache(configuration: StoreConfiguration(directory: dir.path))) { e in
            let se = e as? StoreError
            XCTAssertEqual(se?.code, .schemaTooNew)
            XCTAssertTrue(se?.message.contains("99") == true)
        }
    }

    func testOpenRecordsSchemaVersion() throws {
        let f = try StoreFixture()
        try f.store.sync() // SQLite is filled behind the log
        let db = try openDatabase(f.dir)
        XCTAssertEqual(try db.scalarInt("PRAGMA user_version"), DiskTier.schemaVersion)
        XCTAssertEqual(try db.textRows("PRAGMA journal_mode"), ["wal"])
    }

    /// New files keep `value` as the items table's last column (the other columns sit before
    /// it, in the row's first page); a file made with the earlier order (value fifth) keeps
    /// working: every statement names its columns.
    func testBothColumnOrdersOfTheItemsTableWork() throws {
        let f = try StoreFixture()
        _ = try f.store.set(bytes("a"), [UInt8](repeating: 7, count: 20_000), options: SetOptions(tiers: .disk))
        _ = try f.store.set(bytes("gone"), bytes("x"), options: SetOptions(tiers: .disk))
        try f.store.sync()
        do {
            let db = try openDatabase(f.dir)
            XCTAssertEqual(try db.textRows("SELECT name FROM pragma_table_info('items') ORDER BY cid DESC LIMIT 1"), ["value"])
        }
        f.store.close()
        f.store = nil
        do {
            // The earlier order, as files made before it changed have it.
            let db = try openDatabase(f.dir)
            try db.execute("""
                BEGIN;
                ALTER TABLE items RENAME TO items_new;
                DROP INDEX items_key;
                CREATE TABLE items(
                    id INTEGER PRIMARY KEY,
                    ns INTEGER NOT NULL, key BLOB NOT NULL, gen INTEGER NOT NULL,
                    value BLOB NOT NULL, codec INTEGER NOT NULL, size INTEGER NOT NULL,
                    flags INTEGER NOT NULL, ext BLOB NOT NULL, expiry INTEGER NOT NULL,
                    version INTEGER NOT NULL, tombstone INTEGER NOT NULL, checksum INTEGER NOT NULL,
                    access INTEGER NOT NULL);
                INSERT INTO items(id, ns, key, gen, value, codec, size, flags, ext, expiry, version, tombstone, checksum, access)
                  SELECT id, ns, key, gen, value, codec, size, flags, ext, expiry, version, tombstone, checksum, access FROM items_new;
                DROP TABLE items_new;
                CREATE UNIQUE INDEX items_key ON items(ns, key);
                COMMIT;
                """)
            XCTAssertEqual(try db.textRows("SELECT name FROM pragma_table_info('items') WHERE cid = 4"), ["value"])
        }
        f.store = try TieredCache(configuration: f.config, clock: f.clock)
        XCTAssertEqual(try f.store.get(bytes("a"), tiers: .disk)?.value, [UInt8](repeating: 7, count: 20_000))
        XCTAssertEqual(try f.store.syncVersion(bytes("a"), namespace: []) > 0, true)
        _ = try f.store.set(bytes("b"), bytes("new"), options: SetOptions(tiers: .disk))
        _ = try f.store.remove(bytes("gone"), tiers: .disk)
        try f.store.sync()
        XCTAssertEqual(try f.store.get(bytes("b"), tiers: .disk)?.value, bytes("new"))
        XCTAssertNil(try f.store.get(bytes("gone"), tiers: .disk))
        var listed: [String] = []
        try f.store.forEachSyncEntry(include: { _, _ in true }) { listed.append(String(decoding: $0.key, as: UTF8.self)) }
        XCTAssertEqual(listed.sorted(), ["a", "b"])
        f.store.close()
        f.store = nil
        let report = try TieredCache.check(directory: f.dir.path)
        XCTAssertTrue(report.isClean, "\(report)")
        XCTAssertEqual(report.liveItems, 2)
    }

    func testReadsNeverWrite() throws {
        let f = try StoreFixture { $0.maintenanceInterval = 3600 } // no background flush of access times
        _ = try f.store.set(bytes("k"), bytes("v"), options: SetOptions(tiers: .disk))
        try f.store.sync()
        let before = f.store.stats().commits
        for _ in 0..<100 { _ = try f.store.get(bytes("k"), tiers: .disk) }
        XCTAssertEqual(f.store.stats().commits, before)
    }
}

final class ConcurrencyTests: XCTestCase {
    func testManyThreadsMixingOperationsLeaveConsistentState() throws {
        let f = try StoreFixture { $0.memoryCountLimit = 2000; $0.memoryShards = 4 }
        let store = f.store!
        let threads = 8
        let opsPerThread = 1500
        let group = DispatchGroup()
        let failures = Counter()
        for t in 0..<threads {
            group.enter()
            DispatchQueue.global().async {
                var rng = SplitMix(seed: UInt64(t + 1))
                for _ in 0..<opsPerThread {
                    let k = bytes("k\(rng.next() % 300)")
                    let ns = rng.next() % 5 == 0 ? bytes("other") : []
                    do {
                        switch rng.next() % 8 {
                        case 0, 1: _ = try store.set(k, bytes("v\(rng.next() % 1000)"), namespace: ns)
                        case 2: _ = try store.set(k, bytes("m"), namespace: ns, options: SetOptions(tiers: .memory))
                        case 3: _ = try store.remove(k, namespace: ns)
                        case 4: _ = try store.increment(bytes("counter"), initial: 0)
                        case 5: _ = try store.set(k, bytes("d"), namespace: ns, options: SetOptions(tiers: .disk))
                        default: _ = try store.get(k, namespace: ns)
                        }
                    } catch { failures.add() }
                }
                group.leave()
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(failures.load(), 0)
        #if DEBUG
        for s in store.memory.shards { XCTAssertNil(s.lock.withLock { s.checkInvariants() }) }
        #endif
        // Every increment was applied exactly once.
        let counterValue = try XCTUnwrap(store.get(bytes("counter"))?.value)
        let increments = Int(String(decoding: counterValue, as: UTF8.self))!
        XCTAssertGreaterThan(increments, 0)
        // Memory never disagrees with disk on an item present in both: same version, same bytes.
        for i in 0..<300 {
            for ns in [[], bytes("other")] {
                let k = bytes("k\(i)")
                guard let m = try store.get(k, namespace: ns, tiers: .memory),
                      let d = try store.get(k, namespace: ns, tiers: .disk) else { continue }
                if m.version == d.version { XCTAssertEqual(m.value, d.value) }
                XCTAssertGreaterThanOrEqual(m.version, d.version, "memory holds an older copy than disk for k\(i)")
            }
        }
        let s = store.stats()
        XCTAssertLessThanOrEqual(s.memory.items, 2000)
        XCTAssertEqual(s.diskWriteErrors, 0)
    }

    /// A read that finds the disk copy and promotes it into memory must never leave an older
    /// value (or a deleted one) in memory after a newer disk-only write or a delete: each of 4
    /// writers writes its own key over and over — disk-only sets and deletes, so every read
    /// that wants it goes to the disk and promotes — while 4 readers hammer the same keys; after
    /// every write, the writer reads its key 3 times and must see exactly what it wrote.
    func testAPromotingReadNeverOutlivesANewerDiskOnlyWriteOrDelete() throws {
        let f = try StoreFixture { $0.memoryShards = 2 }
        let store = f.store!
        let keys = (0..<4).map { bytes("race-\($0)") }
        let stop = Atomic<Bool>(false)
        let stale = Counter(), failures = Counter()
        let group = DispatchGroup()
        for r in 0..<4 {
            group.enter()
            DispatchQueue.global().async {
                var i = r
                while !stop.load(ordering: .relaxed) {
                    do { _ = try store.get(keys[i % keys.count]) } catch { failures.add() }
                    i += 1
                }
                group.leave()
            }
        }
        DispatchQueue.concurrentPerform(iterations: keys.count) { w in
            let k = keys[w]
            let deadline = monotonicSeconds() + 20
            for n in 0..<1_500 where monotonicSeconds() < deadline {
                do {
                    let want: [UInt8]?
                    if n % 3 == 2 {
                        _ = try store.remove(k)
                        want = nil
                    } else {
                        want = bytes("w\(w)-\(n)")
                        // Disk-only, so a memory copy (promoted by a reader) must go.
                        _ = try store.set(k, want!, options: SetOptions(tiers: .disk))
                    }
                    for _ in 0..<3 where try store.get(k)?.value != want { stale.add() }
                } catch { failures.add() }
            }
        }
        stop.store(true, ordering: .relaxed)
        XCTAssertEqual(group.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(failures.load(), 0)
        XCTAssertEqual(stale.load(), 0, "reads after a write returned an older value or a deleted one")
        XCTAssertGreaterThan(store.stats().memory.hits, 0, "readers promoted copies into memory")
    }

    func testConcurrentIncrementsAreNeverLost() throws {
        let f = try StoreFixture()
        let store = f.store!
        _ = try store.set(bytes("n"), bytes("0"))
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<200 { _ = try? store.increment(bytes("n")) }
        }
        XCTAssertEqual(try store.get(bytes("n"))?.value, bytes("1600"))
        XCTAssertEqual(try store.get(bytes("n"), tiers: .disk)?.value, bytes("1600"))
    }
}
