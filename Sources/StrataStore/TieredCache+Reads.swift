#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import StrataCore
import Synchronization

// TieredCache's reads (memory, the log's pending writes, SQLite), flush, trim, sync and
// the memory sweeper.
extension TieredCache {
    // MARK: Reads

    /// The item under `key`, or nil. Looks in memory, then disk (as `tiers` allows), and
    /// promotes a disk hit into memory when `tiers` includes memory. With `touch`, also gives
    /// the item a new expiry.
    public func get(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all, touch: Expiry? = nil) throws -> CacheItem? {
        if case .hit(let item) = try read(key, namespace: namespace, tiers: tiers, touch: touch) { return item }
        return nil
    }

    /// What a read found: an item, the tombstone of a versioned remove (its version lets a
    /// cluster client see that a delete is newer than another node's copy), or nothing.
    public enum ReadResult: Sendable, Equatable {
        case hit(CacheItem)
        case tombstone(version: UInt64)
        case miss
    }

    /// Like `get`, but tells a tombstone apart from a miss.
    public func read(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all, touch: Expiry? = nil) throws -> ReadResult {
        try check(key: key, namespace: namespace)
        try check(tiers: tiers)
        guard let ns = registry.lookup(namespace) else { return .miss }
        let now = clock.nowMicros()
        let oldest = maxAge.oldestVersion(now: now)
        var found: CacheItem?
        var tombstone: UInt64?
        let loc = memory.locate(tag: ns.tag, key: key)
        // A read on an event loop (`InlineDiskRead`) may bail at the disk and run again on a
        // worker: its memory miss is counted once it did not.
        let inline = InlineDiskRead.active
        var memoryMissed = false
        if tiers.contains(.memory) {
            if let s = memory.with(loc, key, { $0.get(tag: ns.tag, key: $1, hash: loc.hash, now: now, countStats: !inline) }) {
                found = CacheItem(value: s.value, flags: s.flags, extended: s.extended,
                                  expiresAt: maxAge.effectiveExpiry(s), version: s.version, tier: .memory,
                                  stale: s.stale, negative: s.negative)
            } else {
                memoryMissed = inline
                if let t = memory.with(loc, key, { $0.peek(tag: ns.tag, key: $1, hash: loc.hash, now: now, withValue: false) }),
                   t.state.tombstone {
                    tombstone = t.state.version
                }
            }
        }
        if found == nil && tiers.contains(.disk) {
            let epoch = memory.deleteEpoch(loc)
            // The log's pending writes are newer than anything in SQLite.
            let pending = log.index.lookup(ItemKey(namespace: namespace, key: key), accessedAt: now)
            let state: ItemState?
            if let p = pending {
                // As SQLite reads: unexpired rows (not past maxAge), tombstones too.
                state = p.state.flatMap { $0.guards(now: now) && !$0.isAged(oldestVersion: oldest) ? $0 : nil }
                if let s = state, !s.tombstone { try disk.admitPendingValue(size: s.value.count) }
                if state != nil { disk.noteAccess(namespace: namespace, key: key, now: now) }
                disk.counters.hits.add(state.map { $0.tombstone ? 0 : 1 } ?? 0, ordering: .relaxed)
                disk.counters.misses.add(state.map { $0.tombstone ? 1 : 0 } ?? 1, ordering: .relaxed)
            } else {
                state = try disk.read(namespace: namespace, key: key, withValue: true, countStats: true)?.state
            }
            if memoryMissed { memory.with(loc, key) { shard, _ in shard.misses += 1 } }
            if let s = state {
                if s.tombstone {
                    tombstone = max(tombstone ?? 0, s.version)
                } else {
                    if tiers.contains(.memory) {
                        memory.promote(loc, tag: ns.tag, key: key, item: s, ifEpoch: epoch, now: now, compression: ns.compression)
                    }
                    found = CacheItem(value: s.value, flags: s.flags, extended: s.extended,
                                      expiresAt: maxAge.effectiveExpiry(s), version: s.version, tier: .disk,
                                      stale: s.stale, negative: s.negative)
                }
            }
        }
        guard var item = found else {
            ns.counters.misses.add(1, ordering: .relaxed)
            return tombstone.map { .tombstone(version: $0) } ?? .miss
        }
        ns.counters.hits.add(1, ordering: .relaxed)
        // A negative entry is answered as it is: a touch does not extend a cached failure.
        if let t = touch, !item.negative {
            // Resolved once: the expiry answered is exactly the one stored (a relative TTL
            // resolved twice would answer a few µs earlier than the stored time).
            let e = t.resolve(now: clock.nowMicros(), defaultTTL: configuration.defaultTTL)
            guard let v = try touchVersioned(key, namespace: namespace, expiry: e == 0 ? .never : .at(unixMicros: e), tiers: tiers)
            else { return .miss }
            item.expiresAt = maxAge.effectiveExpiry(ItemState(value: [], flags: 0, extended: [], expiry: e, version: v, marks: 0))
            item.version = v
        }
        return .hit(item)
    }

