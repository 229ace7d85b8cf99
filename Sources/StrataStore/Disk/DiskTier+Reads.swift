#if canImport(Glibc)
import Glibc
#endif
import CLinux
import StrataCore
import Synchronization

// Reads on any thread, through pooled reader connections.
extension DiskTier {
    // MARK: Reads (any thread)

    func withReader<T>(_ body: (SQLiteConnection) throws -> T) throws -> T {
        // While a quarantined file is replaced, wait for the fresh one (bounded: 5 s).
        var waited = 0
        if InlineDiskRead.active && readerLock.withLock({ reopening }) { throw InlineDiskRead.bail("the database is being replaced") }
        while readerLock.withLock({ reopening }) && waited < 5000 { usleep(1000); waited += 1 }
        let (conn, epoch): (SQLiteConnection?, Int) = readerLock.withLock { (idleReaders.popLast(), readerEpoch) }
        let db: SQLiteConnection
        if let c = conn { db = c } else {
            do {
                db = try SQLiteConnection(path: dbPath, readOnly: false)
                try db.execute("PRAGMA query_only=1")
                try db.execute("PRAGMA cache_size=-\(config.readerCacheKiB)")
                try db.execute("PRAGMA mmap_size=\(config.mmapBytes)")
            } catch let e as SQLiteError { throw mapError(e, doing: "opening a reader") }
        }
        defer {
            readerLock.withLock {
                if epoch == readerEpoch && idleReaders.count < config.diskReaders { idleReaders.append(db) }
            }
        }
        do {
            return try body(db)
        } catch let e as SQLiteError {
            if e.isCorruption {
                enqueue(DiskJob(.quarantine(reason: "SQLite reported corruption while reading: \(e.message)", epoch: epoch), inline: true) { _ in })
            }
            throw mapError(e, doing: "reading")
        }
    }

    /// Values stored larger than this are read one gate-full at a time (`largeReads`).
    static let largeValueBytes = 1 << 20

    /// Lets a value the log's index answers (written, not yet in SQLite) be answered as a read
    /// from SQLite would be: the value is in memory already, but the answer made from it is as
    /// large, so a large one takes its turn at `largeReads` by its size and is told to
    /// `largeReadDone` before the turn ends (the node counts it as output then), and on an event
    /// loop one past `InlineDiskRead.maxBytes` bails to a worker. Throws `.busy` when the
    /// node's output stayed over its bound for 5 s. Costs nothing for a value of 1 MiB or less.
    func admitPendingValue(size: Int) throws {
        guard size > Self.largeValueBytes else { return }
        if InlineDiskRead.active { throw InlineDiskRead.bail("a \(size)-byte value in the log") }
        guard largeReads.acquire(size, mayStart: config.largeReadsMayStart) else {
            throw StoreError(.busy, "a \(size)-byte value is held back while the node's unsent output is over its bound (--max-output-bytes), and was for 5 s: retry later")
        }
        defer { largeReads.release(size) }
        config.largeReadDone?(size)
    }

    /// The store's `maxAge` (rows written before `now − maxAge` read as expired).
    var maxAge: MaxAge { MaxAge(seconds: config.maxAge) }

