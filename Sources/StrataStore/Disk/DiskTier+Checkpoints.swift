#if canImport(Glibc)
import Glibc
#endif
import CLinux
import StrataCore
import Synchronization

// Control jobs (quarantine) and WAL checkpoints (the copier thread and the writer's part).
extension DiskTier {
    // MARK: Control jobs

    func runControl(_ job: DiskJob) {
        guard writer != nil else { finish(job, .failure(StoreError(.io, "disk tier is not open"))); return }
        if case .quarantine(let reason, let epoch) = job.kind, epoch == readerLock.withLock({ readerEpoch }) {
            quarantineAndReopen(reason: reason)
        }
        switch job.kind {
        case .watchRows(let w):
            rowWatcher = w
            relistRows()
        case .relistRows: relistRows()
        default: break
        }
        finish(job, .success(nil))
    }

    /// Replaces a corrupt database with a fresh one while the store keeps running.
    /// Readers wait (`withReader`) from the moment the files are moved aside until the fresh
    /// database has its tables: a reader that opened the new file in between read "no such
    /// table" (a full test run caught it once).
    func quarantineAndReopen(reason: String) {
        // What the moved file had applied from the log (the fresh one is refilled up to it).
        let applied = appliedCommitted
        writer = nil
        readerLock.withLock {
            idleReaders.removeAll()
            readerEpoch += 1
            reopening = true
        }
        defer { readerLock.withLock { reopening = false } }
        quarantineFiles(reason: reason)
        registry.forgetDisk()
        rowCount = 0
        do {
            writer = try openDatabase()
        } catch {
            log("level=error event=disk_reopen_failed path=\(dbPath) error=\"\(error)\"")
        }
        // A fresh file: the watcher's rows are gone (the writer relists after this job).
        rowWatchConnection = nil
        if rowWatcher != nil { rowWatchDirty = true }
        // Not again while refilling: a fresh file that is corrupt too (a failing device) is
        // moved aside once more and left empty.
        if !refilling {
            refilling = true
            refillFromLog(upTo: applied)
            refilling = false
        }
    }

    // MARK: Checkpoints

    /// After a batch: starts the copier when the WAL reached `walLimit`, finishes its work
    /// once it is done, and copies everything itself when the copier cannot keep up.
    func checkpointIfDue(shrinking: Bool = false) {
        guard let db = writer else { return }
        let limit = max(16, config.walLimit / pageSize)
        let frames = db.walFrames
        switch copyState.load(ordering: .acquiring) {
        case 0 where frames >= 2 * limit:
            // One batch filled the WAL twice over (a large value): copying it now keeps the WAL
            // file, and the log segments the checkpoint lets go, within the room the disk
            // budget gives them; with the copier the next batches piled on top first (eight
            // writers of 500 KB values took a 16 MiB directory 2 % over its limit).
            if let r = try? db.checkpoint(truncate: false) { checkpointed(r) }
            counters.writerCheckpoints.add(1, ordering: .relaxed)
        case 0 where frames >= limit:
            if copierStarted {
                copyState.store(1, ordering: .releasing)
                copyQueue.withLock { copyRequested = true; copyQueue.signal() }
            } else {
                if let r = try? db.checkpoint(truncate: false) { checkpointed(r) }
                counters.writerCheckpoints.add(1, ordering: .relaxed)
            }
        case 1 where frames >= 4 * limit:
            // The copier fell far behind (a slow disk). Its pass holds SQLite's checkpoint
            // lock, so a checkpoint here would be refused and the WAL would keep growing with
            // every commit: the writer waits for the pass to end (the durability log absorbs
            // the pause, with back-pressure to writers at --log-limit), then copies the rest
            // itself, so the next transaction starts the WAL over. Bounded: after 30 s it
            // goes on without (a copier stuck on a dead disk must not stop the applier).
            let until = monotonicSeconds() + 30
            while copyState.load(ordering: .acquiring) == 1 && monotonicSeconds() < until { usleep(500) }
            if let r = try? db.checkpoint(truncate: false) { checkpointed(r) }
            counters.writerCheckpoints.add(1, ordering: .relaxed)
            if copyState.load(ordering: .acquiring) == 2 { copyState.store(0, ordering: .releasing) }
        case 0 where (logReleasable?(appliedCommitted) ?? 0) >= UInt64(max(config.walLimit, 64 << 10)):
            // Applied log records wait for a checkpoint to go, and the WAL may never reach its
            // limit: SQLite writes no pages for a row rewritten with the same bytes, so a key
            // refreshed with an unchanged 1 MiB value grew the log by 1 MiB a write and nothing
            // else (an outside review: 205 segments for a 1 MiB backlog, the directory past
            // --disk-limit, other items evicted). A checkpoint of a small WAL is cheap. Counted
            // in whole segments, since only those go: measured against the oldest segment's
            // start, a segment larger than walLimit made the writer checkpoint after every
            // batch until it was wholly applied (a CI run: 223 checkpoints for 8 MiB).
            if let r = try? db.checkpoint(truncate: false) { checkpointed(r) }
            counters.writerCheckpoints.add(1, ordering: .relaxed)
        case 0 where shrinking && frames > 0:
            // A vacuum gave pages back to bring the file under the high-water mark: the file
            // shrinks only when a checkpoint copies the whole WAL, and with no writes coming
            // the WAL might not reach its limit for good.
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
    func checkpointed(_ r: (frames: Int, copied: Int)) {
        if r.frames >= 0 && r.copied == r.frames { onCheckpointed?(appliedCommitted) }
    }

    func copierLoop() {
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
    func copyWAL() {
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

    func syncDatabaseFile() {
        let fd = open(dbPath, O_RDONLY | O_CLOEXEC)
        if fd >= 0 {
            _ = fdatasync(fd)
            Glibc.close(fd)
        }
    }
}
