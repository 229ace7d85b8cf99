import StrataCore
import Synchronization

// The durability log's threads: flushing (group commit by whoever writes, the fallback
// flusher) and the applier that fills SQLite. See DurabilityLog.swift for the guarantees.
extension DurabilityLog {
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
            // A failed write kept write-behind records: the flusher retries them later, and
            // this caller's waiter is answered then.
            if monotonicSeconds() < retryAt { break }
            writeBatchLocked()
        }
        cond.unlock()
    }

    /// Takes the buffered batch, writes it (the lock is released meanwhile) and answers its
    /// waiters. Called with `cond` held; returns with it held.
    func writeBatchLocked() {
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
            // This batch and everything appended after it fail. A write whose writer is waiting
            // is undone (it gets the error: nothing changed). A write-behind write was answered
            // already: it is kept — appended again, in order, after the rest are rolled back —
            // and retried every `retryInterval` until the disk takes it (an outside review, dur7:
            // write-behind deletes undone on a full disk brought up to 1,391 items back with no
            // crash). Only a node stopping that still cannot write them after `stopPatience`
            // gives them up, and says so.
            let failed = batch + buffered
            buffer = []
            buffered = []
            next = batch[0].position
            writeFailing = true
            let givingUp = stopBegan.map { monotonicSeconds() - $0 >= Self.stopPatience } ?? false
            let dropped = failed.filter { !$0.answered || givingUp }
            // Undone writes leave the index, newest first; kept ones keep their entries, moved to
            // their new records — never absent, so no reader meanwhile falls through to SQLite's
            // older row and brings it back into memory (an outside review, dur8: deleted items
            // read back while the disk stayed full, until a restart).
            for w in dropped.reversed() { if let id = w.item { index.rollBack(id, position: w.position) } }
            var movedTo: [UInt64: UInt64] = [:] // a kept record's old end → its new end
            if !givingUp {
                for w in failed where w.answered { movedTo[w.end] = reappendLocked(w) }
            }
            durableWaiters = durableWaiters.compactMap { w in
                if let moved = movedTo[w.end] { return (moved, w.done) }
                ready.append(w.done)
                return nil
            }
            if !movedTo.isEmpty { retryAt = monotonicSeconds() + Self.retryInterval }
            writeErrors.add(failed.count) // kept ones too: a node retrying shows in log_write_errors
            cond.unlock()
            cond.broadcast()
            let keptIDs = givingUp ? [] : Set(failed.lazy.filter(\.answered).compactMap(\.item))
            for w in dropped.reversed() { undo(w, w.item.map(keptIDs.contains) ?? false) }
            if givingUp && failed.contains(where: \.answered) {
                logLine("level=error event=log_write_behind_lost records=\(failed.filter(\.answered).count) error=\"\(e.message)\" effect=\"write-behind writes answered before the stop could not be written within \(Int(Self.stopPatience)) s\"")
            }
            if let left = writeFailureLines.admit(now: monotonicSeconds()) {
                logLine("level=error event=log_write_failed records=\(dropped.count) kept=\(movedTo.count) error=\"\(e.message)\""
                        + (left > 0 ? " lines_left_out=\(left)" : ""))
            }
            for d in ready { d(e) }
            cond.lock()
            return
        }
        written = batch.last!.end
        writeFailing = false
        for w in batch { if let id = w.item { index.settle(id, position: w.position) } }
        for var w in batch {
            w.memoryBefore = nil // written: never undone, so the old copy is not kept
            toApply.append(w)
        }
        ready = Self.due(&durableWaiters, upTo: written)
        cond.unlock()
        cond.broadcast()
        for d in ready { d(nil) }
        cond.lock()
    }

    /// The fallback flusher: writes batches whose writers did not promise to flush (see
    /// `append`'s `flushedByCaller`) at once, and anything a promised flush left buffered for
    /// 2 ms. It sleeps on a condition of its own, so batches flushed by their writers wake it
    /// not at all.
    func flusherLoop() {
        var lastFirst: UInt64? = nil
        while true {
            flusherCond.lock()
            if !flusherSignalled && !flusherStop { flusherCond.wait(seconds: lastFirst == nil ? 1 : 0.002) }
            let signalled = flusherSignalled, stop = flusherStop
            flusherSignalled = false
            flusherCond.unlock()
            cond.lock()
            if !buffered.isEmpty && !flushing && (signalled || stop || buffered[0].position == lastFirst) && monotonicSeconds() >= retryAt {
                writeBatchLocked()
            }
            lastFirst = buffered.first?.position
            let done = stop && buffered.isEmpty && !flushing
            cond.unlock()
            if done { break }
        }
        flusherStopped.fulfil(())
    }

    func wakeFlusherThread() {
        flusherCond.withLock { flusherSignalled = true }
        flusherCond.signal()
    }

    // MARK: Applier

    func applierLoop() {
        var failures = 0
        // After a full disk, records go one at a time (each that fits is applied, instead of a
        // whole batch failing for the last one), growing back once they apply.
        var batchLimit = maxApplyBatch
        var idle = false
        // When the records now waiting began to wait (as the applier first saw them).
        var waitingSince: Double? = nil
        // The records taken from `toApply`, in order; `taken[head...]` are not applied yet.
        // They are taken all at once by swapping arrays and released here once applied, so the
        // log's lock — which the event loop takes for every durable write — is never held for
        // a copy or a release of thousands of records (the applier, preempted while holding it
        // on a busy host, stalled the loop for up to 10 ms: workload 2's p99.9).
        var taken: [LoggedWrite] = [], arrived: [LoggedWrite] = []
        var head = 0
        while true {
            // Larger transactions cost SQLite less per row: rows sharing a page share its write
            // to the WAL and its read, and the commit's fixed work is shared. Nobody waits on
            // the applier (writers were answered at the log), so it lets records gather for up
            // to `applyDelay` — looking every `applyPoll` (every 50 ms when there was nothing)
            // — unless a batch's worth has gathered or someone waiting for it wakes it.
            let more = head < taken.count
            applierCond.lock()
            if !applierSignalled && !more { applierCond.wait(seconds: idle ? 0.05 : Self.applyPoll) }
            let woken = applierSignalled
            applierSignalled = false
            applierCond.unlock()
            cond.lock()
            if !more && toApply.isEmpty {
                // Everything written is applied. Positions below `written` that were never
                // records — a damaged part the open moved aside, the log going on past it — are
                // marked applied too, so the gap is not found again (and reported as new damage,
                // and the next segment moved aside) once the operator removes the kept files (an
                // outside review, ver31).
                if applied < written && stuck == nil {
                    let to = written
                    cond.unlock()
                    if apply([], to) == nil { cond.withLock { if applied < to { applied = to } } }
                    continue
                }
                let done = stopping && buffered.isEmpty && !flushing
                cond.unlock()
                if done { break }
                idle = true
                waitingSince = nil
                continue
            }
            idle = false
            let now = monotonicSeconds()
            let since = waitingSince ?? now
            waitingSince = since
            let due = woken || more || stopping || stuck != nil || !appliedWaiters.isEmpty
                || now - since >= applyDelay
                || toApply.count >= batchLimit
                || written - applied >= UInt64(limitBytes / 4)
            if !due {
                cond.unlock()
                continue
            }
            if !more {
                // `taken` is empty (with its capacity): the waiting records move over, and
                // `toApply` keeps growing into the spare buffer.
                swap(&taken, &toApply)
                head = 0
            } else {
                // What the batch limit left behind goes next, with what arrived meanwhile (as
                // long as each batch is full, the applier does not wait).
                swap(&arrived, &toApply)
            }
            applying = taken.count - head + arrived.count
            let stop = stopping
            cond.unlock()
            if !arrived.isEmpty {
                taken.append(contentsOf: arrived)
                arrived.removeAll(keepingCapacity: arrived.capacity <= 1 << 16)
            }
            // A flush goes alone (the namespace's generation changes between batches); other
            // records go in batches of up to `maxApplyBatch`.
            var i = head
            while i < taken.count && i - head < batchLimit {
                let isFlush: Bool
                switch taken[i].kind { case .flushNamespace, .flushAll: isFlush = true; default: isFlush = false }
                if isFlush && i > head { break }
                i += 1
                if isFlush { break }
            }
            let batch = Array(taken[head..<i])
            let capped = i < taken.count // records were left behind (the limit, a flush)
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
                    // Those waiting for SQLite (a FLUSH, a trim, a sync) are answered now.
                    cond.lock()
                    stuck = e
                    let waiting = appliedWaiters
                    appliedWaiters.removeAll()
                    cond.unlock()
                    for w in waiting { w.done(Self.notYetApplied(e)) }
                    batchLimit = 1
                    applyRemovalsAhead(taken[head...])
                }
                if stop && failures >= 3 {
                    // Closing and SQLite keeps refusing: the records stay in the log and are
                    // replayed at the next open.
                    cond.lock()
                    applierGaveUp = true
                    let waiters = appliedWaiters
                    appliedWaiters.removeAll()
                    let left = applying + toApply.count
                    cond.unlock()
                    logLine("level=warn event=log_left_unapplied records=\(left) error=\"\(e.message)\" effect=\"kept in the log and applied at the next start (before anything is served, when it holds a FLUSH)\"")
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
            head = i
            var ready: [(StoreError?) -> Void] = []
            cond.lock()
            applying = taken.count - head
            applied = end
            // Records left behind (`capped`) are as old as the batch and go next; the
            // others arrived after it was taken. (After a failure they still wait since `since`.)
            waitingSince = capped ? since : now
            ready = Self.due(&appliedWaiters, upTo: end)
            cond.unlock()
            cond.broadcast()
            for d in ready { d(nil) }
            // Applied records still hold their values: they are dropped now, outside the lock
            // (once 4096 had gathered, 160 applied 8 MiB values stayed in memory: 1.5 GiB).
            if head == taken.count {
                taken.removeAll(keepingCapacity: taken.capacity <= 1 << 16)
                head = 0
            } else if head * 2 > taken.count {
                taken.removeFirst(head) // (moving the rest costs less than what was dropped)
                head = 0
            }
        }
        applierStopped.fulfil(())
    }

    /// While SQLite is full, the removals waiting in the backlog are what can free space: each
    /// item whose last write in the backlog removes it is removed now, ahead of its turn (the
    /// in-order pass later repeats it, which changes nothing; reads already see the removal
    /// through the index).
    func applyRemovalsAhead(_ taken: ArraySlice<LoggedWrite>) {
        let removals: [LoggedWrite] = cond.withLock {
            var last: [ItemKey: LoggedWrite] = [:]
            for w in taken { if let id = w.item { last[id] = w } }
            for w in toApply { if let id = w.item { last[id] = w } }
            return last.values.filter { if case .delete = $0.kind { return true } else { return false } }
        }
        guard !removals.isEmpty else { return }
        if apply(removals, nil) == nil {
            logLine("level=info event=log_removals_applied_ahead count=\(removals.count)")
        }
    }

    /// The batch with only the last write of each item kept (SQLite needs only the final
    /// state; the log keeps every step). Order among different items is kept.
    /// Cost: one hash of each item's key (the table is sized for the batch up front) and, only
    /// when some item repeats, one copy of the kept writes.
    static func coalesced(_ batch: [LoggedWrite]) -> [LoggedWrite] {
        guard batch.count > 1 else { return batch }
        var last = [ItemKey: Int](minimumCapacity: batch.count)
        var superseded: [Int] = []
        for i in batch.indices {
            if let id = batch[i].item, let earlier = last.updateValue(i, forKey: id) { superseded.append(earlier) }
        }
        if superseded.isEmpty { return batch }
        var drop = [Bool](repeating: false, count: batch.count)
        for j in superseded { drop[j] = true }
        var kept: [LoggedWrite] = []
        kept.reserveCapacity(batch.count - superseded.count)
        for i in batch.indices where !drop[i] { kept.append(batch[i]) }
        return kept
    }

    /// Takes the waiters whose record ends at or before `position` off `waiters` (in order).
    static func due(_ waiters: inout [(end: UInt64, done: (StoreError?) -> Void)], upTo position: UInt64) -> [(StoreError?) -> Void] {
        var ready: [(StoreError?) -> Void] = []
        waiters.removeAll { w in
            guard w.end <= position else { return false }
            ready.append(w.done)
            return true
        }
        return ready
    }
}
