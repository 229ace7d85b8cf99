import StrataCore
import Synchronization

/// The durability point of the disk tier (DESIGN.md "Durability"): a write is decided, its
/// record appended to an in-memory batch, the batch written to the log files with one
/// `write()` by the flusher thread (group commit), and the writer acknowledged; an applier
/// thread then fills SQLite from the written records in large transactions, recording the
/// applied position in the same transaction.
///
/// Guarantees:
/// - Records reach the file in the order they were appended (so per key, in decision order),
///   and a writer waiting in `waitDurable` returns only once its record is in the file (with
///   `.always`, on the device): no acknowledged write is lost to a process crash.
/// - Reads see every decided write: `index` holds the newest unapplied write of each item
///   until SQLite has committed it.
/// - The backlog (decided, not yet in SQLite) stays under `limitBytes`: `waitForRoom` blocks
///   writers past it until the applier catches up (counted in `backpressureWaits`).
/// - A batch that cannot be written (a full disk) fails every writer waiting on it and on the
///   records appended after it, and their writes are undone in the index (and, through
///   `undo`, in memory): nothing that failed stays visible.
/// - Records replayed at open are in the index before the store answers anything.
///
/// Threads: `strata-logflush` (writes batches), `strata-applier` (fills SQLite through
/// `apply`). Cost per write: one record encoded into the batch under one lock (~1 µs per KiB);
/// per batch one `write()` (and one `fdatasync` with `.always`).
final class DurabilityLog: @unchecked Sendable {
    let files: LogFiles
    let index: PendingIndex
    let limitBytes: Int
    let maxApplyBatch: Int
    /// See `StoreConfiguration.applierDelayForTests`.
    var applierDelay: Double = 0
    /// How often the applier looks at written records while some wait (seconds).
    static let applyPoll = 0.005
    /// How long a written record may wait for the applier (seconds; see
    /// `StoreConfiguration.applyDelay`). Someone waiting for SQLite, a backlog of
    /// `maxApplyBatch` records or of a quarter of `limitBytes`, and `close` cut it short.
    var applyDelay: Double
    let clock: any Clock
    let logLine: @Sendable (String) -> Void
    /// One `log_write_failed` line a second (a full disk fails every batch: an outside review,
    /// dur6, counted 22,000 lines a minute — on the disk that was short of space, if the logs go
    /// there); the rest are counted in the next line and in `log_write_errors`.
    let writeFailureLines = LogRateLimiter(interval: 1)

    let cond = ConditionLock()
    // Guarded by `cond`.
    var buffer: [UInt8] = []
    var buffered: [LoggedWrite] = []
    var next: UInt64
    var written: UInt64
    var applied: UInt64
    /// Written records the applier has not taken yet (it takes them all at once: a swap).
    var toApply: [LoggedWrite] = []
    /// Records the applier has taken and not yet applied (they are in its own array).
    var applying = 0
    var durableWaiters: [(end: UInt64, done: (StoreError?) -> Void)] = []
    var appliedWaiters: [(end: UInt64, done: (StoreError?) -> Void)] = []
    var stopping = false
    var flushing = false
    /// After a failed write that kept write-behind records: no batch is written before this
    /// (monotonic seconds), so a full disk is retried every `retryInterval`, not in a spin.
    var retryAt: Double = 0
    /// The last batch could not be written (a full disk): writers do not wait for log room
    /// meanwhile (`waitForRoom`) — the backlog cannot drain, and kept write-behind records
    /// hold it up (an outside review, dur8: every write hung while 2.5 MB of them were kept).
    var writeFailing = false { didSet { writeFailingSeen.store(writeFailing, ordering: .relaxed) } }
    /// `writeFailing` and `stuck != nil` as lock-free hints, so every durable write does not
    /// take the log's lock to learn that nothing is failing (`failingWithKeptRecords`, `refusal`).
    let writeFailingSeen = Atomic<Bool>(false), stuckSeen = Atomic<Bool>(false)
    static let retryInterval = 0.1
    /// When `close` began: kept write-behind records are retried for `stopPatience` after it,
    /// then given up (logged).
    var stopBegan: Double? = nil
    static let stopPatience = 5.0
    // The fallback flusher's own condition (so writes by others never wake it).
    let flusherCond = ConditionLock()
    var flusherSignalled = false
    var flusherStop = false
    // The applier's own condition: it polls every `applyPoll` while records wait, and is
    // woken only by those who wait for it (FLUSH, sync, back-pressure) and by `close`.
    let applierCond = ConditionLock()
    var applierSignalled = false
    var applierGaveUp = false
    /// Why the applier cannot go on (a full disk), until a batch applies again.
    var stuck: StoreError? { didSet { stuckSeen.store(stuck != nil, ordering: .relaxed) } }

