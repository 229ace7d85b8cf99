#if canImport(Glibc)
import Glibc
#endif
import CLinux
import StrataCore
import Synchronization

// The disk tier's writer thread: queued jobs in batches (group commit), the log applier's
// transactions, completions. See DiskTier.swift for the guarantees.
extension DiskTier {
    // MARK: Writer thread

    func writerLoop() {
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
                    if rowWatchDirty { relistRows() }
                    releaseCacheIfIdle()
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
            lastBatchAt = monotonicSeconds()
            if let w = writer { writerCacheBytes.store(w.cacheBytes, ordering: .relaxed) }
            checkpointIfDue()
            maintenance(force: false)
            if rowWatchDirty { relistRows() }
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


    /// Gives the writer's page cache back once no batch came for `writerIdleRelease` seconds
    /// (`StoreConfiguration.writerCacheKiB`), once per idle spell, and trims the heap so the
    /// process's resident memory falls with it.
    func releaseCacheIfIdle() {
        guard let db = writer, lastBatchAt > cacheReleasedAt,
              monotonicSeconds() - lastBatchAt >= config.writerIdleRelease else { return }
        db.releaseCache()
        writerCacheBytes.store(db.cacheBytes, ordering: .relaxed)
        trimHeap()
        cacheReleasedAt = monotonicSeconds()
    }

    func notifierLoop() {
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
    func deliver(_ actions: [() -> Void]) {
        guard !actions.isEmpty else { return }
        notifyQueue.lock()
        notifications.append(contentsOf: actions)
        notifyQueue.unlock()
        notifyQueue.signal()
    }

    func finish(_ job: DiskJob, _ result: Result<(WriteResult, WriteEffect)?, StoreError>) {
        if job.inline { job.done(result) } else { deliver([{ job.done(result) }]) }
    }

    /// Post-commit actions collected while a batch runs.
    struct Staged {
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
        /// The oldest version this batch stores: its rows (versions at or above it) are never
        /// evicted to make room in the same batch — an answered write is not evicted for itself.
        var minVersion: UInt64 = .max
        /// At most what this batch adds on disk: its stored bytes plus four pages per row
        /// (table leaf, two index leaves, one split) — the bytes-on-disk estimate's step.
        func bytesBound(pageSize: Int) -> Int { stored + rows * 4 * pageSize }
    }

    func runBatch(_ batch: [DiskJob]) {
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
    func commitGroup(_ jobs: [DiskJob]) {
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
    func commitLog(_ items: [LoggedWrite], end: UInt64?, job: DiskJob) {
        guard let db = writer else { return finish(job, .failure(StoreError(.io, "disk tier is not open"))) }
        do {
            for w in items {
                if let id = w.item, registry.lookup(id.namespace)?.diskID == nil { try createNamespace(db, id.namespace) }
            }
            if items.count == 1, let flush = items.first, flush.item == nil {
                try db.beginImmediate()
                switch flush.kind {
                case .flushNamespace(let name):
                    let u = try db.prepared("UPDATE namespaces SET generation=generation+1 WHERE name=?")
                    u.bind(1, name)
                    try u.run()
                default:
                    try db.execute("UPDATE namespaces SET generation=generation+1")
                }
                if let end { try setLogApplied(db, end) }
                try db.commit()
                if let end { appliedCommitted = end }
                // A flush of the disk tier alone keeps the memory tags (and so memory copies).
                let newTag = !flush.keepsMemory
                switch flush.kind {
                case .flushNamespace(let name):
                    let e = registry.lookup(name)
                    registry.bump(name, generation: e?.diskID != nil ? e!.generation + 1 : nil, newTag: newTag)
                default:
                    for name in registry.allNames() {
                        let g = registry.lookup(name).map { $0.diskID != nil ? $0.generation + 1 : $0.generation }
                        registry.bump(name, generation: g, newTag: newTag)
                    }
                }
                return finish(job, .success(nil))
            }
            var staged = Staged()
            let now = clock.nowMicros()
            try db.beginImmediate()
            // Room first, so the new rows take the pages the evicted ones leave (evicting after
            // them grew the file by the batch: with 5 MB values under a 16 MiB limit the
            // directory reached 30 MB).
            // What the rows will take, about: the value, as much again while it fits in a page
            // (leaf pages are half to fully used), the key twice (row and index) and the
            // columns. Not `Staged.bytesBound`'s four pages a row — the pages a row may dirty,
            // not what it adds: under a 32 MiB limit a batch of 5,000 rows of 100 B counted as
            // 80 MB and evicted nearly every row (an outside review, sec5: 2–30 % of the items
            // kept with the directory at 7 % of the limit). The limits are enforced on the
            // measured bytes after the rows (`enforceLimits`).
            var incoming = 0
            for w in items {
                guard case let .put(id, state, _, stored) = w.kind else { continue }
                incoming += stored.count + min(stored.count, pageSize) + 2 * id.key.count + 128
                staged.minVersion = min(staged.minVersion, state.version)
            }
            try makeRoom(db, &staged, for: incoming)
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
                    staged.minVersion = min(staged.minVersion, state.version)
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

    func setLogApplied(_ db: SQLiteConnection, _ end: UInt64) throws {
        let s = try db.prepared("UPDATE counters SET value=? WHERE name='log_applied'")
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
    func adopt(_ staged: Staged, _ newCounters: PersistedCounters) {
        rowCount += staged.rowDelta
        maxVersion = max(maxVersion, staged.maxVersion)
        persisted = newCounters
        bytesEstimate += staged.bytesBound(pageSize: pageSize)
        counters.rows.store(rowCount, ordering: .relaxed)
        counters.commits.add(1, ordering: .relaxed)
        counters.evictions.add(staged.evicted, ordering: .relaxed)
    }

    func handle(_ error: Error, jobs: [DiskJob]) {
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
}
