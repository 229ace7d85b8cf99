#if canImport(Glibc)
import Glibc
#endif
import CLinux
import StrataCore
import Synchronization

/// A row as the disk tier read it.
struct DiskRow {
    var state: ItemState
    var encoding: ValueEncoding
    var storedSize: Int
    var size: Int
}

/// How much of the current row a write must see before deciding.
enum ExistingNeed {
    /// Nothing: an unconditional set with a node-assigned version always stores.
    case nothing
    case metadata
    case value
}

/// One unit of work for the writer thread.
final class DiskJob: @unchecked Sendable {
    enum Kind {
        case trim(count: Int, bytes: Int)
        case removeIfChecksum(nsID: Int64, key: [UInt8], checksum: Int64)
        /// `epoch`: the `readerEpoch` of the file the damage was seen in; a file replaced since
        /// (another report of the same damage got there first) is not moved aside again.
        case quarantine(reason: String, epoch: Int)
        /// Writes from the durability log, committed in one transaction together with `end`
        /// as the applied log position (a flush alone in its batch).
        case applyLog([LoggedWrite], end: UInt64?)
        /// Completes once everything queued before it has committed.
        case barrier
        /// Starts telling `watcher` of row changes (after listing every row to it).
        case watchRows(any DiskRowWatcher)
        /// Lists every row to the watcher again (`DiskRowWatcher.rowsReset`).
        case relistRows
    }
    let kind: Kind
    /// Called after the commit (or with the error): on the notifier thread, or with `inline`
    /// on the writer thread itself.
    let done: (Result<(WriteResult, WriteEffect)?, StoreError>) -> Void
    /// The completion is a quick hand-off (it never blocks and costs O(1), like posting to an
    /// event loop), so the writer runs it itself right after the commit: one thread hand-off
    /// less per commit than going through the notifier.
    let inline: Bool

    init(_ kind: Kind, inline: Bool = false, done: @escaping (Result<(WriteResult, WriteEffect)?, StoreError>) -> Void) {
        self.kind = kind
        self.inline = inline
        self.done = done
    }
}

/// Counters of the disk tier.
final class DiskCounters: Sendable {
    let hits = Atomic<Int>(0), misses = Atomic<Int>(0), evictions = Atomic<Int>(0), expirations = Atomic<Int>(0)
    let corruptItems = Atomic<Int>(0), quarantines = Atomic<Int>(0), rawBytesWritten = Atomic<Int>(0)
    let storedBytesWritten = Atomic<Int>(0), commits = Atomic<Int>(0), writes = Atomic<Int>(0)
    let rows = Atomic<Int>(0), bytesOnDisk = Atomic<Int>(0), writeErrors = Atomic<Int>(0)
    let flushedRowsCollected = Atomic<Int>(0)
    /// WAL copies by the checkpoint thread, and checkpoints the writer made alone (no copier,
    /// or the copier fell 4 × `walLimit` behind).
    let walCopies = Atomic<Int>(0), writerCheckpoints = Atomic<Int>(0)
    init() {}
}