    /// Commits writes to SQLite and records `end` as the applied position in the same
    /// transaction (no position when nil: writes applied ahead of their turn); nil on success.
    /// Set before `start`.
    var apply: ([LoggedWrite], UInt64?) -> StoreError? = { _, _ in StoreError(.io, "no applier") }
    /// Undoes a write that never reached the file (the memory tier drops the item).
    /// Undoes a write whose record could not be written, in memory (the index is rolled back
    /// already). `keptToo`: a kept write-behind write of the same key is in the failed batch —
    /// the index holds it, so memory must not hold an older state.
    var undo: (_ write: LoggedWrite, _ keptToo: Bool) -> Void = { _, _ in }

    let flusherStopped = Completion<Void>()
    let applierStopped = Completion<Void>()
    var threads = 0

    let backpressureWaits = Counter(), writeErrors = Counter(), applyErrors = Counter()
    let appliedRecords = Counter(), applyBatches = Counter()
    /// The newest version among the records replayed at open.
    private(set) var replayedMaxVersion: UInt64 = 0
    private(set) var replayedRecords = 0
    /// The namespaces of the records replayed at open.
    private(set) var replayedNamespaces: Set<[UInt8]> = []
    /// Where the last flush record replayed at open ends (nil: none was replayed).
    private(set) var replayedFlushEnd: UInt64?

    /// Opens the log in `directory`, replaying every record at or after `applied` (the position
    /// SQLite recorded) into the index and the applier's queue; `decode` turns a put's stored
    /// bytes back into the value.
    init(directory: String, policy: FsyncPolicy, applied: UInt64, limitBytes: Int, segmentBytes: Int,
         maxApplyBatch: Int = 8192, applyDelay: Double = 0, clock: any Clock, log: @escaping @Sendable (String) -> Void,
         decode: (ValueEncoding, [UInt8], Int) -> [UInt8]?) throws {
        self.limitBytes = max(64 << 10, limitBytes)
        self.maxApplyBatch = max(1, maxApplyBatch)
        self.applyDelay = max(0, applyDelay)
        self.clock = clock
        self.logLine = log
        var replayed: [LoggedWrite] = []
        var maxVersion: UInt64 = 0
        var undecodable = 0
        let index = PendingIndex()
        self.index = index
        let now = clock.nowMicros()
        files = try LogFiles(directory: directory, segmentBytes: segmentBytes, policy: policy, from: applied, clock: clock) { position, record in
            guard var w = LoggedWrite.reading(record, position: position, end: position + UInt64(record.encodedSize), decode: decode) else {
                undecodable += 1
                return
            }
            switch w.kind {
            case let .put(id, state, encoding, stored):
                let e = PendingIndex.Entry(position: position, state: state, encoding: encoding, storedSize: stored.count, at: now)
                w.entry = e
                index.put(id, e)
                maxVersion = max(maxVersion, state.version)
            case .delete(let id):
                let e = PendingIndex.Entry(position: position, state: nil, encoding: .raw, storedSize: 0, at: now)
                w.entry = e
                index.put(id, e)
            case .flushNamespace, .flushAll: break
            }
            replayed.append(w)
        }
        // Replayed entries are in the file: nothing to roll back.
        for w in replayed { if let id = w.item { index.settle(id, position: w.position) } }
        toApply = replayed
        replayedRecords = replayed.count
        replayedNamespaces = Set(replayed.compactMap { $0.item?.namespace })
        replayedFlushEnd = replayed.last { $0.item == nil }?.end
        replayedMaxVersion = maxVersion
        next = files.end
        written = files.end
        self.applied = min(applied, files.end)
        if let cut = files.report.endsBeforeApplied {
            // The log ends before what SQLite applied from it: its last segment was cut short
            // (by hand, or a file system that lost it) — no crash does this. Records after the
            // applied position, acknowledged writes SQLite did not have yet, may be gone.
            log("level=error event=log_shorter_than_applied log_end=\(cut) applied=\(applied) effect=\"the log was cut after SQLite applied up to \(applied): writes acknowledged after that position, if any, are lost\"")
        }
        for d in files.report.damage {
            log("level=error event=log_damaged file=\(d.file) offset=\(d.offset) reason=\"\(d.reason)\" action=\"records from here on were not replayed; the files were kept as *.damaged-*\"")
        }
        if files.report.truncatedBytes > 0 {
            log("level=warn event=log_torn_tail_truncated bytes=\(files.report.truncatedBytes)")
        }
        if undecodable > 0 {
            log("level=error event=log_undecodable_values count=\(undecodable)")
        }
        if !replayed.isEmpty {
            // Writes acknowledged before the last stop and not yet in SQLite (after a crash, or a
            // stop that did not wait for the applier): they are applied before the node answers.
            log("level=info event=log_replayed records=\(replayed.count) bytes=\(replayed.last!.end - replayed.first!.position)")
        }
    }

