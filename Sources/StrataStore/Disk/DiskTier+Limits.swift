#if canImport(Glibc)
import Glibc
#endif
import CLinux
import StrataCore
import Synchronization

// The disk tier's limits (count, bytes on disk, free-space floor) and eviction.
extension DiskTier {
    // MARK: Limits

    func freeSpace() -> Int {
        if let probe = config.freeSpaceProbe { return probe() }
        var st = statvfs()
        guard statvfs(directory, &st) == 0 else { return Int.max }
        return Int(st.f_bavail) * Int(st.f_frsize)
    }

    func walBytes() -> Int {
        var st = stat()
        return stat(dbPath + "-wal", &st) == 0 ? Int(st.st_size) : 0
    }

    /// Bytes on disk: every page of the database file (free pages included) plus the WAL
    /// and the durability log's segments. A file that cannot return free pages (made without
    /// auto-vacuum) counts pages in use, or evicting could never bring it under the limit.
    func bytesOnDisk(_ db: SQLiteConnection) throws -> Int {
        var pages = Int(try db.scalarInt("PRAGMA page_count") ?? 0)
        if !incrementalVacuum { pages -= Int(try db.scalarInt("PRAGMA freelist_count") ?? 0) }
        return pages * pageSize + walBytes() + (logBytes?() ?? 0)
    }

    /// What the byte limit is held against: the database's pages that hold data, plus what
    /// the WAL and the log's segments hold beyond the room `DiskBudget.transientRoom` keeps for
    /// them — at most `budget.transientExcessCap` of that: evicting rows cannot shrink it (a
    /// checkpoint and the applier do), and counted whole it emptied the store at the first
    /// write after a restart that lowered the limit, while the old run's log segments and WAL,
    /// sized for the old limit, were still on disk. Free pages do not count: eviction runs
    /// before a batch's rows are written, so the rows reuse the pages it frees and the file
    /// does not grow past the size this reached.
    func bytesInUse(_ db: SQLiteConnection) throws -> Int {
        let excess = max(0, walBytes() + (logBytes?() ?? 0) - budget.transientRoom)
        return try dataBytes(db) + min(excess, budget.transientExcessCap)
    }

    /// The database's pages that hold data (free pages left out), in bytes.
    func dataBytes(_ db: SQLiteConnection) throws -> Int {
        (Int(try db.scalarInt("PRAGMA page_count") ?? 0) - Int(try db.scalarInt("PRAGMA freelist_count") ?? 0)) * pageSize
    }

    /// Before a batch writes its rows: evicts (down to `budget.lowWater`) when the rows to
    /// come — at most `pending` bytes — would take the bytes in use past `budget.highWater`, so
    /// the new rows fill the pages the old ones leave instead of growing the file.
    func makeRoom(_ db: SQLiteConnection, _ staged: inout Staged, for pending: Int) throws {
        try trimBytes(db, &staged, estimatedGrowth: pending, pending: pending)
    }

    /// The byte limit: measuring bytes in use costs two PRAGMAs and a stat, so only when the
    /// estimate (last measurement + `estimatedGrowth`, an upper bound of the page writes since)
    /// could pass `budget.highWater`; then evicts to `budget.lowWater` if the measurement plus
    /// `pending` (rows still to be written) does.
    private func trimBytes(_ db: SQLiteConnection, _ staged: inout Staged, estimatedGrowth: Int, pending: Int) throws {
        guard budget.isLimited && bytesEstimate + estimatedGrowth > budget.highWater else { return }
        if try bytesInUse(db) + pending > budget.highWater {
            try evict(db, &staged, untilCount: Int.max, bytes: budget.lowWater, pendingBytes: pending)
        }
        bytesEstimate = try bytesInUse(db)
    }

    /// Inside a transaction, after its rows were written and before its commit: evicts what
    /// the limits require. The count limit is exact; the byte limit trims from
    /// `budget.highWater` down to `budget.lowWater` in one go (see `DiskBudget`; `makeRoom`
    /// ran before the rows); the free-space floor gives back about 1 % of the rows.
    func enforceLimits(_ db: SQLiteConnection, _ staged: inout Staged) throws {
        if rowCount + staged.rowDelta > config.diskCountLimit {
            try evict(db, &staged, untilCount: config.diskCountLimit, bytes: Int.max)
        }
        try trimBytes(db, &staged, estimatedGrowth: staged.bytesBound(pageSize: pageSize), pending: 0)
        if config.freeDiskSpaceLimit > 0 && freeSpace() < config.freeDiskSpaceLimit {
            // Give back about 1 % of the rows; the space returns once the free pages are vacuumed.
            let target = max(0, rowCount + staged.rowDelta - max(16, (rowCount + staged.rowDelta) / 100))
            try evict(db, &staged, untilCount: target, bytes: Int.max)
        }
    }

