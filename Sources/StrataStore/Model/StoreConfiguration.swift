import StrataCore

/// Everything a `TieredCache` can be told. Limits are named for what they bound (YYCache's
/// `countLimit`, `costLimit`, `ageLimit`, `freeDiskSpaceLimit`); 0 or nil means unlimited.
public struct StoreConfiguration: Sendable {
    /// Where the database, its WAL and the lock file live. Created when missing.
    public var directory: String

    // Memory tier.
    public var memoryCountLimit: Int = Int.max
    /// Bytes the memory tier may account (record headers + keys + values, rounded to slab chunks,
    /// and the S3-FIFO ghost queues).
    public var memoryCostLimit: Int = 256 << 20
    /// Items not read or written for this many seconds are dropped from memory (0 = no limit):
    /// when an insert makes room and by the background sweeper (YYMemoryCache's `ageLimit`). A
    /// trim by last access, not a promise to readers: see `maxAge` for that. Limits above
    /// 2^23 s (97 days) act as 2^23 s.
    public var memoryAgeLimit: Double = 0
    /// Shards of the memory tier (a power of two); each has its own lock and its share of the limits.
    public var memoryShards: Int = 16
    /// The namespaces whose memory records hold their values compressed with a zstd
    /// dictionary trained from the namespace's first values (`MemoryCompression`); nil: none.
    public var memoryCompression: (@Sendable ([UInt8]) -> Bool)? = nil
    /// Of those, the names given exactly (not by a pattern): they always get a dictionary;
    /// the namespaces a pattern matched share `MemoryCompression.maxDictionaries`.
    public var memoryCompressionExact: Set<[UInt8]> = []
    /// Namespaces the store tracks at most: a write that would add one more is refused
    /// (`tooManyNamespaces`). Each costs ~0.5 KiB outside the memory limit.
    public var maxNamespaces = 1_000_000
    /// The values (and bytes) a namespace's dictionary is trained from.
    public var memoryCompressionSamples = 1_000
    public var memoryCompressionSampleBytes = 128 << 10

