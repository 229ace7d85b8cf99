import StrataCore

/// A snapshot of a store's counters. Cheap to take except `namespaces`' disk usage, which
/// is an O(items) query and so is only filled by `stats(includeNamespaceUsage: true)`.
public struct StoreStats: Sendable {
    public struct Tier: Sendable {
        public var items = 0
        public var bytes = 0
        public var hits = 0
        public var misses = 0
        public var evictions = 0
        public var expirations = 0
    }
    /// One namespace: reads that found a live item or did not (`get` and everything built on
    /// it: GET, MGET, touch reads; not EXISTS or META), writes of every kind, and SETs of any
    /// mode (stored or not) — counted since the store opened, for namespaces it has seen.
    public struct Namespace: Sendable, Equatable {
        public var hits = 0
        public var misses = 0
        public var writes = 0
        public var sets = 0
        /// Reads plus SETs: what the top-N views rank namespaces by.
        public var traffic: Int { hits + misses + sets }
        public init() {}
        /// Live items and value bytes on disk (nil unless asked for).
        public var diskItems: Int?
        public var diskBytes: Int?
    }
    public var memory = Tier()
    /// `items` counts rows (tombstones and not-yet-collected rows included) plus writes still
    /// in the log; `bytes` is bytes on disk (database pages, WAL and log segments) as of the
    /// last maintenance step.
    public var disk = Tier()
    /// Value bytes written to disk before and after compression (cumulative).
    public var rawBytesWritten = 0
    public var storedBytesWritten = 0
    public var corruptItems = 0
    public var quarantines = 0
    public var commits = 0
    public var diskWrites = 0
    public var diskWriteErrors = 0
    public var queuedDiskJobs = 0
    public var writeBehindPending = 0
    /// Bytes of those writes (bounded by `maxWriteBehindBytes`), and the most at once since open.
    public var writeBehindPendingBytes = 0
    public var writeBehindPeakBytes = 0
    public var writeBehindTotal = 0
    public var flushedRowsCollected = 0
    /// Memory-tier compression (`StoreConfiguration.memoryCompression`): records holding a
    /// compressed value now, values stored compressed since open, dictionaries trained, the
    /// memory they hold (outside the memory limit), and trainings that found nothing to learn.
    public var memoryCompressedItems = 0
    public var memoryCompressedWrites = 0
    public var memoryDictionaries = 0
    public var memoryDictionaryBytes = 0
    public var memoryDictionaryFailures = 0
    /// WAL checkpoints done by the checkpoint thread, and by the writer alone (see DiskTier).
    public var walCopies = 0
    public var writerCheckpoints = 0
    public var namespaces: [[UInt8]: Namespace] = [:]
    /// The durability log: bytes of its segment files; the backlog (writes decided but not yet
    /// in SQLite: records, and their bytes in the log); `fdatasync` calls; writers that waited
    /// for room (the backlog at `logLimit`); records whose batch could not be written (their
    /// writers got the error); applies SQLite refused (retried); records applied to SQLite.
    public var logBytes = 0
    public var logBacklogRecords = 0
    public var logBacklogBytes = 0
    public var logSyncs = 0
    public var logBackpressureWaits = 0
    public var logWriteErrors = 0
    public var logApplyErrors = 0
    public var logAppliedRecords = 0

    /// Bytes saved by compression, as a ratio raw / stored (1 when nothing was written).
    public var compressionRatio: Double {
        storedBytesWritten == 0 ? 1 : Double(rawBytesWritten) / Double(storedBytesWritten)
    }
}

