import StrataCore

/// The memory tier: `MemoryShard`s chosen by key hash, each with its own lock and its share
/// of the count and byte limits (so the whole tier never accounts more than its limits).
///
/// Thread-safe. A hit costs one hash, one lock, one probe and a copy of the value.
final class MemoryTier: @unchecked Sendable {
    let shards: [MemoryShard]
    /// `shards` again, unretained (`shards` keeps them alive as long as the tier): the event
    /// loop's reads reach a shard without a retain and release per request.
    private let unretained: UnsafeMutablePointer<Unmanaged<MemoryShard>>
    private let shardMask: Int
    /// Largest record (header + key + extended data + value) the tier will hold.
    let maxRecordBytes: Int
    /// Dictionaries of the namespaces whose values are held compressed (nil: none are).
    let compression: MemoryCompression?

    init(config: StoreConfiguration, clock: any Clock) {
        var n = 1
        while n < max(1, config.memoryShards) { n <<= 1 }
        let countShare = config.memoryCountLimit == Int.max ? Int.max : max(1, config.memoryCountLimit / n)
        let costShare = max(0, config.memoryCostLimit / n)
        // Records keep their last access in seconds mod 2^24 (MemoryShard+Record.swift).
        let age = Int64(min(max(config.memoryAgeLimit, 0), Double(1 << 23)))
        let maxAge = MaxAge(seconds: config.maxAge).micros
        shards = (0..<n).map { _ in
            let s = MemoryShard(countLimit: countShare, costLimit: costShare, ageLimitSeconds: age)
            s.maxAgeMicros = maxAge
            return s
        }
        shardMask = n - 1
        maxRecordBytes = costShare
        // Nothing to compress without a memory tier (--memory-limit 0).
        let exact = config.memoryCompressionExact
        compression = costShare == 0 ? nil : config.memoryCompression.map { includes in
            MemoryCompression(match: { includes($0) ? exact.contains($0) : nil },
                              sampleCount: config.memoryCompressionSamples, sampleBytes: config.memoryCompressionSampleBytes,
                              clock: clock, log: config.log)
        }
        for s in shards { s.compression = compression }
        unretained = .allocate(capacity: n)
        for (i, shard) in shards.enumerated() { (unretained + i).initialize(to: .passUnretained(shard)) }
    }

    deinit { unretained.deallocate() }

    /// Runs `body` with shard number `i` (`shardIndex`), without retaining it.
    @inline(__always)
    func withShard<T>(_ i: Int, _ body: (MemoryShard) -> T) -> T {
        unretained[i]._withUnsafeGuaranteedRef(body)
    }

    struct Location {
        let shard: MemoryShard
        let hash: UInt32
    }

    @inline(__always)
    func locate(tag: UInt32, key: [UInt8]) -> Location {
        let h = XXH64.hash(key, seed: UInt64(tag))
        return Location(shard: shards[Int(truncatingIfNeeded: h >> 48) & shardMask], hash: UInt32(truncatingIfNeeded: h))
    }

    @inline(__always)
    func locate(tag: UInt32, key: UnsafeRawBufferPointer) -> Location {
        let h = XXH64.hash(key, seed: UInt64(tag))
        return Location(shard: shards[Int(truncatingIfNeeded: h >> 48) & shardMask], hash: UInt32(truncatingIfNeeded: h))
    }

    /// The shard of a key hash (`locate`'s choice) by number, for a caller that keeps no reference.
    @inline(__always)
    func shardIndex(tag: UInt32, key: UnsafeRawBufferPointer) -> (shard: Int, hash: UInt32) {
        let h = XXH64.hash(key, seed: UInt64(tag))
        return (Int(truncatingIfNeeded: h >> 48) & shardMask, UInt32(truncatingIfNeeded: h))
    }

    /// Runs `body` with the shard's lock held and the key's raw bytes.
    @inline(__always)
    func with<T>(_ loc: Location, _ key: [UInt8], _ body: (MemoryShard, UnsafeRawBufferPointer) -> T) -> T {
        loc.shard.lock.withLock { key.withUnsafeBytes { body(loc.shard, $0) } }
    }

    func deleteEpoch(_ loc: Location) -> UInt64 { loc.shard.lock.withLock { loc.shard.deleteEpoch } }

    /// Stores a disk hit unless a delete ran in the shard since `epoch` or a newer version is
    /// there (compressed as `compression` says).
    func promote(_ loc: Location, tag: UInt32, key: [UInt8], item: ItemState, ifEpoch epoch: UInt64, now: Int64,
                 compression: NamespaceCompression?) {
        let compressed = compression?.encode(item.value)
        with(loc, key) { shard, k in
            guard shard.deleteEpoch == epoch else { return }
            shard.putIfNotOlder(tag: tag, key: k, hash: loc.hash, item: item, now: now, compressed: compressed)
        }
    }

    /// Keys of namespace `tag` (live items only), sorted bytewise. O(items) — an admin scan.
    func keys(tag: UInt32, now: Int64) -> [[UInt8]] {
        var out: [[UInt8]] = []
        for s in shards { s.lock.withLock { s.collectKeys(tag: tag, now: now, into: &out) } }
        return out.sorted { $0.lexicographicallyPrecedes($1) }
    }
}

extension MemoryShard {
    func collectKeys(tag: UInt32, now: Int64, into out: inout [[UInt8]]) {
        forEachRecord { p in
            guard tagMatches(p, tag), !isTombstone(p), !isExpired(p, now: now) else { return }
            out.append([UInt8](UnsafeRawBufferPointer(start: keyStart(p), count: keyLen(p))))
        }
    }
}
