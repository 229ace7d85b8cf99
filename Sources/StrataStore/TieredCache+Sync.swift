import StrataCore

/// One item as replicas compare it (anti-entropy, ARCHITECTURE.md "Repair in the nodes"): its
/// namespace, key, version and whether it is a tombstone.
public struct SyncEntry: Sendable, Equatable {
    public var namespace: [UInt8]
    public var key: [UInt8]
    public var version: UInt64
    public var tombstone: Bool
    public init(namespace: [UInt8], key: [UInt8], version: UInt64, tombstone: Bool) {
        self.namespace = namespace; self.key = key; self.version = version; self.tombstone = tombstone
    }
}

extension TieredCache {
    /// Calls `body` with every item the disk tier holds — SQLite's rows and the log's pending
    /// writes (which win over the rows) — that is live or an unexpired tombstone, not past
    /// `maxAge`, and whose version is at most `maxVersion`. Items only in the memory tier
    /// (memory-only writes, write-behind not yet flushed) are not listed: replicas hold the
    /// disk tier. `include` filters by namespace and key before anything else is done.
    ///
    /// Cost: one pass over SQLite's rows on a pooled reader (every page of the table: values
    /// sit in the rows) plus a copy of the pending index; nothing is locked for longer than a
    /// shard's copy. The rows are a consistent snapshot; writes made during the pass may or
    /// may not be listed.
    public func forEachSyncEntry(maxVersion: UInt64 = .max, include: ([UInt8], [UInt8]) -> Bool,
                                 _ body: (SyncEntry) -> Void) throws {
        if closed.load(ordering: .relaxed) { throw StoreError(.closed, "store is closed") }
        let now = clock.nowMicros()
        let oldest = maxAge.oldestVersion(now: now)
        // The pending writes first: they hide their rows.
        var pending: [ItemKey: ItemState?] = [:]
        for (id, e) in log.index.snapshot() { pending[id] = e.state }
        func listed(_ s: ItemState) -> Bool {
            s.version <= maxVersion && s.guards(now: now) && !s.isAged(oldestVersion: oldest)
        }
        for (id, state) in pending {
            guard let s = state, listed(s), include(id.namespace, id.key) else { continue }
            body(SyncEntry(namespace: id.namespace, key: id.key, version: s.version, tombstone: s.tombstone))
        }
        try disk.withReader { db in
            let st = try db.prepared("""
                SELECT n.name, i.key, i.version, i.tombstone, i.expiry, i.gen FROM items i JOIN namespaces n ON i.ns = n.id
                WHERE (i.expiry = 0 OR i.expiry > ?) AND i.version <= ?
                """)
            st.bind(1, now)
            st.bind(2, Int64(bitPattern: min(maxVersion, UInt64(Int64.max))))
            defer { st.reset() }
            while try st.step() {
                let name = st.bytes(0), key = st.bytes(1)
                guard include(name, key) else { continue }
                // A row of an older generation was flushed (collected later by the sweeps).
                guard let ns = registry.lookup(name), st.int(5) == ns.generation else { continue }
                let id = ItemKey(namespace: name, key: key)
                if pending[id] != nil { continue }
                let version = UInt64(bitPattern: st.int(2))
                let tombstone = st.int(3) & Int64(ItemMarks.tombstone) != 0
                if !tombstone && version < oldest { continue }
                body(SyncEntry(namespace: name, key: key, version: version, tombstone: tombstone))
            }
        }
    }

    /// The version of the newest write the disk tier holds for one key — an item or a
    /// tombstone, expired or not — or 0 when it holds none (hinted handoff asks this for every
    /// write a peer accepted). Reads no value: the log's pending index, else one SQLite row.
    public func syncVersion(_ key: [UInt8], namespace: [UInt8]) throws -> UInt64 {
        try check(key: key, namespace: namespace)
        if let p = log.index.lookup(ItemKey(namespace: namespace, key: key)) { return p.state?.version ?? 0 }
        return try disk.read(namespace: namespace, key: key, withValue: false, countStats: false)?.state.version ?? 0
    }

    /// The delete that tells a replica to drop its copy of one key older than a write a disk
    /// limit removed here lately (`EvictedVersions`, a store with
    /// `expiredItemsLeaveTombstones`): its version, and the removed write's. Nil when none is
    /// remembered (whether the disk tier holds the key again is the caller's to check).
    public func evictedDelete(_ key: [UInt8], namespace: [UInt8]) -> (deleteVersion: UInt64, evicted: UInt64)? {
        guard let e = disk.evicted?.lookup(ItemKey(namespace: namespace, key: key)) else { return nil }
        return (e.deleteVersion, e.version)
    }

    /// The writes a disk limit removed lately (`EvictedVersions`, a store with
    /// `expiredItemsLeaveTombstones`) that `include` takes, as the entries they were: anti-entropy
    /// lists them beside `forEachSyncEntry`'s when it compares keys with a peer (not in its
    /// digests). A key the disk tier holds again is the caller's to leave out.
    public func evictedSyncEntries(include: ([UInt8], [UInt8]) -> Bool) -> [SyncEntry] {
        (disk.evicted?.entries(include) ?? []).map {
            SyncEntry(namespace: $0.0.namespace, key: $0.0.key, version: $0.1.version, tombstone: $0.1.tombstone)
        }
    }

    /// What the disk tier holds for one key as a replica hands it on: the item (with the
    /// disk's copy of its value), its tombstone, or nothing. Memory-only items read as absent.
    public func syncRead(_ key: [UInt8], namespace: [UInt8]) throws -> ReadResult {
        try read(key, namespace: namespace, tiers: .disk)
    }

    /// Tells `watcher` of every row the disk tier holds, then of every change to its rows
    /// (`DiskRowWatcher`). Returns once the listing is done. One watcher per store.
    public func watchDiskRows(_ watcher: any DiskRowWatcher) throws { try control(.watchRows(watcher)) }

    /// Lists every row to the watcher again (its view of the rows changed shape: a new member
    /// list). Returns at once; the writer lists them after the work queued before.
    public func relistDiskRows() {
        disk.enqueue(DiskJob(.relistRows) { _ in })
    }
}
