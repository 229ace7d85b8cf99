import StrataCore
import Synchronization

/// One write on its way through the log to SQLite, in log order.
struct LoggedWrite: Sendable {
    enum Kind: Sendable {
        /// The item as the write left it, with its value as the disk tier stores it.
        case put(ItemKey, ItemState, ValueEncoding, [UInt8])
        /// The row goes (an unversioned remove).
        case delete(ItemKey)
        case flushNamespace([UInt8])
        case flushAll
    }
    let position: UInt64
    /// The position after this record.
    let end: UInt64
    let kind: Kind
    /// The item's index entry (its LRU time: when it was written, or last read while pending).
    var entry: PendingIndex.Entry? = nil

    var item: ItemKey? {
        switch kind {
        case .put(let id, _, _, _), .delete(let id): return id
        default: return nil
        }
    }
}

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
    /// How often the applier looks for written records while it has work (seconds).
    var applyGather: Double = 0.005
    private let clock: any Clock
    private let logLine: @Sendable (String) -> Void

    private let cond = ConditionLock()
    // Guarded by `cond`.
    private var buffer: [UInt8] = []
    private var buffered: [LoggedWrite] = []
    private var next: UInt64
    private var written: UInt64
    private var applied: UInt64
    private var toApply: [LoggedWrite] = []
    private var toApplyHead = 0
    private var durableWaiters: [(end: UInt64, done: (StoreError?) -> Void)] = []
    private var appliedWaiters: [(end: UInt64, done: (StoreError?) -> Void)] = []
    private var stopping = false
    private var flushing = false
    // The fallback flusher's own condition (so writes by others never wake it).
    private let flusherCond = ConditionLock()
    private var flusherSignalled = false
    private var flusherStop = false
    // The applier's own condition: it polls every `applyGather` while records wait, and is
    // woken only by those who wait for it (FLUSH, sync, back-pressure) and by `close`.
    private let applierCond = ConditionLock()
    private var applierSignalled = false
    private var applierGaveUp = false
    /// Why the applier cannot go on (a full disk), until a batch applies again.
    private var stuck: StoreError?

    /// Commits writes to SQLite and records `end` as the applied position in the same
    /// transaction (no position when nil: writes applied ahead of their turn); nil on success.
    /// Set before `start`.
    var apply: ([LoggedWrite], UInt64?) -> StoreError? = { _, _ in StoreError(.io, "no applier") }
    /// Undoes a write that never reached the file (the memory tier drops the item).
    var undo: (LoggedWrite) -> Void = { _ in }

    private let flusherStopped = Completion<Void>()
    private let applierStopped = Completion<Void>()
    private var threads = 0

    let backpressureWaits = Counter(), writeErrors = Counter(), applyErrors = Counter()
    let appliedRecords = Counter(), applyBatches = Counter()
    /// The newest version among the records replayed at open.
    private(set) var replayedMaxVersion: UInt64 = 0
    private(set) var replayedRecords = 0
    /// The namespaces of the records replayed at open.
    private(set) var replayedNamespaces: Set<[UInt8]> = []

    /// Opens the log in `directory`, replaying every record at or after `applied` (the position
    /// SQLite recorded) into the index and the applier's queue; `decode` turns a put's stored
    /// bytes back into the value.
    init(directory: String, policy: FsyncPolicy, applied: UInt64, limitBytes: Int, segmentBytes: Int,
         maxApplyBatch: Int = 4096, clock: any Clock, log: @escaping @Sendable (String) -> Void,
         decode: (ValueEncoding, [UInt8], Int) -> [UInt8]?) throws {
        self.limitBytes = max(1 << 20, limitBytes)
        self.maxApplyBatch = max(1, maxApplyBatch)
        self.clock = clock
        self.logLine = log
        var replayed: [LoggedWrite] = []
        var maxVersion: UInt64 = 0
        var undecodable = 0
        let index = PendingIndex()
        self.index = index
        let now = clock.nowMicros()
        files = try LogFiles(directory: directory, segmentBytes: segmentBytes, policy: policy, from: applied, clock: clock) { position, record in
            let end = position + UInt64(record.encodedSize)
            let kind: LoggedWrite.Kind
            var entry: PendingIndex.Entry? = nil
            switch record {
            case .put(let p):
                guard let encoding = ValueEncoding(rawValue: p.encoding),
                      let value = decode(encoding, p.stored, Int(p.rawSize)) else { undecodable += 1; return }
                let state = ItemState(value: value, flags: p.flags, extended: p.extended, expiry: p.expiry, version: p.version, marks: p.marks)
                let id = ItemKey(namespace: p.namespace, key: p.key)
                kind = .put(id, state, encoding, p.stored)
                entry = PendingIndex.Entry(position: position, state: state, encoding: encoding, storedSize: p.stored.count, at: now)
                index.put(id, entry!)
                maxVersion = max(maxVersion, p.version)
            case let .delete(ns, key):
                let id = ItemKey(namespace: ns, key: key)
                kind = .delete(id)
                entry = PendingIndex.Entry(position: position, state: nil, encoding: .raw, storedSize: 0, at: now)
                index.put(id, entry!)
            case .flushNamespace(let ns): kind = .flushNamespace(ns)
            case .flushAll: kind = .flushAll
            }
            replayed.append(LoggedWrite(position: position, end: end, kind: kind, entry: entry))
        }
        // Replayed entries are in the file: nothing to roll back.
        for w in replayed { if let id = w.item { index.settle(id, position: w.position) } }
        toApply = replayed
        replayedRecords = replayed.count
        replayedNamespaces = Set(replayed.compactMap { $0.item?.namespace })
        replayedMaxVersion = maxVersion
        next = files.end
        written = files.end
        self.applied = min(applied, files.end)
        for d in files.report.damage {
            log("level=error event=log_damaged file=\(d.file) offset=\(d.offset) reason=\"\(d.reason)\" action=\"records from here on were not replayed; the files were kept as *.damaged-*\"")
        }
        if files.report.truncatedBytes > 0 {
            log("level=warn event=log_torn_tail_truncated bytes=\(files.report.truncatedBytes)")
        }
        if undecodable > 0 {
            log("level=error event=log_undecodable_values count=\(undecodable)")
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
        cond.withLock { stopping = true; cond.broadcast() }
        flusherCond.withLock { flusherStop = true }
        flusherCond.signal()
        wakeApplier()
        if threads >= 1 { flusherStopped.wait() }
        if threads >= 2 { applierStopped.wait() }
        threads = 0
        files.close()
    }

    // MARK: Writers

    /// Set while SQLite refuses the backlog for lack of space: new values are refused with it
    /// (removals still go through: they are what frees space).
    var refusal: StoreError? { cond.withLock { stuck } }

    /// Blocks while the backlog is over the limit (back-pressure: the applier catches up).
    func waitForRoom() {
        cond.lock()
        var counted = false
        while next - applied > UInt64(limitBytes) && !stopping && !applierGaveUp {
            if !counted { backpressureWaits.add(); counted = true }
            cond.unlock()
            wakeApplier()
            cond.lock()
            if next - applied <= UInt64(limitBytes) { break }
            cond.wait(seconds: 0.1)
        }
        cond.unlock()
    }

    /// Appends a record for a decided write (the caller holds the item's write lock, so records
    /// of one item enter the log in decision order) and records it in the index. Returns the
    /// position after the record: the write is durable once `written` passes it. With
    /// `flushedByCaller` the caller will call `flush()` soon (an event loop at the end of its
    /// iteration, a writer about to wait): nobody else is woken for it.
    func append(_ kind: LoggedWrite.Kind, at now: Int64, flushedByCaller: Bool = true) -> UInt64 {
        let record: LogRecord
        switch kind {
        case let .put(id, s, encoding, stored):
            record = .put(LogPut(namespace: id.namespace, key: id.key, version: s.version, expiry: s.expiry, flags: s.flags,
                                 marks: s.marks, encoding: encoding.rawValue, rawSize: UInt32(s.value.count),
                                 extended: s.extended, stored: stored))
        case .delete(let id): record = .delete(namespace: id.namespace, key: id.key)
        case .flushNamespace(let ns): record = .flushNamespace(ns)
        case .flushAll: record = .flushAll
        }
        cond.lock()
        let position = next
        let before = buffer.count
        record.encode(at: position, into: &buffer)
        let end = position + UInt64(buffer.count - before)
        next = end
        var entry: PendingIndex.Entry? = nil
        switch kind {
        case let .put(id, s, encoding, stored):
            entry = PendingIndex.Entry(position: position, state: s, encoding: encoding, storedSize: stored.count, at: now)
            index.put(id, entry!)
        case .delete(let id):
            entry = PendingIndex.Entry(position: position, state: nil, encoding: .raw, storedSize: 0, at: now)
            index.put(id, entry!)
        default: break
        }
        buffered.append(LoggedWrite(position: position, end: end, kind: kind, entry: entry))
        cond.unlock()
        if !flushedByCaller { wakeFlusherThread() }
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
        appliedWaiters.append((end, { c.fulfil($0) }))
        cond.unlock()
        flush()
        wakeApplier()
        if let e = c.wait() { throw e }
    }

    private func wakeApplier() {
        applierCond.withLock { applierSignalled = true }
        applierCond.signal()
    }

    /// The position the next record gets.
    var end: UInt64 { cond.withLock { next } }

    /// The backlog: records decided but not yet in SQLite, and their bytes in the log.
    var backlog: (records: Int, bytes: Int) {
        cond.withLock { (buffered.count + toApply.count - toApplyHead, Int(next - applied)) }
    }

    // MARK: Flushing

    /// Writes every buffered record — and what others append meanwhile — unless another thread
    /// is writing, in which case it waits for that write and then goes on with what is left
    /// (group commit: whoever flushes writes everyone's records with one `write()`). Returns
    /// once everything appended before the call is in the file or has failed. Completions of
    /// `onDurable` run on the calling thread.
    func flush() {
        cond.lock()
        let target = next
        while written < target {
            if flushing { cond.wait(); continue }
            if buffered.isEmpty { break } // (a failed batch took the rest with it)
            writeBatchLocked()
        }
        cond.unlock()
    }

    /// Takes the buffered batch, writes it (the lock is released meanwhile) and answers its
    /// waiters. Called with `cond` held; returns with it held.
    private func writeBatchLocked() {
        let bytes = buffer, batch = buffered
        buffer = []
        buffer.reserveCapacity(bytes.count)
        buffered = []
        flushing = true
        cond.unlock()

        var failure: StoreError?
        do { try files.append(encoded: bytes, at: batch[0].position) } catch {
            failure = error as? StoreError ?? StoreError(.io, "\(error)")
        }

        cond.lock()
        flushing = false
        var ready: [(StoreError?) -> Void] = []
        if let e = failure {
            // This batch and everything appended after it fail: undo them, newest first.
            let failed = batch + buffered
            buffer = []
            buffered = []
            next = batch[0].position
            for w in failed.reversed() { if let id = w.item { index.rollBack(id, position: w.position) } }
            durableWaiters.removeAll { w in ready.append(w.done); return true }
            writeErrors.add(failed.count)
            cond.unlock()
            cond.broadcast()
            for w in failed.reversed() { undo(w) }
            logLine("level=error event=log_write_failed records=\(failed.count) error=\"\(e.message)\"")
            for d in ready { d(e) }
            cond.lock()
            return
        }
        written = batch.last!.end
        for w in batch { if let id = w.item { index.settle(id, position: w.position) } }
        toApply.append(contentsOf: batch)
        durableWaiters.removeAll { w in
            guard w.end <= written else { return false }
            ready.append(w.done)
            return true
        }
        cond.unlock()
        cond.broadcast()
        for d in ready { d(nil) }
        cond.lock()
    }

    /// The fallback flusher: writes batches whose writers did not promise to flush (see
    /// `append`'s `flushedByCaller`) at once, and anything a promised flush left buffered for
    /// 2 ms. It sleeps on a condition of its own, so batches flushed by their writers wake it
    /// not at all.
    private func flusherLoop() {
        var lastFirst: UInt64? = nil
        while true {
            flusherCond.lock()
            if !flusherSignalled && !flusherStop { flusherCond.wait(seconds: lastFirst == nil ? 1 : 0.002) }
            let signalled = flusherSignalled, stop = flusherStop
            flusherSignalled = false
            flusherCond.unlock()
            cond.lock()
            if !buffered.isEmpty && !flushing && (signalled || stop || buffered[0].position == lastFirst) {
                writeBatchLocked()
            }
            lastFirst = buffered.first?.position
            let done = stop && buffered.isEmpty && !flushing
            cond.unlock()
            if done { break }
        }
        flusherStopped.fulfil(())
    }

    private func wakeFlusherThread() {
        flusherCond.withLock { flusherSignalled = true }
        flusherCond.signal()
    }

    // MARK: Applier

    private func applierLoop() {
        var failures = 0
        // After a full disk, records go one at a time (each that fits is applied, instead of a
        // whole batch failing for the last one), growing back once they apply.
        var batchLimit = maxApplyBatch
        var idle = false, more = false
        while true {
            // Larger transactions cost SQLite less per row (the pages a commit rewrites are
            // shared), and nobody waits on the applier (writers were answered at the log): it
            // looks every `applyGather` seconds (every 50 ms when there was nothing), unless
            // someone waiting for it wakes it.
            applierCond.lock()
            if !applierSignalled && !more { applierCond.wait(seconds: idle ? 0.05 : applyGather) }
            applierSignalled = false
            applierCond.unlock()
            cond.lock()
            if toApplyHead == toApply.count {
                let done = stopping && buffered.isEmpty && !flushing
                cond.unlock()
                if done { break }
                idle = true
                continue
            }
            idle = false
            // A flush goes alone (the namespace's generation changes between batches); other
            // records go in batches of up to `maxApplyBatch`.
            var batch: [LoggedWrite] = []
            var i = toApplyHead
            while i < toApply.count && batch.count < batchLimit {
                let w = toApply[i]
                let isFlush: Bool
                switch w.kind { case .flushNamespace, .flushAll: isFlush = true; default: isFlush = false }
                if isFlush && !batch.isEmpty { break }
                batch.append(w)
                i += 1
                if isFlush { break }
            }
            let stop = stopping
            cond.unlock()
            if applierDelay > 0 && !stop {
                // (tests) a slow disk: the batch waits, unless the store closes meanwhile
                let until = monotonicSeconds() + applierDelay
                applierCond.withLock {
                    while monotonicSeconds() < until && !cond.withLock({ stopping }) { applierCond.wait(seconds: min(0.05, until - monotonicSeconds())) }
                }
            }

            let end = batch.last!.end
            if let e = apply(Self.coalesced(batch), end) {
                applyErrors.add()
                failures += 1
                if failures == 1 || failures % 100 == 0 {
                    logLine("level=error event=log_apply_failed records=\(batch.count) attempt=\(failures) error=\"\(e.message)\"")
                }
                if e.code == .diskFull {
                    cond.withLock { stuck = e }
                    batchLimit = 1
                    applyRemovalsAhead()
                }
                if stop && failures >= 3 {
                    // Closing and SQLite keeps refusing: the records stay in the log and are
                    // replayed at the next open.
                    cond.lock()
                    applierGaveUp = true
                    let waiters = appliedWaiters
                    appliedWaiters.removeAll()
                    cond.unlock()
                    cond.broadcast()
                    for w in waiters { w.done(e) }
                    break
                }
                cond.withLock { if !stopping { cond.wait(seconds: min(2, 0.05 * Double(1 << min(failures, 6)))) } }
                continue
            }
            failures = 0
            batchLimit = min(maxApplyBatch, batchLimit * 2)
            if cond.withLock({ stuck }) != nil {
                cond.withLock { stuck = nil }
                logLine("level=info event=log_apply_resumed")
            }
            for w in batch { if let id = w.item { index.removeApplied(id, upTo: end) } }
            appliedRecords.add(batch.count)
            applyBatches.add()
            var ready: [(StoreError?) -> Void] = []
            cond.lock()
            toApplyHead += batch.count
            if toApplyHead > 4096 && toApplyHead * 2 > toApply.count {
                toApply.removeFirst(toApplyHead)
                toApplyHead = 0
            }
            applied = end
            more = toApplyHead < toApply.count
            appliedWaiters.removeAll { w in
                guard w.end <= end else { return false }
                ready.append(w.done)
                return true
            }
            cond.unlock()
            cond.broadcast()
            for d in ready { d(nil) }
        }
        applierStopped.fulfil(())
    }

    /// While SQLite is full, the removals waiting in the backlog are what can free space: each
    /// item whose last write in the backlog removes it is removed now, ahead of its turn (the
    /// in-order pass later repeats it, which changes nothing; reads already see the removal
    /// through the index).
    private func applyRemovalsAhead() {
        let removals: [LoggedWrite] = cond.withLock {
            var last: [ItemKey: LoggedWrite] = [:]
            for w in toApply[toApplyHead...] { if let id = w.item { last[id] = w } }
            return last.values.filter { if case .delete = $0.kind { return true } else { return false } }
        }
        guard !removals.isEmpty else { return }
        if apply(removals, nil) == nil {
            logLine("level=info event=log_removals_applied_ahead count=\(removals.count)")
        }
    }

    /// The batch with only the last write of each item kept (SQLite needs only the final
    /// state; the log keeps every step). Order among different items is kept.
    static func coalesced(_ batch: [LoggedWrite]) -> [LoggedWrite] {
        guard batch.count > 1 else { return batch }
        var last: [ItemKey: Int] = [:]
        for (i, w) in batch.enumerated() { if let id = w.item { last[id] = i } }
        if last.count == batch.count { return batch }
        return batch.enumerated().compactMap { i, w in
            guard let id = w.item else { return w }
            return last[id] == i ? w : nil
        }
    }
}

extension LogRecord {
    /// Bytes the record takes in the log (header + body).
    var encodedSize: Int {
        switch self {
        case .put(let p): return LogRecord.headerBytes + 1 + 1 + p.namespace.count + 2 + p.key.count + 8 + 8 + 4 + 1 + 1 + 4 + 2 + p.extended.count + p.stored.count
        case let .delete(ns, key): return LogRecord.headerBytes + 1 + 1 + ns.count + 2 + key.count
        case .flushNamespace(let ns): return LogRecord.headerBytes + 2 + ns.count
        case .flushAll: return LogRecord.headerBytes + 2
        }
    }
}