/// The disk tier: every accepted item in one SQLite database, values zstd-compressed when that
/// pays, each row checksummed. Filled from the durability log: the applier hands it batches
/// of records (`applyLog`) that it commits in one transaction with the applied log position.
///
/// Guarantees: an applied batch and its `log_applied` position commit together (a replay after
/// a crash is exact); reads run on pooled reader connections and never write (access times are
/// buffered and flushed in batches); a row whose checksum fails reads as a miss and is
/// removed; a database that SQLite reports corrupt is moved aside and replaced. Limits (count,
/// bytes, age, free space) hold at every commit; eviction is by sampled LRU.
///
/// Threads: the writer (every commit, maintenance, the end of each checkpoint), the notifier
/// (completions that may block; `DiskJob.inline` ones run on the writer), the checkpoint
/// thread (copies the WAL into the database file beside the writer), and a quick_check thread
/// at open or after corruption. Costs: a commit is one transaction whatever its size (~20
/// syscalls: WAL frame writes and WAL locks); a 1 KiB row costs ~20 µs of CPU (its 4 KiB page
/// rewritten, then copied by the checkpoint); the counters row is written about once a second.
///
/// One type split by concern: this file (state, opening, lifecycle, the job queue), `+Writer`
/// (the writer thread and its transactions), `+Rows` (the row format), `+Limits` (limits and
/// eviction), `+Checkpoints`, `+Maintenance` (sweeps, access times), `+Reads`, `+Check` (the
/// offline check).
final class DiskTier: @unchecked Sendable {
    /// 1: first schema. 2: the `tombstone` column holds `ItemMarks` bits (stale and negative
    /// entries); a build that knows only 1 would read those as tombstones, so it must refuse.
    /// 3: writes are acknowledged at the durability log (`log/`), and the counters row
    /// `log_applied` says how far SQLite holds it; a build without the log would ignore the
    /// writes still in it, so it must refuse.
    static let schemaVersion: Int64 = 3
    static let fileName = "strata.db"

    let directory: String
    let dbPath: String
    let config: StoreConfiguration
    let clock: any Clock
    let codec: ValueCodec
    let registry: NamespaceRegistry
    let counters = DiskCounters()
    let log: @Sendable (String) -> Void
    var lockFD: Int32 = -1
    /// The data directory itself, locked beside `LOCK`: removing the lock file (a "stale lock"
    /// clean-up) let a second node open a running node's directory and both wrote one log
    /// segment (an outside review); the directory cannot be removed while the node runs.
    var directoryLockFD: Int32 = -1

    // Writer state: touched only by the writer thread after `start()`.
    var writer: SQLiteConnection?
    /// Anti-entropy's watcher of row changes (`DiskTier+RowWatch.swift`; writer thread only).
    var rowWatcher: (any DiskRowWatcher)?
    /// The writer connection the row triggers are on (nil: none yet, or the file was replaced).
    var rowWatchConnection: ObjectIdentifier?
    /// The watcher may have been told changes that did not commit: relist after the batch.
    var rowWatchDirty = false
    /// The open transaction's row changes, told to the watcher when it commits (dropped when it
    /// rolls back, so a failed batch — a full disk — costs no relisting).
    var rowChanges: [RowChange] = []
    /// Changes were told at a commit that may yet fail (SQLite then rolls back): set by the
    /// commit hook, cleared by the next change.
    var rowChangesTold = false
    var rowCount = 0
    /// The newest version ever committed, so a reopened store's clock starts past every
    /// version it holds. What the file holds is `persisted.version`, never less.
    var maxVersion: UInt64 = 0
    /// The counters as the file holds them. A commit writes the counters row only when it is
    /// due (see `writeCounters`), not every time: it would be one more page per commit.
    var persisted = PersistedCounters()
    /// The file's row count is stale (the store was not closed cleanly): the writer counts
    /// the rows before its first write.
    var needsRecount = false
    /// Whether the file held any row when it was opened (a cheap probe, exact after a crash).
    private(set) var openedWithRows = false
    /// The log position SQLite held every record before, when the file was opened.
    private(set) var logApplied: UInt64 = 0
    /// The writer is applying the log's records to a fresh file after a quarantine.
    var refilling = false
    /// The applied log position of the last commit (writer thread).
    var appliedCommitted: UInt64 = 0
    /// Called on the writer thread after a checkpoint copied the whole WAL into the database
    /// file and SQLite synced it: every log record before the position is now in the file
    /// itself, so the log segments before it may go.
    var onCheckpointed: ((UInt64) -> Void)?
    /// Seconds since the memory tier last served (namespace, key), or nil when it does not hold
    /// it: the idle-age trim keeps a row read from memory meanwhile (its reads never reach the
    /// disk's access time).
    var memoryIdleSeconds: (([UInt8], [UInt8]) -> Int64?)?
    /// Bytes of the durability log's segment files (they count against the byte limit).
    var logBytes: (() -> Int)?
    /// The bytes of durability log segments a complete checkpoint would let go with everything
    /// up to the given log position applied (segments go whole: none until the segment after
    /// the oldest one starts at or before it).
    var logReleasable: ((UInt64) -> UInt64)?
    /// Told the bytes of the database's free pages after each maintenance step.
    var freePageBytes: ((Int) -> Void)?
    /// How the byte limit is shared (see `DiskBudget`).
    let budget: DiskBudget
    /// Bytes on disk when last measured, plus an upper bound of what commits added since, so
    /// a byte limit far away costs no measurement per commit.
    var bytesEstimate = 0
    var pageSize = 4096
    /// Whether the file can give free pages back (created with auto_vacuum=INCREMENTAL).
    var incrementalVacuum = false
    var sweepCursor: Int64 = 0
    /// Picks the rows sampled for eviction (writer thread).
    var evictionSampler = SplitMix(seed: UInt64(truncatingIfNeeded: monotonicSeconds().bitPattern))
    /// The writes the limits removed lately, on a store whose replicas compare versions
    /// (`expiredItemsLeaveTombstones`); nil otherwise.
    let evicted: EvictedVersions?
    var lastMaintenance = 0.0