    /// The live item in the memory tier, for a caller that makes a full `read` on a miss (the
    /// node's event loop answers memory hits itself): a hit is counted as `get` counts it, a
    /// miss not at all — the full read counts it once.
    public func memoryHit(_ key: [UInt8], namespace: [UInt8] = []) throws -> CacheItem? {
        try check(key: key, namespace: namespace)
        guard let ns = registry.lookup(namespace) else { return nil }
        let now = clock.nowMicros()
        let loc = memory.locate(tag: ns.tag, key: key)
        guard let s = memory.with(loc, key, { shard, k -> ItemState? in
            let s = shard.get(tag: ns.tag, key: k, hash: loc.hash, now: now, countStats: false)
            if s != nil { shard.hits += 1 }
            return s
        }) else { return nil }
        ns.counters.hits.add(1, ordering: .relaxed)
        return CacheItem(value: s.value, flags: s.flags, extended: s.extended, expiresAt: maxAge.effectiveExpiry(s),
                         version: s.version, tier: .memory, stale: s.stale, negative: s.negative)
    }

    /// One result per key, in order (nil for a miss).
    public func getMany(_ keys: [[UInt8]], namespace: [UInt8] = [], tiers: Tiers = .all) throws -> [CacheItem?] {
        try keys.map { try get($0, namespace: namespace, tiers: tiers) }
    }

    /// Whether a live item is under `key` in any of `tiers`. Never counts an access for eviction, nor stats.
    public func contains(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all) throws -> Bool {
        try metadata(key, namespace: namespace, tiers: tiers) != nil
    }

    /// The value of the live item under `key` (nil: absent, a tombstone, or a negative entry),
    /// read without counting a hit or a miss and without counting as an access for eviction:
    /// for META's image facts.
    public func peekValue(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all) throws -> [UInt8]? {
        try check(key: key, namespace: namespace)
        try check(tiers: tiers)
        guard let ns = registry.lookup(namespace) else { return nil }
        let now = clock.nowMicros()
        let oldest = maxAge.oldestVersion(now: now)
        func live(_ s: ItemState) -> [UInt8]? { s.isLive(now: now, oldestVersion: oldest) && !s.negative ? s.value : nil }
        if tiers.contains(.memory) {
            let loc = memory.locate(tag: ns.tag, key: key)
            if let m = memory.with(loc, key, { $0.peek(tag: ns.tag, key: $1, hash: loc.hash, now: now, withValue: true) }) {
                return live(m.state)
            }
        }
        guard tiers.contains(.disk) else { return nil }
        if let p = log.index.lookup(ItemKey(namespace: namespace, key: key)) { return p.state.flatMap(live) }
        return try disk.read(namespace: namespace, key: key, withValue: true, countStats: false).flatMap { live($0.state) }
    }

    /// Metadata of the item under `key`: sizes, encoding, the tiers holding it, expiry,
    /// version, flags. Nil when absent (or expired, or a tombstone).
    public func metadata(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all) throws -> ItemMetadata? {
        try check(key: key, namespace: namespace)
        try check(tiers: tiers)
        guard let ns = registry.lookup(namespace) else { return nil }
        let now = clock.nowMicros()
        let oldest = maxAge.oldestVersion(now: now)
        var meta: ItemMetadata?
        if tiers.contains(.disk) {
            if let p = log.index.lookup(ItemKey(namespace: namespace, key: key)) {
                // Not yet in SQLite: the pending write says how the disk tier will hold it.
                if let st = p.state, st.isLive(now: now, oldestVersion: oldest) {
                    meta = ItemMetadata(size: st.value.count, storedSize: p.storedSize, encoding: p.encoding, tiers: .disk,
                                        expiresAt: maxAge.effectiveExpiry(st), version: st.version,
                                        flags: st.flags, extendedSize: st.extended.count)
                }
            } else if let row = try disk.read(namespace: namespace, key: key, withValue: false, countStats: false),
                      row.state.isLive(now: now, oldestVersion: oldest) {
                meta = ItemMetadata(size: row.size, storedSize: row.storedSize, encoding: row.encoding, tiers: .disk,
                                    expiresAt: maxAge.effectiveExpiry(row.state), version: row.state.version,
                                    flags: row.state.flags, extendedSize: row.state.extended.count)
            }
        }
        if tiers.contains(.memory) {
            let loc = memory.locate(tag: ns.tag, key: key)
            if let m = memory.with(loc, key, { $0.peek(tag: ns.tag, key: $1, hash: loc.hash, now: now, withValue: false) }),
               m.state.isLive(now: now, oldestVersion: oldest) {
                if var existing = meta, existing.version == m.state.version {
                    existing.tiers.insert(.memory)
                    meta = existing
                } else if meta == nil || m.state.version > meta!.version {
                    meta = ItemMetadata(size: m.valueLen, storedSize: nil, encoding: nil, tiers: .memory,
                                        expiresAt: maxAge.effectiveExpiry(m.state), version: m.state.version,
                                        flags: m.state.flags, extendedSize: m.state.extended.count)
                }
            }
        }
        return meta
    }