    /// Starts the flusher and the applier.
    func start() throws {
        guard startThread(name: "strata-logflush", { [self] in flusherLoop() }) else {
            throw StoreError(.io, "cannot start the log flusher thread")
        }
        threads = 1
        guard startThread(name: "strata-applier", { [self] in applierLoop() }) else {
            throw StoreError(.io, "cannot start the log applier thread")
        }
        threads = 2
    }

    /// Writes what is buffered, applies what was written (as far as SQLite allows), stops the
    /// threads and closes the files. What could not be applied stays in the log for the next
    /// open. Idempotent.
    func close() {
        cond.withLock { stopping = true; stopBegan = monotonicSeconds(); cond.broadcast() }
        flusherCond.withLock { flusherStop = true }
        flusherCond.signal()
        wakeApplier()
        if threads >= 1 { flusherStopped.wait() }
        if threads >= 2 { applierStopped.wait() }
        threads = 0
        files.close()
    }

    // MARK: Writers

    /// The last batch could not be written and kept write-behind records wait for the next try
    /// (every `retryInterval`): a durable write now would fail the same way after changing
    /// memory and the index for ~0.1 s — so it is refused before it changes anything (an outside
    /// review, dur11: a delete waiting to be refused was visible, and a write-behind delete of
    /// the key meanwhile answered NOT_FOUND and deleted nothing). Kept records come first in
    /// `buffered` (they are appended again before anything newer).
    var failingWithKeptRecords: Bool {
        writeFailingSeen.load(ordering: .relaxed) && cond.withLock { writeFailing && buffered.first?.answered == true }
    }

    /// Set while SQLite refuses the backlog for lack of space: new values are refused with it
    /// (removals still go through: they are what frees space).
    var refusal: StoreError? { stuckSeen.load(ordering: .relaxed) ? cond.withLock { stuck } : nil }

    /// Whether a writer of a record of about `bytes` would pass `waitForRoom` without waiting
    /// now (a hint: others may fill the room first).
    var hasRoom: Bool { hasRoom(for: 0) }
    /// Also true while the log cannot write or SQLite refuses the backlog: no room would come,
    /// so nothing is held for it — a value then gets DISK_FULL (or, write-behind, is kept), as
    /// `waitForRoom` lets it (an outside review, dur9: SETs held at the event loop for room never
    /// got an answer while kept write-behind writes filled the log's room).
    func hasRoom(for bytes: Int) -> Bool { cond.withLock { roomFor(UInt64(max(0, bytes))) || writeFailing || stuck != nil } }