    let queue = ConditionLock()
    var pending: [DiskJob] = []
    var stopping = false
    var writerStarted = false
    /// A quick_check is running (started at open, or because a statement reported corruption).
    let quickCheckRunning = Atomic<Bool>(false)
    var batchPeak = 0.0
    /// The writer thread's: when its last batch ran and when it last gave its cache back
    /// (`releaseCacheIfIdle`; monotonic seconds).
    var lastBatchAt = 0.0, cacheReleasedAt = 0.0
    /// The writer's page cache in bytes after its last batch or release (tests).
    let writerCacheBytes = Atomic<Int>(0)
    /// Writes worth waiting for before a commit: three quarters of the recent peak batch.
    var gatherTarget: Double { batchPeak >= 4 ? batchPeak * 0.9 : 0 }
    // Guarded by `queue`: what the writer thread is waiting for, so enqueue signals only then.
    var writerIdle = false
    var writerGathering = false
    let stopped = Completion<Void>()

    // Completions run on a notifier thread, in commit order, so the writer thread spends its
    // time in SQLite rather than waking callers (and on two cores both run at once).
    let notifyQueue = ConditionLock()
    var notifications: [() -> Void] = []
    var notifierStop = false
    let notifierStopped = Completion<Void>()

    // Checkpoints. A `strata-ckpt` thread copies the WAL into the database file beside the
    // writer (a passive checkpoint, on its own connection); the writer then copies the few
    // frames appended meanwhile itself, after which its next transaction starts the WAL over.
    // The writer so stalls for a small copy instead of the whole WAL (a 16 MiB checkpoint on
    // the writer took ~30 ms: the p99 of durable sets under load).
    /// 0 idle, 1 the copier was asked or is copying, 2 it finished and the writer may finish.
    let copyState = Atomic<Int>(0)
    let copyQueue = ConditionLock()
    var copyRequested = false   // guarded by copyQueue
    var copyStop = false        // guarded by copyQueue
    var copierStarted = false
    let copierStopped = Completion<Void>()

    let readerLock = Lock()
    var idleReaders: [SQLiteConnection] = []
    var readerEpoch = 0
    /// A quarantined database is being replaced (guarded by `readerLock`).
    var reopening = false
    /// The files were wholly resident at the last `checkResidency` (DiskTier+Inline.swift).
    let residentFlag = Atomic<Bool>(false)
    var readerEpochOf: [ObjectIdentifier: Int] = [:]

    /// Bounds the memory of large values being read at once (`maxLargeReadBytes`).
    let largeReads: ByteGate

    let accessLock = Lock()
    var accessBuffer: [AccessKey: Int64] = [:]
    struct AccessKey: Hashable { let ns: Int64; let key: [UInt8] }

