import StrataCore

/// Told of every change to the disk tier's rows as the writer makes it — anti-entropy's
/// maintained digests (`SyncDigests` in StrataServer) instead of a pass over every row per round.
///
/// Called on the writer thread only, inside SQLite's commit: an implementation must be quick
/// and must not call back into the store. Changes are told when their transaction commits (in
/// the order made); a transaction that rolls back tells nothing. Changes come from TEMP triggers on the writer's
/// connection (nothing is stored in the database file, so other programs and older builds open
/// it unchanged): every insert, delete and change of a row's namespace, key, version, marks or
/// expiry — client writes, the log applier, sweeps, eviction, trims. A toggle is its own
/// inverse: a row appearing and the same row going away are the same call.
public protocol DiskRowWatcher: AnyObject, Sendable {
    /// Everything told so far is void; every row is told again next (`listing` true), then
    /// `rowsListed`. At the start, after a commit failed once its changes were told (an I/O
    /// error), after the database file was replaced, and on `TieredCache.relistDiskRows`.
    func rowsReset()
    /// A row appeared (`appeared`) or went away (an update is the old row going, then the new
    /// one coming): its namespace, key, version, whether it is a tombstone, and when
    /// `forEachSyncEntry` stops listing it (its expiry, or with the store's `maxAge` the earlier
    /// moment it turns too old; Unix µs, 0 = never). `listing`: told by a relisting, not by a change.
    func rowToggled(namespace: [UInt8], key: [UInt8], version: UInt64, tombstone: Bool, expiry: Int64,
                    appeared: Bool, listing: Bool)
    /// The relisting after `rowsReset` is complete.
    func rowsListed()
}

extension DiskTier {
    /// Lists every row to the watcher after `rowsReset` (writer thread). Costs one pass over
    /// the table's rows (their first pages: `value` is the last column) on the writer's
    /// connection: writes wait in the durability log meanwhile.
    func relistRows() {
        guard let w = rowWatcher, let db = writer else { return }
        rowWatchDirty = false
        rowChanges.removeAll()
        rowChangesTold = false
        do {
            try installRowWatch(db)
            w.rowsReset()
            let s = try db.prepared("SELECT ns, key, version, tombstone, expiry FROM items")
            defer { s.reset() }
            while try s.step() {
                tellRow(nsID: s.int(0), key: s.bytes(1), version: s.int(2), marks: s.int(3), expiry: s.int(4), appeared: true, listing: true)
            }
            w.rowsListed()
        } catch {
            rowWatchDirty = true
            log("level=error event=row_watch_failed path=\(dbPath) error=\"\(error)\"")
        }
    }

    /// The function and triggers that tell the watcher, on the writer's current connection.
    private func installRowWatch(_ db: SQLiteConnection) throws {
        guard rowWatchConnection != ObjectIdentifier(db) else { return }
        try db.createFunction("strata_row", argc: 6) { [unowned self] a in
            tellRow(nsID: a.int(0), key: a.bytes(1), version: a.int(2), marks: a.int(3), expiry: a.int(4), appeared: a.int(5) != 0,
                    listing: false)
        }
        db.onTransactionEnd(commit: { [unowned self] in
            guard let w = rowWatcher, !rowChanges.isEmpty else { return }
            for c in rowChanges {
                w.rowToggled(namespace: c.namespace, key: c.key, version: c.version, tombstone: c.tombstone, expiry: c.expiry,
                             appeared: c.appeared, listing: false)
            }
            rowChanges.removeAll(keepingCapacity: rowChanges.count < 1 << 16)
            rowChangesTold = true
        }, rollback: { [unowned self] in
            rowChanges.removeAll()
            // A commit failed after its changes were told (an I/O error): the watcher's view is off.
            if rowChangesTold { rowWatchDirty = true; rowChangesTold = false }
        })
        try db.execute("""
            CREATE TEMP TRIGGER IF NOT EXISTS strata_row_insert AFTER INSERT ON main.items BEGIN
              SELECT strata_row(NEW.ns, NEW.key, NEW.version, NEW.tombstone, NEW.expiry, 1); END;
            CREATE TEMP TRIGGER IF NOT EXISTS strata_row_delete AFTER DELETE ON main.items BEGIN
              SELECT strata_row(OLD.ns, OLD.key, OLD.version, OLD.tombstone, OLD.expiry, 0); END;
            CREATE TEMP TRIGGER IF NOT EXISTS strata_row_update AFTER UPDATE OF ns, key, version, tombstone, expiry ON main.items BEGIN
              SELECT strata_row(OLD.ns, OLD.key, OLD.version, OLD.tombstone, OLD.expiry, 0);
              SELECT strata_row(NEW.ns, NEW.key, NEW.version, NEW.tombstone, NEW.expiry, 1); END;
            """)
        rowWatchConnection = ObjectIdentifier(db)
    }

    private func tellRow(nsID: Int64, key: [UInt8], version: Int64, marks: Int64, expiry: Int64, appeared: Bool, listing: Bool) {
        guard let w = rowWatcher, let name = registry.name(ofDiskID: nsID) else { return }
        let tombstone = marks & Int64(ItemMarks.tombstone) != 0
        let v = UInt64(bitPattern: version)
        let ends = maxAge.effectiveExpiry(ItemState(value: [], flags: 0, extended: [], expiry: expiry, version: v,
                                                    marks: UInt8(truncatingIfNeeded: marks))) ?? 0
        if listing {
            w.rowToggled(namespace: name, key: key, version: v, tombstone: tombstone, expiry: ends, appeared: true, listing: true)
        } else {
            rowChangesTold = false
            rowChanges.append(RowChange(namespace: name, key: key, version: v, tombstone: tombstone, expiry: ends, appeared: appeared))
        }
    }

    /// One row change waiting for its transaction's commit.
    struct RowChange {
        let namespace: [UInt8], key: [UInt8]
        let version: UInt64
        let tombstone: Bool
        let expiry: Int64
        let appeared: Bool
    }
}