    // Disk tier.
    public var diskCountLimit: Int = Int.max
    /// Bytes on disk: every page of the database file (free pages are returned to the file
    /// system first, then items are evicted in `diskEviction` order), its WAL and the
    /// durability log's segments. The WAL and log sizes are fitted to it (`DiskBudget`).
    public var diskByteLimit: Int = 4 << 30
    /// When the byte limit is reached, items are evicted down to this fraction of it (less
    /// the log's backlog room) in one batch: SDWebImage trims to half (0.5).
    public var diskTrimTo: Double = 0.9
    /// Which items go first when a disk limit (bytes or count) is reached.
    public var diskEviction: DiskEviction = .lru
    /// Items not read or written for this many seconds are trimmed from disk by the background
    /// sweep (0 = no limit; YYDiskCache's `ageLimit`). A trim by last access, not a promise to
    /// readers: see `maxAge` for that.
    public var diskAgeLimit: Double = 0
    /// Keep at least this many bytes free on the disk holding `directory` by evicting items
    /// (YYCache's `freeDiskSpaceLimit`; 0 = no floor).
    public var freeDiskSpaceLimit: Int = 0
    /// New data is refused (`disk_full`) while the disk holding `directory` has less than this
    /// free; deletes, flushes and checkpoints still run in it (see `SpaceFloor`). nil: 1/16
    /// of the filesystem, from 256 KiB to 64 MiB; 0: no floor.
    public var freeSpaceFloor: Int? = nil
    /// Reader connections kept open for reuse. Size it to the threads that read at once: a
    /// read that finds none idle opens a connection and closes it afterwards (tens of µs plus
    /// an mmap/munmap of the file each time). Idle readers cost little (reads go through mmap).
    public var diskReaders: Int = 8
    /// Check once a second whether the database and WAL are wholly in the page cache, so
    /// callers may read the disk tier on their own thread (`TieredCache.diskReadsMayRunInline`).
    public var diskReadsInline = true
    /// SQLite page cache of the writer connection, in KiB: it holds the pages the applier's
    /// batches change. Pages changed since the last checkpoint are read from the WAL file (the
    /// mapping covers only the database file), so a cache that keeps them saves those reads:
    /// at workload 2 (100,000 keys, batches of 8,192 rows) the writer spent 1,700 CPU ticks
    /// with 32 MiB against 2,160 with 2 MiB. Filled only while writes come; the writer gives
    /// it back (and trims the heap) after `writerIdleRelease` seconds without a batch, so an
    /// idle node does not keep it.
    public var writerCacheKiB: Int = 32768
    /// See `writerCacheKiB`.
    public var writerIdleRelease: Double = 2
    /// SQLite page cache of each reader connection, in KiB.
    public var readerCacheKiB: Int = 16384
    /// Values over 1 MiB stored are read from disk at most this many bytes at a time (their
    /// stored bytes plus the value made from them), so a burst of reads of large values holds
    /// about this much memory, not one copy per reading thread. One read larger than it still
    /// runs, alone.
    public var maxLargeReadBytes: Int = 64 << 20
    /// Asked before a large value is read (after its turn at `maxLargeReadBytes`), with the
    /// bytes the large reads in flight would hold with it and whether it would be the only
    /// one: while it says no, the read waits (up to 5 s). A node says no while its unsent
    /// output is over `--max-output-bytes`, or would be with the reads in flight — unless the
    /// read would be alone — so the reads admitted together cannot pile past it.
    public var largeReadsMayStart: (@Sendable (_ held: Int, _ alone: Bool) -> Bool)? = nil
    /// Told the size of a large value just read, before its turn at `maxLargeReadBytes` ends
    /// (so before the next large read may start). A node counts it as unsent output until the
    /// answer made from it is counted, so `largeReadsMayStart` sees it with no gap.
    public var largeReadDone: (@Sendable (Int) -> Void)? = nil
    /// Bytes of the database SQLite may memory-map (reads without a copy through `pread`).
    public var mmapBytes: Int = 1 << 30
    /// A disk read updates the item's access time (the disk tier's LRU order) only when the
    /// stored one is at least this many seconds old, so reads do not become writes.
    public var accessResolution: Double = 60
    /// zstd level for values (1 = fast).
    public var compressionLevel: Int32 = 1
    /// Most writes committed in one transaction (group commit).
    public var maxBatch: Int = 512
    /// Longest the writer waits for more writes to share a transaction, in seconds, when far
    /// fewer are queued than went into recent ones (a lone writer never waits). 0: commit what
    /// is queued at once; writes arriving during a commit share the next one. Measured with
    /// the checkpoint thread in place (strata-bench store, 64 writers, 1 KiB, alternating
    /// builds): 2 ms → 40–45k sets/s in batches of ~40; 0 → 48k/s in batches of 13–20. (Before
    /// checkpoints left the writer, the window had grown batches 20 → 35 for a small gain.)
    public var groupCommitWindow: Double = 0
    /// The WAL is checkpointed when it reaches about this size (copied by a checkpoint thread
    /// beside the writer, finished by the writer). The file is truncated only past 4 × this:
    /// writes go on during the copy, so each cycle ends a little past the limit, and cutting
    /// the file back every cycle made it shrink and regrow (block allocation queued behind
    /// the copy's flush) — 1 KiB durable sets on a 200 MB store, p99 12 → 5.5 ms without it. 16 MiB rather than SQLite's 4 MiB: pages rewritten by every
    /// commit (index interiors, right edges, counters) are copied once per checkpoint, so
    /// fewer checkpoints mean fewer page writes. Measured on a node (50 connections): 1 KiB
    /// durable sets 10.2k → 12.9k/s, 90/10 mix p99 10.1 → 4.2 ms; the price is a longer stall
    /// at each checkpoint (durable-set p99 17 → 38 ms) and up to 16 MiB more on disk.
    public var walLimit: Int = 16 << 20
    // The durability log (`<directory>/log/`): a disk write is acknowledged once its record is
    // in the log file; SQLite is filled behind it.
    /// When the log is forced to the device (see `FsyncPolicy`): `.everysec` by default, as
    /// Redis's `appendfsync`.
    public var fsync: FsyncPolicy = .everysec
    /// Most bytes of log records decided but not yet in SQLite (the backlog). Past it, writers
    /// wait for the applier (back-pressure). Sized so a full backlog replays at open in well
    /// under a second: 16 MiB of small records (168k) with 1M items in SQLite answered the
    /// first request 0.43–0.74 s after exec; 64 MiB (680k records) took 1.8–3.8 s
    /// (`bench/open-backlog.sh`). Fitted to the disk limit (`DiskBudget`).
    public var logLimit: Int = 16 << 20
    /// A log segment file is closed and a new one started past this size; segments SQLite has
    /// absorbed (applied and checkpointed) are deleted.
    public var logSegmentBytes: Int = 16 << 20
    /// Most log records the applier commits to SQLite in one transaction. A small row dirties
    /// about a page, so 8,192 of them write up to ~32 MiB of WAL (twice the default
    /// `walLimit`; a small disk limit's smaller log backlog makes its batches smaller). The WAL
    /// can pass 4 × `walLimit` by one such transaction: there the writer waits for the
    /// checkpoint thread's pass to end and checkpoints the rest itself (the log absorbs the
    /// pause).
    public var maxApplyBatch: Int = 8192
    /// How long (seconds) an acknowledged write may wait in the durability log before the
    /// applier takes it into SQLite, so batches grow and rows that share a page share its
    /// write: 100 B sets over 100,000 keys cost the SQLite writer about half as much per row in
    /// batches of 8,192 as in the 5 ms batches before (bench/RESULTS.md, workload 2). A batch
    /// goes sooner when `maxApplyBatch` records or a quarter of `logLimit` wait, when someone
    /// waits for SQLite (FLUSH, `sync`, trims, a writer held by `logLimit`) and at close.
    /// Reads never wait for it: the log's index answers for records not yet applied. A crash
    /// replays them from the log.
    public var applyDelay: Double = 1
    /// For tests: the applier waits this long (seconds) before each batch, so a backlog builds
    /// up (a slow disk) and crash tests find unapplied records in the log. 0 in production.
    public var applierDelayForTests: Double = 0
    /// For tests: while it says yes, every write to the durability log fails as on a full disk
    /// (ENOSPC), without filling one.
    public var logWritesFailForTests: (@Sendable () -> Bool)? = nil
    /// Seconds an open retries applying a FLUSH replayed from the log while SQLite cannot write
    /// (a full disk) before it fails with DISK_FULL (`TieredCache.applyReplayedFlushes`).
    public var replayedFlushWait: Double = 30

