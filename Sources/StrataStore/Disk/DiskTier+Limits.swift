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

    /// Pages in use (not free) plus the WAL.
    /// Bytes on disk: every page of the database file (free pages included) plus the WAL. A
    /// file that cannot return free pages (made without auto-vacuum) counts pages in use, or
    /// evicting could never bring it under the limit.
    func bytesOnDisk(_ db: SQLiteConnection) throws -> Int {
        var pages = Int(try db.scalarInt("PRAGMA page_count") ?? 0)
        if !incrementalVacuum { pages -= Int(try db.scalarInt("PRAGMA freelist_count") ?? 0) }
        return pages * pageSize + walBytes()
    }

    func enforceLimits(_ db: SQLiteConnection, _ staged: inout Staged) throws {
        if rowCount + staged.rowDelta > config.diskCountLimit {
            try evictLRU(db, &staged, untilCount: config.diskCountLimit, bytes: Int.max)
        }
        // Measuring bytes on disk costs two PRAGMAs and a stat: only when the estimate (last
        // measurement + an upper bound of each row's page writes since) could be over the limit.
        let limit = config.diskByteLimit
        if limit > 0 && limit < Int.max && bytesEstimate + staged.bytesBound(pageSize: pageSize) > limit {
            try evictLRU(db, &staged, untilCount: Int.max, bytes: limit)
            bytesEstimate = try bytesOnDisk(db) - staged.bytesBound(pageSize: pageSize)
        }
        if config.freeDiskSpaceLimit > 0 && freeSpace() < config.freeDiskSpaceLimit {
            // Give back about 1 % of the rows; the space returns once the free pages are vacuumed.
            let target = max(0, rowCount + staged.rowDelta - max(16, (rowCount + staged.rowDelta) / 100))
            try evictLRU(db, &staged, untilCount: target, bytes: Int.max)
        }
    }

    /// Deletes least recently used rows until at most `untilCount` rows remain and the bytes
    /// on disk are at most `bytes`.
    func evictLRU(_ db: SQLiteConnection, _ staged: inout Staged, untilCount: Int, bytes: Int) throws {
        while rowCount + staged.rowDelta > 0 {
            let overCount = rowCount + staged.rowDelta - untilCount
            var n = max(0, overCount)
            if n == 0 && bytes < Int.max {
                guard try bytesOnDisk(db) > bytes else { break }
                // Free pages first (auto_vacuum=INCREMENTAL gives them back to the file system),
                // then least recently used rows.
                let free = incrementalVacuum ? Int(try db.scalarInt("PRAGMA freelist_count") ?? 0) : 0
                if free > 0 {
                    try db.execute("PRAGMA incremental_vacuum(\(free))")
                    if Int(try db.scalarInt("PRAGMA freelist_count") ?? 0) < free { continue }
                }
                n = max(16, (rowCount + staged.rowDelta) / 50)
            } else if n == 0 { break }
            let removed = try deleteLeastRecentlyUsed(db, n, rows: rowCount + staged.rowDelta)
            if removed == 0 { break }
            staged.rowDelta -= removed
            staged.evicted += removed
        }
    }

    /// Tables up to this many rows are read whole when evicting: exact LRU order.
    static let exactEvictionRows = 2048

    /// Deletes about `n` of the least recently used rows; returns how many went. There is no
    /// index on `access` (every write and every buffered read would update it: measured, 16 %
    /// of a node's CPU on 1 KiB durable sets), so the candidates are a random sample — 8 rows
    /// per row to evict, at least 256, read in runs of 16 from random rowids — and the oldest go
    /// (Redis's approximated LRU). A table of at most `exactEvictionRows` rows is read whole,
    /// so a small store evicts in exact LRU order. Writer thread.
    func deleteLeastRecentlyUsed(_ db: SQLiteConnection, _ n: Int, rows: Int) throws -> Int {
        guard n > 0 else { return 0 }
        var candidates: [Int64: Int64] = [:] // id → access
        if rows <= Self.exactEvictionRows {
            let all = try db.statement("SELECT id, access FROM items")
            defer { all.reset() }
            while try all.step() { candidates[all.int(0)] = all.int(1) }
        } else {
            let maxID = try db.scalarInt("SELECT max(id) FROM items") ?? 0
            guard maxID > 0 else { return 0 }
            let want = min(max(256, 8 * n), 1 << 20)
            let run = try db.statement("SELECT id, access FROM items WHERE id >= ? ORDER BY id LIMIT 16")
            var reads = 0
            while candidates.count < want && reads < want / 4 + 64 {
                run.bind(1, Int64(evictionSampler.next() % UInt64(maxID)) + 1)
                while try run.step() { candidates[run.int(0)] = run.int(1) }
                run.reset()
                reads += 1
            }
        }
        let doomed = candidates.sorted { $0.value < $1.value || ($0.value == $1.value && $0.key < $1.key) }.prefix(n)
        let delete = try db.statement("DELETE FROM items WHERE id=?")
        var removed = 0
        for (id, _) in doomed {
            delete.bind(1, id)
            try delete.run()
            removed += db.changes
        }
        return removed
    }
}