    init(config: StoreConfiguration, budget: DiskBudget? = nil, clock: any Clock, registry: NamespaceRegistry) throws {
        self.config = config
        self.budget = budget ?? DiskBudget(config)
        self.largeReads = ByteGate(limit: config.maxLargeReadBytes)
        self.clock = clock
        self.registry = registry
        self.evicted = config.expiredItemsLeaveTombstones ? EvictedVersions() : nil
        self.codec = ValueCodec(level: config.compressionLevel)
        self.directory = config.directory
        self.dbPath = config.directory + "/" + Self.fileName
        let sink = config.log ?? { line in
            var l = line + "\n"
            l.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
        }
        self.log = sink
        try prepareDirectory()
        try openWriter()
    }

    var notifierStarted = false

    // MARK: Opening

    /// Opens (creating or migrating) the database and loads namespaces and counters.
    func openDatabase() throws -> SQLiteConnection {
        let db = try SQLiteConnection(path: dbPath)
        let version = try db.scalarInt("PRAGMA user_version") ?? 0
        if version > Self.schemaVersion {
            throw StoreError(.schemaTooNew, "\(dbPath) has schema version \(version); this build reads up to \(Self.schemaVersion). Use a newer strata or another data directory.")
        }
        if version == 0 {
            // Must come before anything writes the file's first page (journal_mode=WAL does).
            try db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        }
        try db.execute("PRAGMA journal_mode=WAL")
        try db.execute("PRAGMA synchronous=NORMAL")
        // Debian builds SQLite with SECURE_DELETE: every page a delete frees (a large value's
        // overflow pages) would be zeroed and written to the WAL — a 16 MiB budget's trim of
        // 1.6 MiB wrote 2.2 MiB of WAL. FAST zeroes deleted content only in pages that are
        // written anyway.
        try db.execute("PRAGMA secure_delete=FAST")
        try db.execute("PRAGMA journal_size_limit=\(config.walLimit * 4)") // see StoreConfiguration.walLimit
        try db.execute("PRAGMA cache_size=-\(config.writerCacheKiB)")
        try db.execute("PRAGMA mmap_size=\(config.mmapBytes)")
        pageSize = Int(try db.scalarInt("PRAGMA page_size") ?? 4096)
        incrementalVacuum = try db.scalarInt("PRAGMA auto_vacuum") == 2
        // The writer checkpoints (see checkpointIfDue), not SQLite after each commit.
        db.trackWalFrames()
        if version < Self.schemaVersion {
            try migrate(db, from: version)
        }
        if let cap = config.sqliteMaxPageCount { try db.execute("PRAGMA max_page_count=\(cap)") }
        // A namespace no row refers to any more (flushed and swept, or every item deleted) is
        // forgotten: it no longer counts toward `--max-namespaces` (README: a namespace is known
        // "until the node restarts without it on disk"; an outside review found flushed ones
        // kept for good). One index probe per namespace. On a full disk this may fail: they are
        // then kept until a later start.
        try? db.execute("DELETE FROM namespaces WHERE NOT EXISTS (SELECT 1 FROM items WHERE items.ns = namespaces.id)")
        // Namespaces and counters: a handful of rows, so open stays fast whatever the item count.
        let ns = try db.prepared("SELECT id, name, generation FROM namespaces")
        while try ns.step() {
            registry.setDisk(name: ns.bytes(1), id: ns.int(0), generation: ns.int(2))
        }
        ns.reset()
        rowCount = Int(try db.scalarInt("SELECT value FROM counters WHERE name='rows'") ?? 0)
        // rows_exact is 1 only between a clean close and the next open; files written before it
        // existed kept `rows` exact at every commit.
        try db.execute("""
            INSERT OR IGNORE INTO counters(name, value) VALUES('max_version', 0);
            INSERT OR IGNORE INTO counters(name, value) VALUES('rows_exact', 1);
            """)
        maxVersion = UInt64(bitPattern: try db.scalarInt("SELECT value FROM counters WHERE name='max_version'") ?? 0)
        logApplied = UInt64(bitPattern: try db.scalarInt("SELECT value FROM counters WHERE name='log_applied'") ?? 0)
        appliedCommitted = logApplied
        needsRecount = try db.scalarInt("SELECT value FROM counters WHERE name='rows_exact'") == 0
        // Not from the row count: after a crash it may still say 0 (it is recounted later).
        openedWithRows = try db.scalarInt("SELECT EXISTS(SELECT 1 FROM items)") == 1
        try db.execute("UPDATE counters SET value=0 WHERE name='rows_exact'")
        persisted = PersistedCounters(rows: rowCount, version: maxVersion, at: monotonicSeconds())
        counters.rows.store(rowCount, ordering: .relaxed)
        bytesEstimate = try bytesInUse(db)
        return db
    }