    /// Rows looked at per background sweep step (expiry, flushed namespaces, age).
    public var sweepBatch: Int = 1000
    /// Seconds between background maintenance steps when idle.
    public var maintenanceInterval: Double = 0.1
    /// Run `PRAGMA quick_check` in the background after open.
    public var quickCheckOnOpen = true

    // Items.
    /// Items whose write is more than this many seconds old are never returned, in either tier
    /// (0 = no limit; SDWebImage's `maxCacheAge`). An item's age counts from its version — the
    /// write's time in µs from the node's hybrid logical clock, or the caller's version for a
    /// replicated write (a cluster client's clock), so replicas agree on it. It holds for items
    /// already stored when the limit is set or lowered: reads, EXISTS, META, SCAN and the
    /// conditions of writes (add, replace, cas, counters) treat such an item as expired, and the
    /// background sweeps remove it. TOUCH, INVALIDATE and counters give a new version, so a new
    /// age. Tombstones keep their own lifetime (`tombstoneTTL`). Unlike `defaultTTL`, which
    /// only gives new writes an expiry, it costs nothing per write and nothing on disk.
    public var maxAge: Double = 0
    public var maxItemBytes: Int = ItemLimits.defaultMaxItemBytes
    /// TTL applied when a write says `.storeDefault` (nil = never expire).
    public var defaultTTL: Double? = nil
    /// Write-behind writes queued for the disk before further ones wait for their commit.
    public var maxWriteBehindPending: Int = 100_000
    /// Bytes of write-behind writes (value, key, namespace, 64 for the record) answered and not
    /// yet in the log file; past it a write-behind write waits for the log like a durable one
    /// (so a value larger than this is never written behind).
    public var maxWriteBehindBytes: Int = 64 << 20
    /// Caller-supplied versions (µs) more than this many seconds ahead of the clock are refused.
    public var maxVersionSkew: Double = 24 * 3600
    /// How long a versioned remove's tombstone is kept.
    public var tombstoneTTL: Double = 24 * 3600
    /// An expired item's row becomes a tombstone of its version when swept, kept `tombstoneTTL`
    /// past its expiry, instead of going at once: a replica that missed the write that gave the
    /// expiry can then not bring its older copy back by anti-entropy (a `--cluster` node; an
    /// outside review, cl19: every such key read its pre-TTL value for good). Off: the row goes.
    public var expiredItemsLeaveTombstones = false

    /// A hard cap on the database's pages (`PRAGMA max_page_count`); a write beyond it fails
    /// exactly as on a full disk (`disk_full`). For tests of the full-disk path; nil = none.
    public var sqliteMaxPageCount: Int? = nil
    /// For tests: replaces the real free-space reading (statvfs) of `directory`.
    public var freeSpaceProbe: (@Sendable () -> Int)? = nil
    /// Where the store reports events (a log replayed or a row count redone after an unclean
    /// stop, a quarantined file, corruption); one structured line each (`level=… event=…`).
    /// Nil: standard error. `{ _ in }` silences them.
    public var log: (@Sendable (String) -> Void)? = nil

    public init(directory: String) { self.directory = directory }
}