    /// The row for a key (tombstones included, expired rows and rows past `maxAge` excluded), or nil. A row whose
    /// checksum fails is reported, scheduled for removal, and read as nil.
    func read(namespace: [UInt8], key: [UInt8], withValue: Bool, countStats: Bool) throws -> DiskRow? {
        guard let ns = registry.lookup(namespace), let nsID = ns.diskID else {
            if countStats { counters.misses.add(1, ordering: .relaxed) }
            return nil
        }
        let now = clock.nowMicros()
        let found: FoundRow? = try withReader { db in
            // A large value is not loaded by this statement (length() reads only the row's
            // header): it is read below, once `largeReads` lets it. Without the value (a
            // version check) none is loaded.
            let s = try db.prepared("""
                SELECT gen, CASE WHEN length(value) <= ? THEN value END, codec, size, flags, ext, expiry, version, tombstone,
                  checksum, length(value), access, id FROM items WHERE ns=? AND key=?
                """)
            s.bind(1, withValue ? Self.largeValueBytes : -1)
            s.bind(2, nsID)
            s.bind(3, key)
            defer { s.reset() }
            guard try s.step() else { return nil }
            if s.int(0) != ns.generation { return nil }
            let decoded: FoundRow?
            let stored = Int(s.int(10))
            // The value once decoded: a compressible one (32 MiB of zeros stored in a few KiB)
            // costs its decoded size in time and memory, not its stored size (an outside
            // review, px4: such reads ran on the loop and held up the memory hits after them).
            let made = Int(s.int(3))
            if withValue && max(stored, made) > InlineDiskRead.maxBytes && InlineDiskRead.active {
                throw InlineDiskRead.bail("a \(made)-byte value (\(stored) bytes stored)")
            }
            if withValue && stored <= Self.largeValueBytes && made > Self.largeValueBytes {
                // Loaded by the statement already; its decoded copy takes its turn at the
                // large reads' bound as a large stored value does.
                let cost = stored + made
                guard largeReads.acquire(cost, mayStart: config.largeReadsMayStart) else {
                    throw StoreError(.busy, "a \(made)-byte value is held back while the node's unsent output is over its bound (--max-output-bytes), and was for 5 s: retry later")
                }
                defer { largeReads.release(cost) }
                decoded = decodeRow(s, key: key, withValue: true)
                if decoded != nil { config.largeReadDone?(made) }
            } else if withValue && stored > Self.largeValueBytes {
                // Its stored bytes (SQLite's copy) and the value made from them are in memory
                // together: both count. Read while `s` is open: the same snapshot.
                let cost = stored + Int(s.int(3))
                guard largeReads.acquire(cost, mayStart: config.largeReadsMayStart) else {
                    throw StoreError(.busy, "a \(stored)-byte value is held back while the node's unsent output is over its bound (--max-output-bytes), and was for 5 s: retry later")
                }
                defer { largeReads.release(cost) }
                let v = try db.prepared("SELECT value FROM items WHERE id=?")
                v.bind(1, s.int(12))
                defer { v.reset() }
                guard try v.step() else { return nil }
                decoded = decodeRow(s, key: key, withValue: true, valueFrom: v, column: 0)
                // Before the gate opens for the next read (the deferred release).
                if decoded != nil { config.largeReadDone?(Int(s.int(3))) }
            } else {
                decoded = decodeRow(s, key: key, withValue: withValue)
            }
            if var row = decoded {
                row.access = s.int(11)
                return row
            }
            // Checksum or decode failure: a damaged item is a miss, removed and counted.
            let checksum = s.int(9)
            counters.corruptItems.add(1, ordering: .relaxed)
            log("level=warn event=corrupt_item ns_id=\(nsID) key_bytes=\(key.count) action=removed")
            enqueue(DiskJob(.removeIfChecksum(nsID: nsID, key: key, checksum: checksum), inline: true) { _ in })
            return nil
        }
        guard let f = found, f.row.state.expiry == 0 || f.row.state.expiry > now,
              !f.row.state.isAged(oldestVersion: maxAge.oldestVersion(now: now)) else {
            if countStats { counters.misses.add(1, ordering: .relaxed) }
            return nil
        }
        if countStats {
            if f.row.state.tombstone { counters.misses.add(1, ordering: .relaxed) } else { counters.hits.add(1, ordering: .relaxed) }
            // An item's access time moves at most once per `accessResolution`: a read must not
            // turn into a write every time (memcached bumps an item at most once a minute).
            if Double(now / 1_000_000 - f.access) >= config.accessResolution { recordAccess(nsID: nsID, key: key, now: now) }
        }
        return f.row
    }

    /// Keys of a namespace after `cursor` in byte order, live items only.
    func keys(namespace: [UInt8], after cursor: [UInt8]?, limit: Int) throws -> [[UInt8]] {
        guard let ns = registry.lookup(namespace), let nsID = ns.diskID else { return [] }
        let now = clock.nowMicros()
        return try withReader { db in
            let s = try db.statement(
                "SELECT key FROM items WHERE ns=? AND key>? AND gen=? AND tombstone&1=0 AND (expiry=0 OR expiry>?) AND version>=? ORDER BY key LIMIT ?")
            s.bind(1, nsID); s.bind(2, cursor ?? []); s.bind(3, ns.generation); s.bind(4, now)
            s.bind(5, Int64(bitPattern: maxAge.oldestVersion(now: now))); s.bind(6, limit)
            defer { s.reset() }
            var out: [[UInt8]] = []
            while try s.step() { out.append(s.bytes(0)) }
            return out
        }
    }

    /// Live rows and their value bytes per namespace name (an O(n) scan; for stats).
    func namespaceUsage() throws -> [[UInt8]: (items: Int, bytes: Int)] {
        let now = clock.nowMicros()
        return try withReader { db in
            let s = try db.prepared("""
                SELECT n.name, count(*), sum(i.size) FROM items i JOIN namespaces n ON i.ns = n.id
                WHERE i.gen = n.generation AND i.tombstone & 1 = 0 AND (i.expiry = 0 OR i.expiry > ?) AND i.version >= ?
                GROUP BY n.name
                """)
            s.bind(1, now)
            s.bind(2, Int64(bitPattern: maxAge.oldestVersion(now: now)))
            defer { s.reset() }
            var out: [[UInt8]: (Int, Int)] = [:]
            while try s.step() { out[s.bytes(0)] = (Int(s.int(1)), Int(s.int(2))) }
            return out
        }
    }

    /// Live rows of one namespace and their value bytes: one count over the namespace's rows
    /// through the `(ns, key)` index — O(items of the namespace). (0, 0) when it has no rows.
    func namespaceUsage(_ namespace: [UInt8]) throws -> (items: Int, bytes: Int) {
        guard let ns = registry.lookup(namespace), let nsID = ns.diskID else { return (0, 0) }
        let now = clock.nowMicros()
        return try withReader { db in
            let s = try db.prepared("""
                SELECT count(*), coalesce(sum(size), 0) FROM items
                WHERE ns = ? AND gen = ? AND tombstone & 1 = 0 AND (expiry = 0 OR expiry > ?) AND version >= ?
                """)
            s.bind(1, nsID); s.bind(2, ns.generation); s.bind(3, now)
            s.bind(4, Int64(bitPattern: maxAge.oldestVersion(now: now)))
            defer { s.reset() }
            guard try s.step() else { return (0, 0) }
            return (Int(s.int(0)), Int(s.int(1)))
        }
    }
}