    // MARK: Lifecycle

    func start() throws {
        // The directory's bytes from the first STATS on (the writer's maintenance updates them;
        // a scrape right after a start read 0 for about half a second: an outside review).
        if let db = writer {
            if let b = try? bytesOnDisk(db) { counters.bytesOnDisk.store(b, ordering: .relaxed) }
            if let b = try? bytesInUse(db) { bytesEstimate = b }
        }
        guard startThread(name: "strata-writer", { [self] in writerLoop() }) else {
            throw StoreError(.io, "cannot start the disk writer thread")
        }
        guard startThread(name: "strata-notify", { [self] in notifierLoop() }) else {
            queue.withLock { stopping = true; queue.broadcast() }
            stopped.wait()
            throw StoreError(.io, "cannot start the disk notifier thread")
        }
        // Without the copier the writer checkpoints alone (checkpointIfDue's fallback).
        copierStarted = startThread(name: "strata-ckpt") { [self] in copierLoop() }
        writerStarted = true
        if config.quickCheckOnOpen { startQuickCheck() }
    }

    /// Drains every queued write, flushes access times, checkpoints and closes.
    func close() {
        queue.lock()
        if stopping { queue.unlock(); return }
        stopping = true
        queue.broadcast()
        queue.unlock()
        // (the writer re-checks `stopping` after every wait)
        if writerStarted { stopped.wait() }
        readerLock.withLock { idleReaders.removeAll() }
        if lockFD >= 0 { Glibc.close(lockFD); lockFD = -1 }
        if directoryLockFD >= 0 { Glibc.close(directoryLockFD); directoryLockFD = -1 }
    }

    func enqueue(_ job: DiskJob) {
        queue.lock()
        if stopping {
            queue.unlock()
            job.done(.failure(StoreError(.closed, "store is closed")))
            return
        }
        pending.append(job)
        // Wake the writer only when it sleeps for work, or when a group it waits for is full;
        // after unlocking, so it does not wake only to wait for this lock (as in Completion).
        let wake = writerIdle || (writerGathering && Double(pending.count) >= gatherTarget)
        queue.unlock()
        if wake { queue.signal() }
    }

    var queuedJobs: Int { queue.withLock { pending.count } }

    /// Runs `PRAGMA quick_check` on its own thread unless one is already running; a failed
    /// check quarantines the file (the writer moves it aside and starts a fresh one).
    func startQuickCheck() {
        guard quickCheckRunning.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        let started = startThread(name: "strata-qcheck") { [self] in
            defer { quickCheckRunning.store(false, ordering: .releasing) }
            let epoch = readerLock.withLock { readerEpoch }
            guard let db = try? SQLiteConnection(path: dbPath, readOnly: true) else { return }
            let rows = (try? db.textRows("PRAGMA quick_check")) ?? ["quick_check could not run"]
            if rows != ["ok"] {
                enqueue(DiskJob(.quarantine(reason: "quick_check: " + rows.prefix(3).joined(separator: "; "), epoch: epoch), inline: true) { _ in })
            }
        }
        if !started { quickCheckRunning.store(false, ordering: .releasing) }
    }

}