extension TieredCache {
    /// Counters of both tiers and (with `includeNamespaces`) of every namespace. Without the
    /// namespaces it costs a lock per memory shard and a few atomic loads — cheap enough for an
    /// event loop; with them, a snapshot of the registry and an entry per namespace (~140–300 ms
    /// at 100,000 namespaces: an outside review, sec5, froze a loop with pipelined memcached
    /// `stats` that built them for nothing).
    public func stats(includeNamespaces: Bool = true, includeNamespaceUsage: Bool = false) -> StoreStats {
        var s = StoreStats()
        for shard in memory.shards {
            shard.lock.withLock {
                s.memory.items += shard.count
                s.memory.bytes += shard.memoryBytes
                s.memory.hits += shard.hits
                s.memory.misses += shard.misses
                s.memory.evictions += shard.evictions
                s.memory.expirations += shard.expirations
                s.memoryCompressedItems += shard.compressedCount
            }
        }
        if let mc = memory.compression {
            s.memoryCompressedWrites = mc.compressedWrites.load(ordering: .relaxed)
            s.memoryDictionaries = mc.dictionaryCount
            s.memoryDictionaryBytes = mc.dictionaryBytes
            s.memoryDictionaryFailures = mc.failedTrainings.load(ordering: .relaxed)
        }
        let c = disk.counters
        // Rows in SQLite plus writes still in the log that will be rows (an overwrite of an
        // existing row counts twice until the applier has it).
        s.disk.items = c.rows.load(ordering: .relaxed) + log.index.rows
        s.disk.bytes = c.bytesOnDisk.load(ordering: .relaxed)
        s.disk.hits = c.hits.load(ordering: .relaxed)
        s.disk.misses = c.misses.load(ordering: .relaxed)
        s.disk.evictions = c.evictions.load(ordering: .relaxed)
        s.disk.expirations = c.expirations.load(ordering: .relaxed)
        s.rawBytesWritten = c.rawBytesWritten.load(ordering: .relaxed)
        s.storedBytesWritten = c.storedBytesWritten.load(ordering: .relaxed)
        s.corruptItems = c.corruptItems.load(ordering: .relaxed)
        s.quarantines = c.quarantines.load(ordering: .relaxed)
        s.commits = c.commits.load(ordering: .relaxed)
        s.diskWrites = c.writes.load(ordering: .relaxed)
        s.diskWriteErrors = c.writeErrors.load(ordering: .relaxed)
        s.flushedRowsCollected = c.flushedRowsCollected.load(ordering: .relaxed)
        s.walCopies = c.walCopies.load(ordering: .relaxed)
        s.writerCheckpoints = c.writerCheckpoints.load(ordering: .relaxed)
        s.queuedDiskJobs = disk.queuedJobs
        (s.writeBehindPending, s.writeBehindTotal) = writeBehindCounts
        (s.writeBehindPendingBytes, s.writeBehindPeakBytes) = (writeBehindBudget.bytes, writeBehindBudget.peakBytes)
        s.logBytes = log.files.bytesOnDisk
        (s.logBacklogRecords, s.logBacklogBytes) = log.backlog
        s.logSyncs = log.files.syncs.load()
        s.logBackpressureWaits = log.backpressureWaits.load()
        s.logWriteErrors = log.writeErrors.load()
        s.logApplyErrors = log.applyErrors.load()
        s.logAppliedRecords = log.appliedRecords.load()
        guard includeNamespaces else { return s }
        if includeNamespaceUsage { try? log.waitApplied(log.end) } // usage is counted in SQLite
        let usage = includeNamespaceUsage ? (try? disk.namespaceUsage()) ?? [:] : [:]
        for (name, e) in registry.snapshot() {
            var n = StoreStats.Namespace()
            n.hits = e.counters.hits.load(ordering: .relaxed)
            n.misses = e.counters.misses.load(ordering: .relaxed)
            n.writes = e.counters.writes.load(ordering: .relaxed)
            n.sets = e.counters.sets.load(ordering: .relaxed)
            if includeNamespaceUsage {
                n.diskItems = usage[name]?.items ?? 0
                n.diskBytes = usage[name]?.bytes ?? 0
            }
            s.namespaces[name] = n
        }
        return s
    }
}