    /// Deletes rows in `config.diskEviction` order until at most `untilCount` remain and the
    /// bytes on disk (plus `pendingBytes`, what this transaction will still add) are at most
    /// `bytes`. Free pages count as room (new rows reuse them); moving pages to give them back
    /// to the file system (incremental vacuum) would write each moved page to the WAL, so that
    /// is left to maintenance (see `vacuumIfWorthIt`). With `dataOnly` the bytes are the data
    /// pages alone (`trimIfOver`).
    func evict(_ db: SQLiteConnection, _ staged: inout Staged, untilCount: Int, bytes: Int, pendingBytes: Int = 0,
               dataOnly: Bool = false) throws {
        while rowCount + staged.rowDelta > 0 {
            let rows = rowCount + staged.rowDelta
            var n = max(0, rows - untilCount)
            if n == 0 && bytes < Int.max {
                let used = (dataOnly ? try dataBytes(db) : try bytesInUse(db)) + pendingBytes
                guard used > bytes else { break }
                // Enough rows, at the file's average size, to cover the excess (at least 16 of
                // small rows; with large ones — 500 KB under a 16 MiB limit — 16 rows were half
                // the store, so no more than the excess needs).
                let pages = try dataBytes(db)
                let perRow = max(64, pages / max(1, rows))
                n = max(max(1, min(16, (64 << 10) / perRow)), (used - bytes + perRow - 1) / perRow)
            } else if n == 0 { break }
            // The byte limit spares this batch's rows (a value is never evicted to make room
            // for itself: a large one may hold the directory over the limit until it settles);
            // the count limit is exact and does not.
            let removed = try deleteVictims(db, min(n, rows), rows: rows, sparing: bytes < Int.max ? staged.minVersion : .max)
            if removed == 0 { break }
            staged.rowDelta -= removed
            staged.evicted += removed
        }
    }

    /// Deletes `n` rows in eviction order, none of version `sparing` or newer (the batch being
    /// written); returns how many went.
    func deleteVictims(_ db: SQLiteConnection, _ n: Int, rows: Int, sparing: UInt64 = .max) throws -> Int {
        guard n > 0 else { return 0 }
        let spare = Int64(bitPattern: min(sparing, UInt64(Int64.max)))
        if config.diskEviction == .oldest {
            // Row ids grow with every write (an overwrite is a delete and an insert), so the
            // smallest are the oldest writes: exact, through the table's own order. Tombstones
            // kept for replicas go last (see `deleteLeastRecentlyUsed`).
            var removed = 0
            // Spared only while they are at most half of the oldest rows (see `sparesTombstones`).
            var spareTombstones = sparesTombstones
            if spareTombstones {
                let share = try db.scalarInt("SELECT count(*) FROM (SELECT tombstone FROM items ORDER BY id LIMIT 512) WHERE tombstone & 1 = 1") ?? 0
                let of = try db.scalarInt("SELECT count(*) FROM (SELECT id FROM items ORDER BY id LIMIT 512)") ?? 0
                spareTombstones = share * 2 <= of
            }
            for tombstones in spareTombstones ? [false, true] : [true] where removed < n {
                let s = try db.prepared(tombstones
                    ? "DELETE FROM items WHERE id IN (SELECT id FROM items WHERE version < ? ORDER BY id LIMIT ?) RETURNING ns, key, version, tombstone"
                    : "DELETE FROM items WHERE id IN (SELECT id FROM items WHERE version < ? AND tombstone & 1 = 0 ORDER BY id LIMIT ?) RETURNING ns, key, version, tombstone")
                s.bind(1, spare)
                s.bind(2, n - removed)
                defer { s.reset() }
                while try s.step() {
                    removed += 1
                    rememberEviction(nsID: s.int(0), key: s.bytes(1), version: s.int(2), marks: s.int(3))
                }
            }
            return removed
        }
        return try deleteLeastRecentlyUsed(db, n, rows: rows, sparing: spare)
    }

    /// Whether eviction takes live items before tombstones: on a store whose tombstones tell
    /// replicas what was deleted or expired (`expiredItemsLeaveTombstones`, a `--cluster` node),
    /// evicting one let a replica that missed the delete copy the deleted value back (an outside
    /// review, cl20: 8 of 8 keys in every run that evicted). Tombstones are small and live
    /// `tombstoneTTL`; they are evicted after the live items — but only while they are at most
    /// half of the rows looked at: past that (a burst of deletes against a count limit) they go
    /// in the ordinary order, or the disk would hold no live item at all (the next outside
    /// review, cl21: after 60 deletes under a limit of 40, 0 of 30 new writes were kept).
    var sparesTombstones: Bool { config.expiredItemsLeaveTombstones }

    /// Tables up to this many rows are read whole when evicting: exact LRU order.
    static let exactEvictionRows = 2048