    /// Bytes promised to large writers that passed `waitForRoom` and have not appended yet.
    private var promised: UInt64 = 0

    /// A record at least this large is promised its room (see `waitForRoom`).
    var largeRecord: Int { max(1, limitBytes / 16) }

    private func roomFor(_ bytes: UInt64) -> Bool {
        let taken = next - applied + promised
        if bytes < UInt64(largeRecord) { return taken <= UInt64(limitBytes) }
        return taken == 0 || taken + bytes <= UInt64(limitBytes)
    }

    /// Blocks while the backlog leaves no room for a record of about `bytes` (back-pressure:
    /// the applier catches up). A small record waits while the backlog is over the limit; a
    /// large one (`largeRecord` or more) until it fits beside the backlog and the room promised
    /// to other large writers — or alone, when it is larger than the whole room — and is then
    /// promised its room, so concurrent large writers cannot all pass at once and pile the
    /// log past the limit (an attack on `--disk-limit`). Returns the promise: hand it back with
    /// `release` once the record is appended (or will not be).
    @discardableResult
    func waitForRoom(bytes: Int = 0) -> UInt64 {
        let want = UInt64(max(0, bytes))
        cond.lock()
        var counted = false
        // While SQLite refuses the backlog (a full disk) nothing drains it: nobody waits — a
        // value is then refused (DISK_FULL, `refusal`), a removal taken (an outside review,
        // dur6: large values waited here forever).
        while !roomFor(want) && !stopping && !applierGaveUp && stuck == nil && !writeFailing {
            if !counted { backpressureWaits.add(); counted = true }
            cond.unlock()
            wakeApplier()
            cond.lock()
            if roomFor(want) { break }
            cond.wait(seconds: 0.1)
        }
        let promise = want >= UInt64(largeRecord) ? want : 0
        promised += promise
        cond.unlock()
        return promise
    }

    /// Hands back a promise from `waitForRoom`.
    func release(_ promise: UInt64) {
        guard promise > 0 else { return }
        cond.withLock {
            promised -= promise
            cond.broadcast()
        }
    }

    /// Appends a record for a decided write (the caller holds the item's write lock, so records
    /// of one item enter the log in decision order) and records it in the index. Returns the
    /// position after the record: the write is durable once `written` passes it. With
    /// `flushedByCaller` the caller will call `flush()` soon (an event loop at the end of its
    /// iteration, a writer about to wait): nobody else is woken for it.
    func append(_ kind: LoggedWrite.Kind, at now: Int64, flushedByCaller: Bool = true, keepsMemory: Bool = false,
                answered: Bool = false, memoryBefore: MemorySnapshot? = nil) -> UInt64 {
        cond.lock()
        let end = appendLocked(kind, at: now, keepsMemory: keepsMemory, answered: answered, memoryBefore: memoryBefore)
        cond.unlock()
        if !flushedByCaller { wakeFlusherThread() }
        return end
    }

    /// A kept write-behind write (see `writeBatchLocked`) appended again at `next`, with `cond`
    /// held: the same record, its index entry moved to the new position. Returns its new end.
    func reappendLocked(_ w: LoggedWrite) -> UInt64 {
        let position = next
        let before = buffer.count
        Self.record(for: w.kind).encode(at: position, into: &buffer)
        let end = position + UInt64(buffer.count - before)
        next = end
        if let id = w.item, w.entry != nil { index.move(id, from: w.position, to: position) }
        buffered.append(LoggedWrite(position: position, end: end, kind: w.kind, entry: w.entry, keepsMemory: w.keepsMemory, answered: true))
        return end
    }

