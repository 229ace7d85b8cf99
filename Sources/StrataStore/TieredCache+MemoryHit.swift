import StrataCore
import Synchronization

/// What a memory hit shows the body of `TieredCache.withMemoryHit`. The buffers point into
/// the memory tier's record and are valid only inside the body (the shard's lock is held).
public struct MemoryHitView {
    public let flags: UInt32
    /// The expiry a reader is told, µs since the epoch, 0 for none: the item's own, or when
    /// it turns older than `maxAge` (as `CacheItem.expiresAt`).
    public let expiresAt: Int64
    public let version: UInt64
    public let stale: Bool
    public let negative: Bool
    public let extended: UnsafeRawBufferPointer
    public let value: UnsafeRawBufferPointer
}

/// A caller's memo of the namespace it named last and that namespace's registry entry, so a
/// run of reads in one namespace neither copies the name nor takes the registry's lock. The
/// entry is looked up again whenever the registry changed (a flush gives a namespace a new
/// memory tag), so a memo never reads through a flushed tag. Not thread-safe: one per caller
/// (a connection).
public struct NamespaceMemo {
    var name: [UInt8] = []
    var entry: NamespaceRegistry.Entry? = nil
    /// `entry`'s tag and counters, read without a retain per request (`entry` keeps the
    /// counters alive).
    var tag: UInt32 = 0
    var counters: Unmanaged<NamespaceCounters>? = nil
    /// `NamespaceRegistry.changes` when `entry` was looked up; `.max`: never.
    var changes: UInt64 = .max
    public init() {}
}

/// Where a key's memory record will be looked for (`TieredCache.prefetchMemorySlot`), and
/// the memory tag its hash was taken under (`withMemoryHit` reuses the hash while the tag holds).
public struct MemoryPrefetch {
    let shard: Int
    let hash: UInt32
    let tag: UInt32
}

extension TieredCache {
    /// Prefetching for a batch of reads (the event loop's pipelined GETs): the misses of
    /// independent look-ups overlap instead of following one another (the index slot, then
    /// the record: two cache misses per look-up once the items outgrow the CPU's caches).
    /// Call `prefetchMemorySlot` for every key of the batch, then `prefetchMemoryRecord` for
    /// each result, then `withMemoryHit` for each key. Only hints: nothing is read or counted.
    /// Costs: a hash and a shard lock each. Nil when the key cannot be in memory.
    public func prefetchMemorySlot(namespace: UnsafeRawBufferPointer, key: UnsafeRawBufferPointer,
                                   memo: inout NamespaceMemo) -> MemoryPrefetch? {
        guard !key.isEmpty, key.count <= ItemLimits.maxKeyBytes, namespaceKnown(namespace, &memo) else { return nil }
        let (i, hash) = memory.shardIndex(tag: memo.tag, key: key)
        memory.withShard(i) { shard in
            shard.lock.lock()
            shard.prefetchSlot(hash)
            shard.lock.unlock()
        }
        return MemoryPrefetch(shard: i, hash: hash, tag: memo.tag)
    }

    /// The second step of prefetching: starts loading the record the slot points to.
    public func prefetchMemoryRecord(_ p: MemoryPrefetch) {
        memory.withShard(p.shard) { shard in
            shard.lock.lock()
            shard.prefetchRecord(p.hash)
            shard.lock.unlock()
        }
    }

    /// The registry's entry for `namespace` through `memo` (looked up again only when the
    /// name differs or the registry changed).
    /// True when the store knows it (`memo.tag` and `memo.counters` are then its own).
    @inline(__always)
    func namespaceKnown(_ namespace: UnsafeRawBufferPointer, _ memo: inout NamespaceMemo) -> Bool {
        guard namespace.count <= ItemLimits.maxNamespaceBytes else { return false }
        let changes = registry.changes.load(ordering: .acquiring)
        if memo.changes != changes || !memo.name.elementsEqual(namespace) {
            memo.name = [UInt8](namespace)
            let e = registry.lookup(memo.name)
            memo.entry = e
            memo.tag = e?.tag ?? 0
            memo.counters = e.map { .passUnretained($0.counters) }
            memo.changes = changes
        }
        return memo.counters != nil
    }

