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
        case quarantine(reason: String)
        /// Writes from the durability log, committed in one transaction together with `end`
        /// as the applied log position (a flush alone in its batch).
        case applyLog([LoggedWrite], end: UInt64?)
        /// Completes once everything queued before it has committed.
        case barrier
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
/// pays, each row checksummed.
///
/// Guarantees: a write's `done` runs only after its transaction committed (WAL,
/// `synchronous=NORMAL`: a SIGKILLed process loses nothing acknowledged); concurrent writers
/// share transactions (group commit, one writer thread); reads run on pooled reader
/// connections and never write (access times are buffered and flushed in batches); a row whose
/// checksum fails reads as a miss and is removed; a database that SQLite reports corrupt is
/// moved aside and replaced. Limits (count, bytes, age, free space) hold at write time.
///
/// Threads: the writer (every write, maintenance, the end of each checkpoint), the notifier
/// (completions that may block; `DiskJob.inline` ones run on the writer), the checkpoint
/// thread (copies the WAL into the database file beside the writer), and a quick_check thread
/// at open or after corruption. Costs: a commit is one transaction whatever its size (~20
/// syscalls: WAL frame writes and WAL locks), so throughput comes from batching; the counters
/// row is written about once a second, and recounted at the first open after a crash.
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
    private let log: @Sendable (String) -> Void
    private var lockFD: Int32 = -1

    // Writer state: touched only by the writer thread after `start()`.
    private var writer: SQLiteConnection?
    private var rowCount = 0
    /// The newest version ever committed, so a reopened store's clock starts past every
    /// version it holds. What the file holds is `persisted.version`, never less.
    private(set) var maxVersion: UInt64 = 0
    /// The counters as the file holds them. A commit writes the counters row only when it is
    /// due (see `writeCounters`), not every time: it would be one more page per commit.
    private var persisted = PersistedCounters()
    /// The file's row count is stale (the store was not closed cleanly): the writer counts
    /// the rows before its first write.
    private var needsRecount = false
    /// Whether the file held any row when it was opened (a cheap probe, exact after a crash).
    private(set) var openedWithRows = false
    /// The log position SQLite held every record before, when the file was opened.
    private(set) var logApplied: UInt64 = 0
    /// The applied log position of the last commit (writer thread).
    private var appliedCommitted: UInt64 = 0
    /// Called on the writer thread after a checkpoint copied the whole WAL into the database
    /// file and SQLite synced it: every log record before the position is now in the file
    /// itself, so the log segments before it may go.
    var onCheckpointed: ((UInt64) -> Void)?
    /// Bytes on disk when last measured, plus an upper bound of what commits added since, so
    /// a byte limit far away costs no measurement per commit.
    private var bytesEstimate = 0
    private var pageSize = 4096
    /// Whether the file can give free pages back (created with auto_vacuum=INCREMENTAL).
    private var incrementalVacuum = false
    private var sweepCursor: Int64 = 0
    /// Picks the rows sampled for eviction (writer thread).
    private var evictionSampler = SplitMix(seed: UInt64(truncatingIfNeeded: monotonicSeconds().bitPattern))
    private var lastMaintenance = 0.0

    private let queue = ConditionLock()
    private var pending: [DiskJob] = []
    private var stopping = false
    private var writerStarted = false
    /// A quick_check is running (started at open, or because a statement reported corruption).
    private let quickCheckRunning = Atomic<Bool>(false)
    private var batchPeak = 0.0
    /// Writes worth waiting for before a commit: three quarters of the recent peak batch.
    private var gatherTarget: Double { batchPeak >= 4 ? batchPeak * 0.9 : 0 }
    // Guarded by `queue`: what the writer thread is waiting for, so enqueue signals only then.
    private var writerIdle = false
    private var writerGathering = false
    private let stopped = Completion<Void>()

    // Completions run on a notifier thread, in commit order, so the writer thread spends its
    // time in SQLite rather than waking callers (and on two cores both run at once).
    private let notifyQueue = ConditionLock()
    private var notifications: [() -> Void] = []
    private var notifierStop = false
    private let notifierStopped = Completion<Void>()

    // Checkpoints. A `strata-ckpt` thread copies the WAL into the database file beside the
    // writer (a passive checkpoint, on its own connection); the writer then copies the few
    // frames appended meanwhile itself, after which its next transaction starts the WAL over.
    // The writer so stalls for a small copy instead of the whole WAL (a 16 MiB checkpoint on
    // the writer took ~30 ms: the p99 of durable sets under load).
    /// 0 idle, 1 the copier was asked or is copying, 2 it finished and the writer may finish.
    private let copyState = Atomic<Int>(0)
    private let copyQueue = ConditionLock()
    private var copyRequested = false   // guarded by copyQueue
    private var copyStop = false        // guarded by copyQueue
    private var copierStarted = false
    private let copierStopped = Completion<Void>()

    private let readerLock = Lock()
    private var idleReaders: [SQLiteConnection] = []
    private var readerEpoch = 0
    private var readerEpochOf: [ObjectIdentifier: Int] = [:]

    private let accessLock = Lock()
    private var accessBuffer: [AccessKey: Int64] = [:]
    struct AccessKey: Hashable { let ns: Int64; let key: [UInt8] }

    init(config: StoreConfiguration, clock: any Clock, registry: NamespaceRegistry) throws {
        self.config = config
        self.clock = clock
        self.registry = registry
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

    // MARK: Opening

    private func prepareDirectory() throws {
        var st = stat()
        if stat(directory, &st) != 0 {
            if mkdir(directory, 0o755) != 0 && errno != EEXIST {
                throw StoreError(.directory, "cannot create data directory \(directory): \(String(cString: strerror(errno)))")
            }
        } else if (st.st_mode & S_IFMT) != S_IFDIR {
            throw StoreError(.directory, "data directory \(directory) exists and is not a directory")
        }
        if access(directory, W_OK) != 0 {
            throw StoreError(.directory, "data directory \(directory) is not writable: \(String(cString: strerror(errno)))")
        }
        let lockPath = directory + "/LOCK"
        let fd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            throw StoreError(.directory, "cannot create lock file \(lockPath): \(String(cString: strerror(errno)))")
        }
        if strata_flock_exclusive_nonblocking(fd) != 0 {
            Glibc.close(fd)
            throw StoreError(.locked, "data directory \(directory) is in use by another process (lock file \(lockPath))")
        }
        lockFD = fd
    }

    private func openWriter() throws {
        do {
            writer = try openDatabase()
        } catch let e as SQLiteError where e.isCorruption {
            quarantineFiles(reason: "open failed: \(e.message)")
            writer = try openDatabase()
        } catch let e as SQLiteError {
            throw mapError(e, doing: "opening \(dbPath)")
        }
    }

    /// Opens (creating or migrating) the database and loads namespaces and counters.
    private func openDatabase() throws -> SQLiteConnection {
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
        // Namespaces and counters: a handful of rows, so open stays fast whatever the item count.
        let ns = try db.statement("SELECT id, name, generation FROM namespaces")
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
        bytesEstimate = try bytesOnDisk(db)
        return db
    }

    private func migrate(_ db: SQLiteConnection, from version: Int64) throws {
        // Version 0 is an empty file: create everything. 1 → 2 changes no tables (the marks
        // column gains bits) and 2 → 3 adds a counters row, so one idempotent script serves all.
        try db.execute("""
            BEGIN;
            CREATE TABLE IF NOT EXISTS namespaces(id INTEGER PRIMARY KEY, name BLOB NOT NULL UNIQUE, generation INTEGER NOT NULL DEFAULT 0);
            CREATE TABLE IF NOT EXISTS items(
                id INTEGER PRIMARY KEY,
                ns INTEGER NOT NULL, key BLOB NOT NULL, gen INTEGER NOT NULL,
                value BLOB NOT NULL, codec INTEGER NOT NULL, size INTEGER NOT NULL,
                flags INTEGER NOT NULL, ext BLOB NOT NULL, expiry INTEGER NOT NULL,
                version INTEGER NOT NULL, tombstone INTEGER NOT NULL, checksum INTEGER NOT NULL,
                access INTEGER NOT NULL);
            CREATE UNIQUE INDEX IF NOT EXISTS items_key ON items(ns, key);
            DROP INDEX IF EXISTS items_access;
            CREATE TABLE IF NOT EXISTS counters(name TEXT PRIMARY KEY, value INTEGER NOT NULL);
            INSERT OR IGNORE INTO counters(name, value) VALUES('rows', 0);
            INSERT OR IGNORE INTO counters(name, value) VALUES('log_applied', 0);
            PRAGMA user_version=3;
            COMMIT;
            """)
    }

    /// Moves the database files aside with a timestamped name and reports it.
    private func quarantineFiles(reason: String) {
        let stamp = clock.nowMicros() / 1000
        let target = "\(dbPath).corrupt-\(stamp)"
        for suffix in ["", "-wal", "-shm"] {
            rename(dbPath + suffix, target + suffix)
        }
        counters.quarantines.add(1, ordering: .relaxed)
        log("level=error event=disk_quarantined path=\(dbPath) moved_to=\(target) reason=\"\(reason)\"")
    }

    // MARK: Lifecycle

    func start() throws {
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
    private func startQuickCheck() {
        guard quickCheckRunning.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        let started = startThread(name: "strata-qcheck") { [self] in
            defer { quickCheckRunning.store(false, ordering: .releasing) }
            guard let db = try? SQLiteConnection(path: dbPath, readOnly: true) else { return }
            let rows = (try? db.textRows("PRAGMA quick_check")) ?? ["quick_check could not run"]
            if rows != ["ok"] {
                enqueue(DiskJob(.quarantine(reason: "quick_check: " + rows.prefix(3).joined(separator: "; ")), inline: true) { _ in })
            }
        }
        if !started { quickCheckRunning.store(false, ordering: .releasing) }
    }

    // MARK: Writer thread

    private func writerLoop() {
        if needsRecount { recountRows() }
        while true {
            queue.lock()
            while pending.isEmpty && !stopping {
                writerIdle = true
                queue.wait(seconds: config.maintenanceInterval)
                writerIdle = false
                if pending.isEmpty && !stopping {
                    queue.unlock()
                    maintenance(force: true)
                    queue.lock()
                }
            }
            if pending.isEmpty && stopping {
                queue.unlock()
                break
            }
            // Group commit: when far fewer writes wait than recent transactions held, the other
            // writers are probably about to send theirs; give them a moment (bounded by the
            // window) so one commit serves them all. A lone writer never waits.
            if !stopping && Double(pending.count) < gatherTarget && config.groupCommitWindow > 0 {
                let deadline = monotonicSeconds() + config.groupCommitWindow
                writerGathering = true
                while Double(pending.count) < gatherTarget && !stopping {
                    let left = deadline - monotonicSeconds()
                    if left <= 0 { break }
                    queue.wait(seconds: left)
                }
                writerGathering = false
            }
            let take = min(pending.count, config.maxBatch)
            // The recent peak decays, so the target follows the load down as well as up.
            batchPeak = max(Double(take), batchPeak * 0.95)
            let batch = Array(pending.prefix(take))
            pending.removeFirst(take)
            queue.unlock()
            runBatch(batch)
            checkpointIfDue()
            maintenance(force: false)
        }
        if copierStarted {
            copyQueue.withLock { copyStop = true; copyQueue.signal() }
            copierStopped.wait()
        }
        flushAccessTimes()
        if let w = writer {
            // A clean close leaves exact counters (and rows_exact=1, so the next open need not count).
            do {
                try w.beginImmediate()
                _ = try writeCounters(w, rows: rowCount, version: maxVersion, exact: true)
                try w.execute("UPDATE counters SET value=1 WHERE name='rows_exact'")
                try w.commit()
            } catch {
                w.rollback()
            }
            if let r = try? w.checkpoint(truncate: true) { checkpointed(r) }
        }
        writer = nil
        let notifierRunning = notifyQueue.withLock {
            notifierStop = true
            notifyQueue.broadcast()
            return notifierStarted
        }
        if notifierRunning { notifierStopped.wait() }
        stopped.fulfil(())
    }

    private var notifierStarted = false

    private func notifierLoop() {
        notifyQueue.withLock { notifierStarted = true }
        while true {
            notifyQueue.lock()
            while notifications.isEmpty && !notifierStop { notifyQueue.wait() }
            if notifications.isEmpty && notifierStop {
                notifyQueue.unlock()
                break
            }
            let batch = notifications
            notifications.removeAll(keepingCapacity: true)
            notifyQueue.unlock()
            for action in batch { action() }
        }
        notifierStopped.fulfil(())
    }

    /// Hands completions to the notifier thread (in order).
    private func deliver(_ actions: [() -> Void]) {
        guard !actions.isEmpty else { return }
        notifyQueue.lock()
        notifications.append(contentsOf: actions)
        notifyQueue.unlock()
        notifyQueue.signal()
    }

    private func finish(_ job: DiskJob, _ result: Result<(WriteResult, WriteEffect)?, StoreError>) {
        if job.inline { job.done(result) } else { deliver([{ job.done(result) }]) }
    }

    /// Post-commit actions collected while a batch runs.
    private struct Staged {
        /// For the notifier thread, in commit order.
        var completions: [() -> Void] = []
        /// Quick hand-offs the writer runs itself (`DiskJob.inline`), after the others are queued.
        var inlineCompletions: [() -> Void] = []
        mutating func complete(_ job: DiskJob, _ result: Result<(WriteResult, WriteEffect)?, StoreError>) {
            if job.inline { inlineCompletions.append { job.done(result) } } else { completions.append { job.done(result) } }
        }
        var rowDelta = 0
        /// Rows inserted or updated (for the bytes-on-disk estimate).
        var rows = 0
        var stored = 0
        var evicted = 0
        var maxVersion: UInt64 = 0
        /// At most what this batch adds on disk: its stored bytes plus four pages per row
        /// (table leaf, two index leaves, one split) — the bytes-on-disk estimate's step.
        func bytesBound(pageSize: Int) -> Int { stored + rows * 4 * pageSize }
    }

    private func runBatch(_ batch: [DiskJob]) {
        var writes: [DiskJob] = []
        for job in batch {
            switch job.kind {
            case .removeIfChecksum, .trim: writes.append(job)
            case let .applyLog(items, end):
                if !writes.isEmpty { commitGroup(writes); writes.removeAll() }
                commitLog(items, end: end, job: job)
            default:
                if !writes.isEmpty { commitGroup(writes); writes.removeAll() }
                runControl(job)
            }
        }
        if !writes.isEmpty { commitGroup(writes) }
    }

    /// One transaction for many writes; if it fails, each write is retried alone so one bad
    /// write cannot fail the others.
    private func commitGroup(_ jobs: [DiskJob]) {
        guard let db = writer else {
            for j in jobs { finish(j, .failure(StoreError(.io, "disk tier is not open"))) }
            return
        }
        var staged = Staged()
        var newCounters = persisted
        do {
            try db.beginImmediate()
            for j in jobs { try apply(j, db, &staged) }
            try enforceLimits(db, &staged)
            newCounters = try writeCounters(db, rows: rowCount + staged.rowDelta,
                                            version: max(maxVersion, staged.maxVersion), exact: false)
            try db.commit()
        } catch {
            db.rollback()
            if jobs.count > 1 {
                for j in jobs { commitGroup([j]) }
            } else {
                handle(error, jobs: jobs)
            }
            return
        }
        adopt(staged, newCounters)
        deliver(staged.completions)
        for action in staged.inlineCompletions { action() }
    }

    /// Commits writes from the durability log and the applied position `end` in one
    /// transaction (all or nothing: on failure nothing is applied and the applier retries). A
    /// flush comes alone and changes the namespace's generation, in log order.
    private func commitLog(_ items: [LoggedWrite], end: UInt64?, job: DiskJob) {
        guard let db = writer else { return finish(job, .failure(StoreError(.io, "disk tier is not open"))) }
        do {
            for w in items {
                if let id = w.item, registry.lookup(id.namespace)?.diskID == nil { try createNamespace(db, id.namespace) }
            }
            if items.count == 1, let flush = items.first, flush.item == nil {
                try db.beginImmediate()
                switch flush.kind {
                case .flushNamespace(let name):
                    let u = try db.statement("UPDATE namespaces SET generation=generation+1 WHERE name=?")
                    u.bind(1, name)
                    try u.run()
                default:
                    try db.execute("UPDATE namespaces SET generation=generation+1")
                }
                if let end { try setLogApplied(db, end) }
                try db.commit()
                if let end { appliedCommitted = end }
                switch flush.kind {
                case .flushNamespace(let name):
                    let e = registry.lookup(name)
                    registry.bump(name, generation: e?.diskID != nil ? e!.generation + 1 : nil)
                default:
                    for name in registry.allNames() {
                        let g = registry.lookup(name).map { $0.diskID != nil ? $0.generation + 1 : $0.generation }
                        registry.bump(name, generation: g)
                    }
                }
                return finish(job, .success(nil))
            }
            var staged = Staged()
            let now = clock.nowMicros()
            try db.beginImmediate()
            for w in items {
                switch w.kind {
                case let .put(id, state, encoding, stored):
                    guard let ns = registry.lookup(id.namespace), let nsID = ns.diskID else {
                        throw StoreError(.io, "namespace could not be created")
                    }
                    // The LRU time is when the item was written or last read, not when it is applied.
                    let at = w.entry?.accessed.load(ordering: .relaxed) ?? now
                    if try writeRow(db, nsID: nsID, gen: ns.generation, key: id.key, state: state, encoded: (encoding, stored),
                                    now: at, mayExist: true) {
                        staged.rowDelta += 1
                    }
                    staged.maxVersion = max(staged.maxVersion, state.version)
                    staged.stored += stored.count
                    staged.rows += 1
                case .delete(let id):
                    guard let nsID = registry.lookup(id.namespace)?.diskID else { continue }
                    try deleteRow(db, nsID: nsID, key: id.key)
                    staged.rowDelta -= db.changes
                default:
                    throw StoreError(.io, "internal: a flush in a batch of writes")
                }
                counters.writes.add(1, ordering: .relaxed)
            }
            try enforceLimits(db, &staged)
            let newCounters = try writeCounters(db, rows: rowCount + staged.rowDelta, version: max(maxVersion, staged.maxVersion), exact: false)
            if let end { try setLogApplied(db, end) }
            try db.commit()
            if let end { appliedCommitted = end }
            adopt(staged, newCounters)
            finish(job, .success(nil))
        } catch {
            db.rollback()
            let e = (error as? SQLiteError).map { mapError($0, doing: "applying the log") } ?? (error as? StoreError) ?? StoreError(.io, "\(error)")
            counters.writeErrors.add(1, ordering: .relaxed)
            finish(job, .failure(e))
            if let s = error as? SQLiteError, s.isCorruption {
                quarantineAndReopen(reason: "SQLite reported corruption while applying the log: \(s.message)")
            }
        }
    }

    private func setLogApplied(_ db: SQLiteConnection, _ end: UInt64) throws {
        let s = try db.statement("UPDATE counters SET value=? WHERE name='log_applied'")
        s.bind(1, Int64(bitPattern: end))
        try s.run()
    }

    /// Commits `items` with the applied position `end` (see `commitLog`) and waits for it.
    func applyLog(_ items: [LoggedWrite], end: UInt64?) -> StoreError? {
        let done = Completion<Result<(WriteResult, WriteEffect)?, StoreError>>()
        enqueue(DiskJob(.applyLog(items, end: end), inline: true) { done.fulfil($0) })
        if case .failure(let e) = done.wait() { return e }
        return nil
    }

    /// After a commit: the writer's counts take what the transaction did.
    private func adopt(_ staged: Staged, _ newCounters: PersistedCounters) {
        rowCount += staged.rowDelta
        maxVersion = max(maxVersion, staged.maxVersion)
        persisted = newCounters
        bytesEstimate += staged.bytesBound(pageSize: pageSize)
        counters.rows.store(rowCount, ordering: .relaxed)
        counters.commits.add(1, ordering: .relaxed)
        counters.evictions.add(staged.evicted, ordering: .relaxed)
    }

    private func handle(_ error: Error, jobs: [DiskJob]) {
        let e = (error as? SQLiteError).map { mapError($0, doing: "writing") } ?? (error as? StoreError) ?? StoreError(.io, "\(error)")
        counters.writeErrors.add(jobs.count, ordering: .relaxed)
        for j in jobs { finish(j, .failure(e)) }
        if let s = error as? SQLiteError, s.isCorruption {
            quarantineAndReopen(reason: "SQLite reported corruption while writing: \(s.message)")
        }
    }

    func mapError(_ e: SQLiteError, doing what: String) -> StoreError {
        if e.isFull { return StoreError(.diskFull, "disk full while \(what) (\(directory)); nothing was stored") }
        if e.isCorruption {
            // Damage a statement ran into: check the whole file now, and quarantine it if the
            // check fails, instead of answering errors until the next open.
            startQuickCheck()
            return StoreError(.corrupt, "database corrupt while \(what): \(e.message)")
        }
        return StoreError(.io, "\(what): \(e)")
    }

    private func createNamespace(_ db: SQLiteConnection, _ name: [UInt8]) throws {
        let ins = try db.statement("INSERT OR IGNORE INTO namespaces(name, generation) VALUES(?, 0)")
        ins.bind(1, name)
        try ins.run()
        let sel = try db.statement("SELECT id, generation FROM namespaces WHERE name=?")
        sel.bind(1, name)
        defer { sel.reset() }
        if try sel.step() {
            registry.setDisk(name: name, id: sel.int(0), generation: sel.int(1))
        }
    }

    /// What the counters row holds: rows (exact when written), the version reservation, and
    /// when rows was last written.
    struct PersistedCounters { var rows = 0; var version: UInt64 = 0; var at = 0.0 }

    /// How far ahead of the newest committed version `max_version` is written, so only a
    /// commit that passes the reservation (about once a second of clock time) writes it. After
    /// a crash the clock resumes from the reservation: versions jump ahead by at most this.
    static let versionReserve: UInt64 = 1_000_000

    /// Inside the open transaction, writes the counters that are due and returns what the file
    /// then holds (adopt it after COMMIT). `max_version` is written whenever `version` passes
    /// the reservation; `rows` at most once a second (the open after a crash recounts). With
    /// `exact` (clean close) both are written as they are.
    private func writeCounters(_ db: SQLiteConnection, rows: Int, version: UInt64, exact: Bool) throws -> PersistedCounters {
        var p = persisted
        if exact || version > p.version {
            p.version = exact ? version : version &+ Self.versionReserve
            let s = try db.statement("UPDATE counters SET value=? WHERE name='max_version'")
            s.bind(1, Int64(bitPattern: p.version))
            try s.run()
        }
        let now = monotonicSeconds()
        if rows != p.rows && (exact || now - p.at >= 1) {
            let s = try db.statement("UPDATE counters SET value=? WHERE name='rows'")
            s.bind(1, rows)
            try s.run()
            p.rows = rows
            p.at = now
        }
        return p
    }

    /// Counts the rows (after an unclean shutdown left the stored count stale) and stores the count.
    private func recountRows() {
        guard let db = writer else { return }
        do {
            let n = Int(try db.scalarInt("SELECT count(*) FROM items") ?? 0)
            try db.beginImmediate()
            rowCount = n
            let p = try writeCounters(db, rows: n, version: maxVersion, exact: true)
            try db.commit()
            persisted = p
            counters.rows.store(n, ordering: .relaxed)
            needsRecount = false
            log("level=info event=disk_rows_recounted path=\(dbPath) rows=\(n)")
        } catch {
            db.rollback()
            log("level=error event=disk_recount_failed path=\(dbPath) error=\"\(error)\"")
        }
    }

    private func apply(_ job: DiskJob, _ db: SQLiteConnection, _ staged: inout Staged) throws {
        switch job.kind {
        case let .removeIfChecksum(nsID, key, checksum):
            let s = try db.statement("DELETE FROM items WHERE ns=? AND key=? AND checksum=?")
            s.bind(1, nsID); s.bind(2, key); s.bind(3, checksum)
            try s.run()
            staged.rowDelta -= db.changes
            staged.complete(job, .success(nil))

        case let .trim(count, bytes):
            try evictLRU(db, &staged, untilCount: count, bytes: bytes)
            staged.complete(job, .success(nil))

        default:
            break
        }
    }

    struct FoundRow { var row: DiskRow; var gen: Int64; var checksum: Int64; var access: Int64 = 0 }

    /// Turns a row into item state, verifying the checksum and decoding the value when asked.
    /// Columns: gen, value, codec, size, flags, ext, expiry, version, tombstone, checksum, length.
    private func decodeRow(_ s: SQLiteStatement, key: [UInt8], withValue: Bool) -> FoundRow? {
        let encoding = ValueEncoding(rawValue: UInt8(truncatingIfNeeded: s.int(2))) ?? .raw
        let size = Int(s.int(3))
        let ext = s.bytes(5)
        var state = ItemState(value: [], flags: UInt32(truncatingIfNeeded: s.int(4)), extended: ext,
                              expiry: s.int(6), version: UInt64(bitPattern: s.int(7)), marks: UInt8(truncatingIfNeeded: s.int(8)))
        let checksum = s.int(9)
        if withValue {
            let ok: Bool = s.withBytes(1) { stored in
                let sum = ItemChecksum.compute(key: key, flags: state.flags, expiry: state.expiry, version: state.version,
                                               marks: state.marks, encoding: encoding, size: size,
                                               extended: ext, stored: stored)
                guard sum == checksum, let v = codec.decode(encoding, stored, size: size) else { return false }
                state.value = v
                return true
            }
            if !ok { return nil }
        }
        return FoundRow(row: DiskRow(state: state, encoding: encoding, storedSize: Int(s.int(10)), size: size),
                        gen: s.int(0), checksum: checksum)
    }

    /// Writes the row; true when it was new. With `mayExist` false the caller knows there is
    /// no row, so an INSERT does; otherwise one upsert (an INSERT OR IGNORE then an UPDATE
    /// cost a second statement and index search: 1 KiB overwrites measured ~10 µs more CPU
    /// per set than inserts).
    private func writeRow(_ db: SQLiteConnection, nsID: Int64, gen: Int64, key: [UInt8], state: ItemState,
                          encoded: (ValueEncoding, [UInt8]), now: Int64, mayExist: Bool) throws -> Bool {
        let checksum = encoded.1.withUnsafeBytes {
            ItemChecksum.compute(key: key, flags: state.flags, expiry: state.expiry, version: state.version,
                                 marks: state.marks, encoding: encoded.0, size: state.value.count,
                                 extended: state.extended, stored: $0)
        }
        if !mayExist {
            let ins = try db.statement("""
                INSERT OR IGNORE INTO items(gen, value, codec, size, flags, ext, expiry, version, tombstone, checksum, access, ns, key)
                VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)
                """)
            bindRow(ins, nsID: nsID, gen: gen, key: key, state: state, encoded: encoded, checksum: checksum, now: now)
            try ins.run()
            if db.changes == 1 { return true }
        }
        let upsert = try db.statement("""
            INSERT INTO items(gen, value, codec, size, flags, ext, expiry, version, tombstone, checksum, access, ns, key)
            VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)
            ON CONFLICT(ns, key) DO UPDATE SET gen=excluded.gen, value=excluded.value, codec=excluded.codec,
              size=excluded.size, flags=excluded.flags, ext=excluded.ext, expiry=excluded.expiry,
              version=excluded.version, tombstone=excluded.tombstone, checksum=excluded.checksum, access=excluded.access
            """)
        bindRow(upsert, nsID: nsID, gen: gen, key: key, state: state, encoded: encoded, checksum: checksum, now: now)
        db.lastInsertRowID = 0 // an upsert that updates leaves it at 0
        try upsert.run()
        return db.lastInsertRowID != 0
    }

    /// Binds a row's 13 columns in the order both write statements use.
    private func bindRow(_ s: SQLiteStatement, nsID: Int64, gen: Int64, key: [UInt8], state: ItemState,
                         encoded: (ValueEncoding, [UInt8]), checksum: Int64, now: Int64) {
        s.bind(1, gen); s.bind(2, encoded.1); s.bind(3, Int64(encoded.0.rawValue)); s.bind(4, state.value.count)
        s.bind(5, Int64(state.flags)); s.bind(6, state.extended); s.bind(7, state.expiry)
        s.bind(8, Int64(bitPattern: state.version)); s.bind(9, Int64(state.marks)); s.bind(10, checksum)
        s.bind(11, now / 1_000_000); s.bind(12, nsID); s.bind(13, key)
    }

    private func deleteRow(_ db: SQLiteConnection, nsID: Int64, key: [UInt8]) throws {
        let s = try db.statement("DELETE FROM items WHERE ns=? AND key=?")
        s.bind(1, nsID); s.bind(2, key)
        try s.run()
    }

    // MARK: Limits

    func freeSpace() -> Int {
        if let probe = config.freeSpaceProbe { return probe() }
        var st = statvfs()
        guard statvfs(directory, &st) == 0 else { return Int.max }
        return Int(st.f_bavail) * Int(st.f_frsize)
    }

    private func walBytes() -> Int {
        var st = stat()
        return stat(dbPath + "-wal", &st) == 0 ? Int(st.st_size) : 0
    }

    /// Pages in use (not free) plus the WAL.
    /// Bytes on disk: every page of the database file (free pages included) plus the WAL. A
    /// file that cannot return free pages (made without auto-vacuum) counts pages in use, or
    /// evicting could never bring it under the limit.
    private func bytesOnDisk(_ db: SQLiteConnection) throws -> Int {
        var pages = Int(try db.scalarInt("PRAGMA page_count") ?? 0)
        if !incrementalVacuum { pages -= Int(try db.scalarInt("PRAGMA freelist_count") ?? 0) }
        return pages * pageSize + walBytes()
    }

    private func enforceLimits(_ db: SQLiteConnection, _ staged: inout Staged) throws {
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
    private func evictLRU(_ db: SQLiteConnection, _ staged: inout Staged, untilCount: Int, bytes: Int) throws {
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
    /// per row to evict, read in runs of 16 from random rowids — and the oldest of them go
    /// (Redis's approximated LRU). A table of at most `exactEvictionRows` rows is read whole,
    /// so a small store evicts in exact LRU order. Writer thread.
    private func deleteLeastRecentlyUsed(_ db: SQLiteConnection, _ n: Int, rows: Int) throws -> Int {
        guard n > 0 else { return 0 }
        var candidates: [Int64: Int64] = [:] // id → access
        if rows <= Self.exactEvictionRows {
            let all = try db.statement("SELECT id, access FROM items")
            defer { all.reset() }
            while try all.step() { candidates[all.int(0)] = all.int(1) }
        } else {
            let maxID = try db.scalarInt("SELECT max(id) FROM items") ?? 0
            guard maxID > 0 else { return 0 }
            let want = min(8 * n, 1 << 20)
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

    // MARK: Control jobs

    private func runControl(_ job: DiskJob) {
        guard writer != nil else { finish(job, .failure(StoreError(.io, "disk tier is not open"))); return }
        if case .quarantine(let reason) = job.kind { quarantineAndReopen(reason: reason) }
        finish(job, .success(nil))
    }

    /// Replaces a corrupt database with a fresh one while the store keeps running.
    private func quarantineAndReopen(reason: String) {
        writer = nil
        readerLock.withLock {
            idleReaders.removeAll()
            readerEpoch += 1
        }
        quarantineFiles(reason: reason)
        registry.forgetDisk()
        rowCount = 0
        do {
            writer = try openDatabase()
        } catch {
            log("level=error event=disk_reopen_failed path=\(dbPath) error=\"\(error)\"")
        }
    }

    // MARK: Checkpoints

    /// After a batch: starts the copier when the WAL reached `walLimit`, finishes its work
    /// once it is done, and copies everything itself when the copier cannot keep up.
    private func checkpointIfDue() {
        guard let db = writer else { return }
        let limit = max(16, config.walLimit / pageSize)
        let frames = db.walFrames
        switch copyState.load(ordering: .acquiring) {
        case 0 where frames >= limit:
            if copierStarted {
                copyState.store(1, ordering: .releasing)
                copyQueue.withLock { copyRequested = true; copyQueue.signal() }
            } else {
                if let r = try? db.checkpoint(truncate: false) { checkpointed(r) }
                counters.writerCheckpoints.add(1, ordering: .relaxed)
            }
        case 1 where frames >= 4 * limit:
            // The copier fell far behind (a slow disk).
            if let r = try? db.checkpoint(truncate: false) { checkpointed(r) }
            counters.writerCheckpoints.add(1, ordering: .relaxed)
        case 2:
            // Copies what was appended while the copier ran; the next transaction then finds
            // the whole WAL in the database file and starts it over. (Always, even when little
            // was appended: a complete checkpoint is what lets the log's segments go.)
            if let r = try? db.checkpoint(truncate: false) { checkpointed(r) }
            copyState.store(0, ordering: .releasing)
        default:
            break
        }
    }

    /// After a checkpoint by the writer: when it copied every frame, SQLite synced the database
    /// file, so every commit so far (and the log position it recorded) is in the file itself.
    private func checkpointed(_ r: (frames: Int, copied: Int)) {
        if r.frames >= 0 && r.copied == r.frames { onCheckpointed?(appliedCommitted) }
    }

    private func copierLoop() {
        while true {
            copyQueue.lock()
            while !copyRequested && !copyStop { copyQueue.wait() }
            if copyStop {
                copyQueue.unlock()
                break
            }
            copyRequested = false
            copyQueue.unlock()
            copyWAL()
            counters.walCopies.add(1, ordering: .relaxed)
            copyState.store(2, ordering: .releasing)
        }
        copierStopped.fulfil(())
    }

    /// Passive checkpoints on a connection of its own (opened per run: cheap next to the copy,
    /// and always on the current file), each followed by a flush of the database file, until
    /// a pass finds little new. SQLite syncs the database file only when a checkpoint reaches
    /// the end of the WAL — here, the writer's short one — which would otherwise flush all of
    /// this copy while the writer waits. Measured (1 KiB durable sets, 50 connections, one
    /// 16 MiB checkpoint every ~115 ms): the writer's part 2–2.5 ms instead of ~30 ms.
    private func copyWAL() {
        // mustExist: during a quarantine the file is briefly gone; the copier must not create it.
        guard let db = try? SQLiteConnection(path: dbPath, mustExist: true) else { return }
        try? db.execute("PRAGMA synchronous=NORMAL")
        var before = 0
        for _ in 0..<6 {
            guard let (_, copied) = try? db.checkpoint(truncate: false) else { break }
            syncDatabaseFile()
            // Each pass copies what arrived during the one before; stop once that is little.
            if copied - before <= 256 { break }
            before = copied
        }
    }

    private func syncDatabaseFile() {
        let fd = open(dbPath, O_RDONLY | O_CLOEXEC)
        if fd >= 0 {
            _ = fdatasync(fd)
            Glibc.close(fd)
        }
    }

    // MARK: Maintenance

    private func maintenance(force: Bool) {
        let now = monotonicSeconds()
        guard force || now - lastMaintenance >= config.maintenanceInterval else { return }
        lastMaintenance = now
        guard let db = writer else { return }
        flushAccessTimes()
        do {
            try sweepStep(db)
            let freePages = Int(try db.scalarInt("PRAGMA freelist_count") ?? 0)
            if freePages > 64 { try db.execute("PRAGMA incremental_vacuum(\(max(64, freePages / 4)))") }
            bytesEstimate = try bytesOnDisk(db)
            counters.bytesOnDisk.store(bytesEstimate, ordering: .relaxed)
        } catch let e as SQLiteError {
            if e.isCorruption { quarantineAndReopen(reason: "during maintenance: \(e.message)") }
        } catch {}
    }

    /// Looks at the next `sweepBatch` rows: drops expired items, expired tombstones, rows of
    /// flushed generations and (with an age limit) rows not accessed for too long.
    private func sweepStep(_ db: SQLiteConnection) throws {
        let now = clock.nowMicros()
        let ageCutoff = config.diskAgeLimit > 0 ? now / 1_000_000 - Int64(config.diskAgeLimit) : Int64.min
        let s = try db.statement("SELECT id, ns, gen, expiry, tombstone, access FROM items WHERE id > ? ORDER BY id LIMIT ?")
        s.bind(1, sweepCursor)
        s.bind(2, config.sweepBatch)
        var doomed: [Int64] = []
        var expired = 0, aged = 0, collected = 0
        var last: Int64 = sweepCursor
        var seen = 0
        while try s.step() {
            seen += 1
            let id = s.int(0)
            last = id
            let expiry = s.int(3)
            if expiry != 0 && expiry <= now {
                doomed.append(id); if s.int(4) & 1 == 0 { expired += 1 }
            } else if registry.generation(ofDiskID: s.int(1)) != s.int(2) {
                doomed.append(id); collected += 1
            } else if s.int(5) < ageCutoff {
                doomed.append(id); aged += 1
            }
        }
        s.reset()
        sweepCursor = seen < config.sweepBatch ? 0 : last
        guard !doomed.isEmpty else { return }
        try db.beginImmediate()
        do {
            let del = try db.statement("DELETE FROM items WHERE id=?")
            var removed = 0
            for id in doomed {
                del.bind(1, id)
                try del.run()
                removed += db.changes
            }
            let p = try writeCounters(db, rows: rowCount - removed, version: maxVersion, exact: false)
            try db.commit()
            persisted = p
            rowCount -= removed
            counters.rows.store(rowCount, ordering: .relaxed)
            counters.expirations.add(expired, ordering: .relaxed)
            counters.evictions.add(aged, ordering: .relaxed)
            counters.flushedRowsCollected.add(collected, ordering: .relaxed)
        } catch {
            db.rollback()
            throw error
        }
    }

    /// Writes buffered access times in one transaction (a read never costs a write).
    private func flushAccessTimes() {
        let batch: [AccessKey: Int64] = accessLock.withLock {
            let b = accessBuffer
            accessBuffer.removeAll(keepingCapacity: true)
            return b
        }
        guard !batch.isEmpty, let db = writer else { return }
        do {
            try db.beginImmediate()
            let s = try db.statement("UPDATE items SET access=? WHERE ns=? AND key=? AND access<?")
            for (k, t) in batch {
                s.bind(1, t); s.bind(2, k.ns); s.bind(3, k.key); s.bind(4, t)
                try s.run()
            }
            try db.commit()
        } catch {
            db.rollback()
        }
    }

    /// A read of an item still in the log's backlog: its row's access time moves too, in case
    /// the applier wrote the row just before the read (the entry's time covers the other case).
    func noteAccess(namespace: [UInt8], key: [UInt8], now: Int64) {
        guard let nsID = registry.lookup(namespace)?.diskID else { return }
        recordAccess(nsID: nsID, key: key, now: now)
    }

    private func recordAccess(nsID: Int64, key: [UInt8], now: Int64) {
        accessLock.withLock {
            if accessBuffer.count < 100_000 { accessBuffer[AccessKey(ns: nsID, key: key)] = now / 1_000_000 }
        }
    }

    // MARK: Reads (any thread)

    private func withReader<T>(_ body: (SQLiteConnection) throws -> T) throws -> T {
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
                enqueue(DiskJob(.quarantine(reason: "SQLite reported corruption while reading: \(e.message)"), inline: true) { _ in })
            }
            throw mapError(e, doing: "reading")
        }
    }

    /// The row for a key (tombstones included, expired rows excluded), or nil. A row whose
    /// checksum fails is reported, scheduled for removal, and read as nil.
    func read(namespace: [UInt8], key: [UInt8], withValue: Bool, countStats: Bool) throws -> DiskRow? {
        guard let ns = registry.lookup(namespace), let nsID = ns.diskID else {
            if countStats { counters.misses.add(1, ordering: .relaxed) }
            return nil
        }
        let now = clock.nowMicros()
        let found: FoundRow? = try withReader { db in
            let s = try db.statement(
                "SELECT gen, value, codec, size, flags, ext, expiry, version, tombstone, checksum, length(value), access FROM items WHERE ns=? AND key=?")
            s.bind(1, nsID)
            s.bind(2, key)
            defer { s.reset() }
            guard try s.step() else { return nil }
            if s.int(0) != ns.generation { return nil }
            if var row = decodeRow(s, key: key, withValue: withValue) {
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
        guard let f = found, f.row.state.expiry == 0 || f.row.state.expiry > now else {
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
                "SELECT key FROM items WHERE ns=? AND key>? AND gen=? AND tombstone&1=0 AND (expiry=0 OR expiry>?) ORDER BY key LIMIT ?")
            s.bind(1, nsID); s.bind(2, cursor ?? []); s.bind(3, ns.generation); s.bind(4, now); s.bind(5, limit)
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
            let s = try db.statement("""
                SELECT n.name, count(*), sum(i.size) FROM items i JOIN namespaces n ON i.ns = n.id
                WHERE i.gen = n.generation AND i.tombstone & 1 = 0 AND (i.expiry = 0 OR i.expiry > ?) GROUP BY n.name
                """)
            s.bind(1, now)
            defer { s.reset() }
            var out: [[UInt8]: (Int, Int)] = [:]
            while try s.step() { out[s.bytes(0)] = (Int(s.int(1)), Int(s.int(2))) }
            return out
        }
    }
}

/// What an offline check of a data directory found.
public struct DiskCheckReport: Sendable {
    public var rows = 0
    public var liveItems = 0
    public var tombstones = 0
    public var badRows = 0
    public var namespaces = 0
    /// `PRAGMA integrity_check` output ("ok" when clean).
    public var integrity: [String] = []
    /// The file's schema version, and what is wrong with it (nil when this build reads it).
    public var schemaVersion: Int64 = 0
    public var schemaProblem: String?
    /// The durability log: segment files, whole records in them, records SQLite has not
    /// applied yet (replayed at the next open), and bytes of a write cut short by a crash at
    /// the end (repaired at the next open: not a problem).
    public var logSegments = 0
    public var logRecords = 0
    public var logUnapplied = 0
    public var logTornBytes = 0
    /// Damage in the log (file, offset, reason): records there and after it are lost.
    public var logDamage: [String] = []
    public var isClean: Bool { badRows == 0 && integrity == ["ok"] && schemaProblem == nil && logDamage.isEmpty }
}

extension DiskTier {
    /// Verifies a stopped node's database: SQLite's integrity check, then every row's checksum
    /// and encoding. Refuses a directory a running process holds.
    static func check(directory: String, codec: ValueCodec = ValueCodec()) throws -> DiskCheckReport {
        let dbPath = directory + "/" + fileName
        guard access(dbPath, R_OK) == 0 else { throw StoreError(.directory, "no database at \(dbPath)") }
        let lockPath = directory + "/LOCK"
        let fd = open(lockPath, O_RDWR | O_CLOEXEC)
        if fd >= 0 {
            defer { Glibc.close(fd) }
            if strata_flock_exclusive_nonblocking(fd) != 0 {
                throw StoreError(.locked, "\(directory) is in use by a running node; stop it first")
            }
        }
        var report = DiskCheckReport()
        var applied: UInt64 = 0
        do {
            let db = try SQLiteConnection(path: dbPath, readOnly: true)
            report.schemaVersion = try db.scalarInt("PRAGMA user_version") ?? 0
            if report.schemaVersion < 1 || report.schemaVersion > schemaVersion {
                report.schemaProblem = "schema version \(report.schemaVersion) is not one this build reads (1…\(schemaVersion)): the header is damaged or the file is from a newer strata"
            }
            applied = UInt64(bitPattern: (try? db.scalarInt("SELECT value FROM counters WHERE name='log_applied'")) ?? 0)
            report.integrity = try db.textRows("PRAGMA integrity_check")
            report.namespaces = Int(try db.scalarInt("SELECT count(*) FROM namespaces") ?? 0)
            let s = try db.statement("SELECT gen, value, codec, size, flags, ext, expiry, version, tombstone, checksum, key FROM items")
            while try s.step() {
                report.rows += 1
                let key = s.bytes(10)
                let encoding = ValueEncoding(rawValue: UInt8(truncatingIfNeeded: s.int(2)))
                let size = Int(s.int(3))
                let marks = UInt8(truncatingIfNeeded: s.int(8))
                let tombstone = marks & ItemMarks.tombstone != 0
                let ok: Bool = s.withBytes(1) { stored in
                    guard let enc = encoding else { return false }
                    let sum = ItemChecksum.compute(key: key, flags: UInt32(truncatingIfNeeded: s.int(4)), expiry: s.int(6),
                                                   version: UInt64(bitPattern: s.int(7)), marks: marks,
                                                   encoding: enc, size: size, extended: s.bytes(5), stored: stored)
                    return sum == s.int(9) && codec.decode(enc, stored, size: size) != nil
                }
                if !ok { report.badRows += 1 } else if tombstone { report.tombstones += 1 } else { report.liveItems += 1 }
            }
        } catch let e as SQLiteError {
            report.integrity.append("sqlite: \(e.message)")
        }
        let log = LogFiles.verify(directory: directory + "/log", applied: applied)
        report.logSegments = log.segments
        report.logRecords = log.records
        report.logUnapplied = log.unapplied
        report.logTornBytes = log.tornBytes
        report.logDamage = log.damage
        return report
    }
}

extension TieredCache {
    /// Verifies a stopped store's data directory offline (see `DiskCheckReport`).
    public static func check(directory: String) throws -> DiskCheckReport {
        try DiskTier.check(directory: directory)
    }
}