    static func record(for kind: LoggedWrite.Kind) -> LogRecord {
        switch kind {
        case let .put(id, s, encoding, stored):
            return .put(LogPut(namespace: id.namespace, key: id.key, version: s.version, expiry: s.expiry, flags: s.flags,
                               marks: s.marks, encoding: encoding.rawValue, rawSize: UInt32(s.value.count),
                               extended: s.extended, stored: stored))
        case .delete(let id): return .delete(namespace: id.namespace, key: id.key)
        case .flushNamespace(let ns): return .flushNamespace(ns)
        case .flushAll: return .flushAll
        }
    }

    /// `append` with `cond` held: encodes the record at `next`, indexes it and buffers it.
    func appendLocked(_ kind: LoggedWrite.Kind, at now: Int64, keepsMemory: Bool, answered: Bool,
                      memoryBefore: MemorySnapshot? = nil) -> UInt64 {
        let record = Self.record(for: kind)
        let position = next
        let before = buffer.count
        record.encode(at: position, into: &buffer)
        let end = position + UInt64(buffer.count - before)
        next = end
        var entry: PendingIndex.Entry? = nil
        switch kind {
        case let .put(id, s, encoding, stored):
            let e = PendingIndex.Entry(position: position, state: s, encoding: encoding, storedSize: stored.count, at: now)
            entry = e
            index.put(id, e)
        case .delete(let id):
            let e = PendingIndex.Entry(position: position, state: nil, encoding: .raw, storedSize: 0, at: now)
            entry = e
            index.put(id, e)
        default: break
        }
        buffered.append(LoggedWrite(position: position, end: end, kind: kind, entry: entry, keepsMemory: keepsMemory, answered: answered,
                                    memoryBefore: memoryBefore))
        return end
    }

    /// Blocks until the record ending at `end` is in the file (flushing it, with whatever else
    /// is buffered, unless another thread is); throws if its batch failed.
    func waitDurable(_ end: UInt64) throws {
        let c = Completion<StoreError?>()
        onDurable(end) { c.fulfil($0) }
        flush()
        if let e = c.wait() { throw e }
    }

    /// Calls `done` (nil on success) once the record ending at `end` is in the file — at once
    /// if it already is; else on the flusher thread (so `done` must not block).
    func onDurable(_ end: UInt64, _ done: @escaping (StoreError?) -> Void) {
        cond.lock()
        if written >= end { cond.unlock(); done(nil); return }
        durableWaiters.append((end, done))
        cond.unlock()
    }

    /// Blocks until SQLite holds every record before `end` (FLUSH, `sync`).
    func waitApplied(_ end: UInt64) throws {
        let c = Completion<StoreError?>()
        cond.lock()
        if applied >= end { cond.unlock(); return }
        if applierGaveUp { cond.unlock(); throw StoreError(.io, "the disk tier stopped applying the log") }
        // SQLite cannot write (a full disk): no waiting until space returns.
        if let e = stuck { cond.unlock(); throw Self.notYetApplied(e) }
        appliedWaiters.append((end, { c.fulfil($0) }))
        cond.unlock()
        flush()
        wakeApplier()
        if let e = c.wait() { throw e }
    }

    /// What a caller waiting for the log to reach SQLite is told while SQLite refuses to write
    /// (`stuck`): its write is in the log and is applied once SQLite can write again.
    static func notYetApplied(_ e: StoreError) -> StoreError {
        StoreError(.diskFull, "\(e.message); what was asked is in the log and takes effect once SQLite can write again")
    }

    func wakeApplier() {
        applierCond.withLock { applierSignalled = true }
        applierCond.signal()
    }

    /// The position the next record gets.
    var end: UInt64 { cond.withLock { next } }

    /// What the backlog will still take on the file system (`SpaceFloor`): the footprint × the
    /// records not yet in the file and one less × those in the file but not yet in SQLite.
    var floorOwed: Int {
        let f = UInt64(SpaceFloor.footprint)
        return cond.withLock { Int(f * (next - written) + (f - 1) * (written - applied)) }
    }

    /// The backlog: records decided but not yet in SQLite, and their bytes in the log.
    var backlog: (records: Int, bytes: Int) {
        cond.withLock { (buffered.count + toApply.count + applying, Int(next - applied)) }
    }
}