    /// Deletes about `n` of the least recently used rows; returns how many went. There is no
    /// index on `access` (every write and every buffered read would update it: measured, 16 %
    /// of a node's CPU on 1 KiB durable sets), so the candidates are a random sample — 8 rows
    /// per row to evict, at least 256, read in runs of 16 from random rowids — and the oldest go
    /// (Redis's approximated LRU). A table of at most `exactEvictionRows` rows is read whole,
    /// so a small store evicts in exact LRU order. Writer thread.
    func deleteLeastRecentlyUsed(_ db: SQLiteConnection, _ n: Int, rows: Int, sparing: Int64 = .max) throws -> Int {
        guard n > 0 else { return 0 }
        var candidates: [Int64: Int64] = [:] // id → access
        var tombstones: [Int64: Int64] = [:] // the same, of tombstones when they go last
        let spareTombstones = sparesTombstones
        let nowSeconds = clock.nowMicros() / 1_000_000
        func consider(_ s: SQLiteStatement) {
            guard s.int(2) < sparing else { return }
            // A read the memory tier served never reaches the row's access time: the item is
            // as recent as its last use there (an outside review, sec6: a tenant's items read
            // every minute from memory were the first to leave the disk, 0 of 400 kept).
            var access = s.int(1)
            if let idle = memoryIdleSeconds, let name = registry.name(ofDiskID: s.int(4)), let seconds = idle(name, s.bytes(5)) {
                access = max(access, nowSeconds - seconds)
            }
            if spareTombstones && s.int(3) & 1 != 0 { tombstones[s.int(0)] = access } else { candidates[s.int(0)] = access }
        }
        if rows <= Self.exactEvictionRows {
            let all = try db.prepared("SELECT id, access, version, tombstone, ns, key FROM items")
            defer { all.reset() }
            while try all.step() { consider(all) }
        } else {
            let maxID = try db.scalarInt("SELECT max(id) FROM items") ?? 0
            guard maxID > 0 else { return 0 }
            let want = min(max(256, 8 * n), 1 << 20)
            let run = try db.prepared("SELECT id, access, version, tombstone, ns, key FROM items WHERE id >= ? ORDER BY id LIMIT 16")
            var reads = 0
            while candidates.count < want && reads < want / 4 + 64 {
                run.bind(1, Int64(evictionSampler.next() % UInt64(maxID)) + 1)
                while try run.step() { consider(run) }
                run.reset()
                reads += 1
            }
        }
        func order(_ d: [Int64: Int64]) -> [(key: Int64, value: Int64)] {
            d.sorted { $0.value < $1.value || ($0.value == $1.value && $0.key < $1.key) }
        }
        if tombstones.count > candidates.count { // more than half tombstones: no sparing
            candidates.merge(tombstones) { a, _ in a }
            tombstones = [:]
        }
        var doomed = Array(order(candidates).prefix(n))
        if doomed.count < n { doomed += order(tombstones).prefix(n - doomed.count) }
        let delete = try db.prepared("DELETE FROM items WHERE id=? RETURNING ns, key, version, tombstone")
        var removed = 0
        for (id, _) in doomed {
            delete.bind(1, id)
            defer { delete.reset() }
            while try delete.step() {
                removed += 1
                rememberEviction(nsID: delete.int(0), key: delete.bytes(1), version: delete.int(2), marks: delete.int(3))
            }
        }
        return removed
    }

    /// Remembers a row a limit removed (`EvictedVersions`, on a cluster node's store). Writer thread.
    func rememberEviction(nsID: Int64, key: [UInt8], version: Int64, marks: Int64) {
        guard let evicted, let name = registry.name(ofDiskID: nsID) else { return }
        evicted.record(ItemKey(namespace: name, key: key), version: UInt64(bitPattern: version),
                       tombstone: marks & Int64(ItemMarks.tombstone) != 0)
    }

    /// Gives free pages back to the file system (a quarter at a time, each moved page written
    /// to the WAL) past `DiskBudget.vacuumThreshold`, or while the file is larger than
    /// `budget.highWater` (after `trimIfOver` trimmed to a limit lowered at a restart, the
    /// threshold alone left the file at 1.25 × the high-water mark: over the limit).
    /// Each step moves at most `walLimit` of pages, so that on a nearly full disk the WAL
    /// stays within what its checkpoint gives back (a bigger step failed for lack of room, at
    /// every try). Reports the free pages to `freePageBytes`. Returns whether the file on disk
    /// is over the high-water mark: it shrinks only when a checkpoint copies the whole WAL.
    @discardableResult
    func vacuumIfWorthIt(_ db: SQLiteConnection) throws -> Bool {
        guard incrementalVacuum else { return false }
        var freePages = Int(try db.scalarInt("PRAGMA freelist_count") ?? 0)
        var st = stat()
        let fileTooLarge = budget.isLimited && stat(dbPath, &st) == 0 && Int(st.st_size) > budget.highWater
        let pagesOver = try fileTooLarge && freePages > 0
            && Int(db.scalarInt("PRAGMA page_count") ?? 0) * pageSize > budget.highWater
        if (freePages > 64 && freePages * pageSize > budget.vacuumThreshold) || pagesOver {
            try db.execute("PRAGMA incremental_vacuum(\(min(max(64, freePages / 4), max(16, config.walLimit / pageSize))))")
            freePages = Int(try db.scalarInt("PRAGMA freelist_count") ?? 0)
        }
        freePageBytes?(freePages * pageSize)
        return fileTooLarge
    }
}