    /// Up to `limit` keys of `namespace` after `cursor` in bytewise order, and the cursor for
    /// the next page (nil at the end). Memory keys come from a scan of the memory tier.
    public func keys(namespace: [UInt8] = [], after cursor: [UInt8]? = nil, limit: Int = 1000,
                     tiers: Tiers = .all) throws -> (keys: [[UInt8]], next: [UInt8]?) {
        if namespace.count > ItemLimits.maxNamespaceBytes {
            throw StoreError(.invalidNamespace, "namespace is \(namespace.count) bytes; the limit is \(ItemLimits.maxNamespaceBytes)")
        }
        try check(tiers: tiers)
        guard limit > 0 else { throw StoreError(.invalidArgument, "limit must be positive") }
        guard let ns = registry.lookup(namespace) else { return ([], nil) }
        let now = clock.nowMicros()
        func afterCursor(_ k: [UInt8]) -> Bool { cursor.map { $0.lexicographicallyPrecedes(k) } ?? true }
        var keys: Set<[UInt8]> = []
        // SQLite's page is complete up to its limit-th key (`boundary`) when it has more;
        // keys from memory and the log past the boundary wait for a later page.
        var boundary: [UInt8]? = nil
        if tiers.contains(.disk) {
            let diskKeys = try disk.keys(namespace: namespace, after: cursor, limit: limit + 1)
            if diskKeys.count > limit { boundary = diskKeys[limit - 1] }
            keys.formUnion(diskKeys)
            // The log's pending writes are newer than SQLite's rows: a pending remove hides one.
            for (k, live) in log.index.keys(namespace: namespace, now: now, oldestVersion: maxAge.oldestVersion(now: now)) where afterCursor(k) {
                if live { keys.insert(k) } else { keys.remove(k) }
            }
        }
        if tiers.contains(.memory) {
            for k in memory.keys(tag: ns.tag, now: now) where afterCursor(k) { keys.insert(k) }
        }
        var sorted = keys.sorted { $0.lexicographicallyPrecedes($1) }
        if let b = boundary { sorted.removeAll { b.lexicographicallyPrecedes($0) } }
        if sorted.count > limit {
            let page = Array(sorted.prefix(limit))
            return (page, page.last)
        }
        // A short page still has a cursor while SQLite has more (its boundary).
        return (sorted, boundary)
    }

    // MARK: Flush and trim

    func control(_ kind: DiskJob.Kind) throws {
        if closed.load(ordering: .relaxed) { throw StoreError(.closed, "store is closed") }
        let done = Completion<Result<(WriteResult, WriteEffect)?, StoreError>>()
        disk.enqueue(DiskJob(kind) { done.fulfil($0) })
        if case .failure(let e) = done.wait() { throw e }
    }

    /// Empties one namespace in the tiers named, in O(1): the memory tier's tag changes (its
    /// records stop matching at once; the sweeper frees them), the disk tier's generation
    /// changes (through the log, like a write; rows are collected by the sweeps). With
    /// `.memory` alone the disk keeps its items and a later read finds them there (SDWebImage's
    /// `clearMemory`); with `.disk` alone memory copies stay, and are what a later read finds
    /// until they are evicted (YYDiskCache's `removeAllObjects` beside a YYMemoryCache). A
    /// namespace the store does not know (never written since open, not on disk, no write in
    /// the log) holds nothing: its flush records nothing — no registry entry, no log record.
    public func flush(namespace: [UInt8], tiers: Tiers = .all) throws {
        if namespace.count > ItemLimits.maxNamespaceBytes {
            throw StoreError(.invalidNamespace, "namespace is \(namespace.count) bytes; the limit is \(ItemLimits.maxNamespaceBytes)")
        }
        try check(tiers: tiers)
        if closed.load(ordering: .relaxed) { throw StoreError(.closed, "store is closed") }
        guard registry.lookup(namespace) != nil else { return }
        if !tiers.contains(.memory) { memoryOnlyWrites.store(true, ordering: .relaxed) } // memory copies stay alone
        switch (tiers.contains(.memory), tiers.contains(.disk)) {
        case (true, true): try logAndApply(.flushNamespace(namespace)) // new generation and tag, in log order
        case (false, _): try logAndApply(.flushNamespace(namespace), keepsMemory: true)
        case (true, false): registry.bump(namespace, generation: nil)
        }
    }