    /// The event loop's read of a live memory-tier item, in place: `body` runs with the item's
    /// fields and bytes while the shard's lock is held (it must be short: copy the bytes out,
    /// nothing more) and the result is true; false on a miss (nothing in memory, an expired
    /// item — removed, as `get` removes it —, a tombstone, a namespace the store does not
    /// know, a key or namespace out of bounds, or a closed store), counted nowhere: the
    /// caller then makes the full read, which counts it. A hit is counted as `get` counts it
    /// (the shard's and the namespace's hits, the record's access).
    ///
    /// `now` is the store clock's reading (µs) the caller took for this batch of requests
    /// (`clock.nowMicros()`); an item whose expiry or `maxAge` is at or before it is a miss.
    /// `prefetched`: what `prefetchMemorySlot` returned for this same key, if the caller has
    /// it; its hash is reused while the namespace's tag is the one it was taken under (a
    /// prefetch for another key would only make a miss: the probe compares the key).
    /// Costs: one hash of the key (none with `prefetched`), one lock, one probe; no allocation
    /// once `memo` names the namespace. `countHit` false: the hit is not counted (the caller
    /// may still discard it; `countMemoryHits` counts the ones it keeps).
    public func withMemoryHit(namespace: UnsafeRawBufferPointer, key: UnsafeRawBufferPointer, now: Int64,
                              memo: inout NamespaceMemo, prefetched: MemoryPrefetch? = nil, countHit: Bool = true,
                              _ body: (MemoryHitView) -> Void) -> Bool {
        guard !key.isEmpty, key.count <= ItemLimits.maxKeyBytes, !closed.load(ordering: .relaxed),
              namespaceKnown(namespace, &memo), let counters = memo.counters else { return false }
        let tag = memo.tag
        let (i, hash) = prefetched.flatMap { $0.tag == tag ? ($0.shard, $0.hash) : nil } ?? memory.shardIndex(tag: tag, key: key)
        let maxAgeMicros = maxAge.micros
        let hit = memory.withShard(i) { shard -> Bool in
            shard.lock.lock()
            defer { shard.lock.unlock() }
            guard let p = shard.live(tag: tag, key: key, hash: hash, now: now), let value = shard.valueView(p) else { return false }
            if countHit { shard.hits += 1 }
            let k = shard.keyLen(p), e = shard.extLen(p)
            let data = UnsafeRawPointer(shard.keyStart(p))
            let expiry = shard.expiry(p), version = shard.version(p), marks = shard.marks(p)
            var expiresAt = expiry
            if maxAgeMicros > 0 {
                // MaxAge.effectiveExpiry, without building an ItemState (a live record is no tombstone).
                let agedAt = Int64(clamping: version) &+ maxAgeMicros
                expiresAt = expiry == 0 ? agedAt : min(expiry, agedAt)
            }
            body(MemoryHitView(flags: shard.flags(p), expiresAt: expiresAt, version: version,
                               stale: marks & ItemMarks.stale != 0, negative: marks & ItemMarks.negative != 0,
                               extended: UnsafeRawBufferPointer(start: data + k, count: e),
                               value: value))
            return true
        }
        if hit && countHit { counters._withUnsafeGuaranteedRef { _ = $0.hits.add(1, ordering: .relaxed) } }
        return hit
    }

    /// Counts, as `withMemoryHit` does, the hits of `keys` read with `countHit: false` and kept.
    /// `memo` names their namespace (the reads filled it).
    public func countMemoryHits(_ keys: [[UInt8]], memo: NamespaceMemo) {
        guard let counters = memo.counters, !keys.isEmpty else { return }
        for k in keys {
            let i = k.withUnsafeBytes { memory.shardIndex(tag: memo.tag, key: $0).0 }
            memory.withShard(i) { shard in
                shard.lock.lock()
                shard.hits += 1
                shard.lock.unlock()
            }
        }
        counters._withUnsafeGuaranteedRef { _ = $0.hits.add(keys.count, ordering: .relaxed) }
    }
}