    /// Namespaces the store keeps an entry for (those written since open, on disk, or in the
    /// log); a flush of an unknown one does not add to it.
    public var knownNamespaceCount: Int { registry.count }

    /// Empties every namespace in the tiers named (O(namespaces) on disk; memory is freed at
    /// once, O(items in memory)). Tiers as for `flush(namespace:tiers:)`.
    public func flushAll(tiers: Tiers = .all) throws {
        try check(tiers: tiers)
        if closed.load(ordering: .relaxed) { throw StoreError(.closed, "store is closed") }
        if !tiers.contains(.memory) { memoryOnlyWrites.store(true, ordering: .relaxed) } // memory copies stay alone
        if tiers.contains(.disk) { try logAndApply(.flushAll, keepsMemory: !tiers.contains(.memory)) }
        if tiers.contains(.memory) {
            registry.bumpAllTags()
            for s in memory.shards { s.lock.withLock { s.removeAll() } }
        }
    }

    /// A flush goes through the log like any write (so a replay repeats it in order) and
    /// returns once SQLite has applied it: from then on no older item is visible anywhere.
    func logAndApply(_ kind: LoggedWrite.Kind, keepsMemory: Bool = false) throws {
        log.waitForRoom()
        let end = log.append(kind, at: clock.nowMicros(), keepsMemory: keepsMemory)
        try log.waitDurable(end)
        try log.waitApplied(end)
    }

    /// The names of every namespace this store knows (on disk or written since open).
    public func namespaceNames() -> [[UInt8]] { registry.allNames() }

    /// Evicts least recently used items until each tier in `tiers` holds at most `count` items
    /// and `bytes` bytes (memory: accounted bytes; disk: pages in use plus WAL).
    public func trim(toCount count: Int = Int.max, toBytes bytes: Int = Int.max, tiers: Tiers = .all) throws {
        try check(tiers: tiers)
        if tiers.contains(.memory) {
            let n = memory.shards.count
            for s in memory.shards {
                s.lock.withLock { s.trim(toCount: count == Int.max ? .max : count / n, toBytes: bytes == Int.max ? .max : bytes / n) }
            }
        }
        if tiers.contains(.disk) {
            try log.waitApplied(log.end) // the backlog first, so the trim sees every item
            try control(.trim(count: count, bytes: bytes))
        }
    }

    /// Returns once every disk write made before the call is in SQLite (the log's backlog
    /// before this point applied) and every queued disk job has run.
    public func sync() throws {
        if closed.load(ordering: .relaxed) { throw StoreError(.closed, "store is closed") }
        let end = log.end
        try log.waitDurable(end)
        try log.waitApplied(end)
        try control(.barrier)
    }

    // MARK: Background

    /// Once a second: expired memory records (4,096 per shard), and whether the disk tier's
    /// files are resident (`InlineDiskRead`).
    func sweepLoop() {
        var cursors = Array(repeating: 0, count: memory.shards.count)
        while true {
            sweeper.lock()
            if !sweeperStop { sweeper.wait(seconds: 1) }
            let stop = sweeperStop
            sweeper.unlock()
            if stop { break }
            if configuration.diskReadsInline { disk.checkResidency() }
            let live = registry.liveTagSet()
            let now = clock.nowMicros()
            // 4,096 slots a shard a pass, 256 under the lock at a time: the event loop waits for
            // a shard's lock, and a sweeper preempted while holding it for a whole pass stalled
            // the loop for up to 5 ms (on a busy host).
            for (i, s) in memory.shards.enumerated() {
                for _ in 0..<16 {
                    s.lock.withLock {
                        cursors[i] = s.sweep(from: cursors[i], budget: 256, now: now, isLiveTag: { live.contains($0) })
                    }
                }
            }
        }
        sweeperDone.fulfil(())
    }
}
