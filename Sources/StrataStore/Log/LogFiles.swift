#if canImport(Glibc)
import Glibc
#endif
import StrataCore

/// When the log's bytes are forced to the device (`--fsync`), side by side with Redis's
/// `appendfsync`. Every policy survives a process crash (SIGKILL) with nothing acknowledged
/// lost: an acknowledged record has been handed to the kernel with `write()`.
public enum FsyncPolicy: String, Sendable, CaseIterable {
    /// `fdatasync` before a batch is acknowledged (one per batch: group commit). Survives
    /// power loss and kernel crashes too. Redis `appendfsync always`.
    case always
    /// `fdatasync` once a second on a background thread: a power loss or kernel crash may
    /// lose up to about a second of writes. Redis `appendfsync everysec` (its default).
    case everysec
    /// The kernel writes the pages back when it chooses (typically within 30 s). Redis
    /// `appendfsync no`.
    case no
}

/// The durability log's segment files in `<data>/log/`: appends, syncs, replays at open, and
/// removes segments that SQLite has absorbed. The one file that knows how the log reaches the
/// file system.
///
/// Guarantees: `append` hands a whole batch to the kernel with one `write()` before it
/// returns (and `fdatasync`s first with `.always`); records get consecutive positions; a batch
/// never straddles two segments. `open` scans every segment, truncates a torn tail (a write
/// cut short by a crash: only whole records stay), and on damage — a record or header that
/// does not verify — stops there: the records before it stay, a copy of the damaged segment and
/// every later segment are kept as `*.damaged-<ms>` for the operator, and the damage is
/// reported in `OpenReport.damage`, so nothing at or after damaged bytes is ever replayed.
///
/// Cost: one `write()` per batch; with `.always` one `fdatasync` per batch. Thread-safe (one
/// lock around appends and the segment list; the periodic `fdatasync` and the removal of
/// absorbed segments happen outside it, so appends never wait for the device).
final class LogFiles: @unchecked Sendable {
    let directory: String
    let segmentBytes: Int
    let policy: FsyncPolicy
    private let lock = Lock()
    private var fd: Int32 = -1
    /// Start position of the segment being appended to, and of every segment on disk, in order.
    var segments: [UInt64] = []
    /// The position the next record gets.
    var end: UInt64 = 0
    private var dirty = false
    /// Batches written so far (a sync outside the lock clears `dirty` only when none came meanwhile).
    private var writes: UInt64 = 0
    /// `StoreConfiguration.logWritesFailForTests`.
    var failWritesForTests: (@Sendable () -> Bool)? = nil
    /// (tests) Runs just before every `fdatasync` of a segment: a slow device.
    var beforeDeviceSyncForTests: (@Sendable () -> Void)? = nil
    private var syncStop = false
    private let syncCond = ConditionLock()
    private let syncStopped = Completion<Void>()
    private var syncThread = false
    /// `fdatasync` calls and failures (STATS).
    let syncs = Counter(), syncErrors = Counter()

    /// What `open` found.
    struct OpenReport {
        /// Records replayed (positions at or after the `from` position given to `open`).
        var records = 0
        /// Bytes cut from the end of the last segment (a torn tail).
        var truncatedBytes = 0
        /// Damage found (segment file, offset, reason); the files from there on were moved aside.
        var damage: [(file: String, offset: Int, reason: String)] = []
        /// Where the log ended, when that was before the applied position (a segment cut short).
        var endsBeforeApplied: UInt64? = nil
    }

    /// Opens the log in `directory` (created when missing), calling `visit` for every record at
    /// or after position `from`, in order. Appends continue after the last whole record.
    init(directory: String, segmentBytes: Int = 64 << 20, policy: FsyncPolicy, from: UInt64,
         clock: any Clock = SystemClock(), visit: (UInt64, LogRecord) throws -> Void) throws {
        self.directory = directory
        self.segmentBytes = max(1 << 16, segmentBytes)
        self.policy = policy
        if mkdir(directory, 0o755) != 0 && errno != EEXIST {
            throw StoreError(.directory, "cannot create \(directory): \(String(cString: strerror(errno)))")
        }
        report = try replay(from: from, clock: clock, visit: visit)
        // New records never take a position SQLite has already applied, nor one a damaged
        // (moved aside) segment used. Without damage, a log that ends before the applied
        // position was cut short or removed — no crash does that: the tail segment always
        // stays (`removeSegments` keeps one) — and is reported (an outside review, dur15: a
        // removed `log` directory went unnoticed).
        if end < from {
            if report.damage.isEmpty { report.endsBeforeApplied = end }
            end = from; tailAppendable = false
        }
        try openTail()
        if policy == .everysec { startSyncThread() }
    }

    var report = OpenReport()

    deinit { close() }

    /// Stops the sync thread, syncs what was written and closes the file. Idempotent.
    func close() {
        if syncThread {
            syncCond.withLock { syncStop = true; syncCond.broadcast() }
            syncStopped.wait()
            syncThread = false
        }
        lock.withLock {
            guard fd >= 0 else { return }
            if dirty && policy != .no { _ = fdatasync(fd) }
            Glibc.close(fd)
            fd = -1
        }
    }

    // MARK: Appending

    /// Writes `records` as one batch and returns the position of the first; the rest follow
    /// back to back. With `.always` the batch is on the device when this returns.
    @discardableResult
    func append(_ records: [LogRecord]) throws -> UInt64 {
        try lock.withLock {
            var bytes: [UInt8] = []
            for r in records { r.encode(at: end + UInt64(bytes.count), into: &bytes) }
            try appendLocked(bytes, at: end)
            return end - UInt64(bytes.count)
        }
    }

    /// Writes records already encoded at consecutive positions from `position`, which must be
    /// `end` (the caller numbered them ahead of the write). One `write()`.
    func append(encoded bytes: [UInt8], at position: UInt64) throws {
        try lock.withLock { try appendLocked(bytes, at: position) }
    }

    private func appendLocked(_ bytes: [UInt8], at position: UInt64) throws {
        guard fd >= 0 else { throw StoreError(.closed, "the log is closed") }
        guard position == end else { throw StoreError(.io, "internal: log batch at \(position), the log ends at \(end)") }
        if let current = segments.last, end - current >= UInt64(segmentBytes) { rotate() }
        if let fails = failWritesForTests, fails() {
            throw StoreError(.diskFull, "disk full while writing (\(dataDirectory)); nothing was stored")
        }
        try writeAll(bytes)
        end += UInt64(bytes.count)
        dirty = true
        writes &+= 1
        if policy == .always { try syncLocked() }
    }

    /// Forces what was written before the call to the device (any policy). The `fdatasync`
    /// runs on a duplicate of the segment's descriptor *outside* the lock, so appends go on
    /// meanwhile: a sync takes 5–30 ms, and the event loop's log write used to wait it out
    /// once a second (workload 2's p99.9 was ~20 ms, its p99 ~2.5 × Redis's; Redis's
    /// `everysec` syncs in a background thread the same way). A rotation meanwhile syncs the
    /// old segment itself (`dirty` stays set until a sync that saw no later write finishes),
    /// so a closed segment is still whole on the device before the next one takes records.
    func sync() throws {
        var copy: Int32 = -1, segment: UInt64? = nil, writesBefore: UInt64 = 0
        let needed: Bool = lock.withLock {
            guard dirty, fd >= 0 else { return false }
            (copy, segment, writesBefore) = (dup(fd), segments.last, writes)
            return true
        }
        guard needed else { return }
        guard copy >= 0 else { return try lock.withLock { try syncLocked() } } // (no descriptor to spare)
        defer { Glibc.close(copy) }
        syncs.add()
        beforeDeviceSyncForTests?()
        if fdatasync(copy) != 0 {
            let e = errno
            syncErrors.add()
            throw StoreError(.io, "fdatasync of the log failed: \(String(cString: strerror(e)))")
        }
        lock.withLock { if segments.last == segment && writes == writesBefore && fd >= 0 { dirty = false } }
    }

    private func syncLocked() throws {
        guard dirty, fd >= 0 else { return }
        syncs.add()
        beforeDeviceSyncForTests?()
        if fdatasync(fd) != 0 {
            syncErrors.add()
            throw StoreError(.io, "fdatasync of the log failed: \(String(cString: strerror(errno)))")
        }
        dirty = false
    }

    private func writeAll(_ bytes: [UInt8]) throws {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + done, bytes.count - done) }
            if n < 0 {
                if errno == EINTR { continue }
                let e = errno
                // Whatever part of the batch reached the file is cut off again, so the next batch
                // starts at a record boundary (a later replay must not meet a half record).
                _ = ftruncate(fd, off_t(end - (segments.last ?? 0)) + off_t(LogSegment.headerBytes))
                if e == ENOSPC || e == EDQUOT {
                    throw StoreError(.diskFull, "disk full while writing (\(dataDirectory)); nothing was stored")
                }
                throw StoreError(.io, "writing the log failed: \(String(cString: strerror(e)))")
            }
            done += n
        }
    }

    /// Starts a new segment at `end`. The old one is synced first (except with `.no`), so a
    /// segment once closed is whole on the device. When the new file cannot be made (a full
    /// disk), nothing changes: appends go on in the current segment, which grows past
    /// `segmentBytes` until a later rotation succeeds.
    private func rotate(syncingTheOld sync: Bool = true) {
        if sync && policy != .no { try? syncLocked() }
        guard let f = try? makeSegment(start: end) else { return }
        Glibc.close(fd)
        fd = f
        segments.append(end)
        dirty = true
    }

    private func createSegment(start: UInt64) throws {
        fd = try makeSegment(start: start)
        segments.append(start)
        end = start
        dirty = true
    }

    /// Creates the segment file that starts at `start`, with its header, and returns it open
    /// for appends; on failure no file is left behind.
    private func makeSegment(start: UInt64) throws -> Int32 {
        let path = directory + "/" + LogSegment.fileName(start: start)
        let f = Glibc.open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0o644)
        guard f >= 0 else { throw StoreError(errno == ENOSPC ? .diskFull : .io, "cannot create \(path): \(String(cString: strerror(errno)))") }
        let header = LogSegment.header(start: start)
        var done = 0
        while done < header.count {
            let n = header.withUnsafeBytes { Glibc.write(f, $0.baseAddress! + done, header.count - done) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                let e = errno
                Glibc.close(f)
                unlink(path)
                throw StoreError(e == ENOSPC || e == EDQUOT ? .diskFull : .io, "cannot write the header of \(path): \(String(cString: strerror(e)))")
            }
            done += n
        }
        syncDirectory()
        return f
    }

    /// A new or removed file's name is durable only once its directory is synced.
    func syncDirectory() { StrataCore.syncDirectory(directory) }

    /// Whether the last segment in `segments` ends at `end` and may take more records.
    var tailAppendable = false

    private func openTail() throws {
        guard tailAppendable, let last = segments.last else { return try createSegment(start: end) }
        let path = directory + "/" + LogSegment.fileName(start: last)
        let f = Glibc.open(path, O_WRONLY | O_APPEND | O_CLOEXEC)
        guard f >= 0 else { throw StoreError(.io, "cannot open \(path): \(String(cString: strerror(errno)))") }
        fd = f
    }

    private func startSyncThread() {
        syncThread = startThread(name: "strata-logsync") { [self] in
            while true {
                let stop: Bool = syncCond.withLock {
                    if !syncStop { syncCond.wait(seconds: 1) }
                    return syncStop
                }
                if stop { break }
                try? sync()
            }
            syncStopped.fulfil(())
        }
    }

    // MARK: Segments SQLite has absorbed

    /// Removes every segment whose records all stand before `position` (the position SQLite
    /// has applied, checkpointed into its database file and synced). When that is every record
    /// written, the current segment is closed first (a new one starts at `end`) so it goes too:
    /// the log keeps no applied record past a checkpoint, whatever the segment size (a 5 MB
    /// value under a 16 MiB disk limit otherwise stayed until the next write).
    /// The files are unlinked and the directory synced outside the lock (unlinking a 64 MiB
    /// segment and syncing the directory took up to 16 ms, and appends waited for it).
    func removeSegments(before position: UInt64) {
        let gone: [UInt64] = lock.withLock {
            // (No sync of the old one: SQLite holds every record in it, synced, and it goes now.)
            if position >= end, let current = segments.last, end > current, fd >= 0 { rotate(syncingTheOld: false) }
            var gone: [UInt64] = []
            while segments.count >= 2 && segments[1] <= position { gone.append(segments.removeFirst()) }
            return gone
        }
        guard !gone.isEmpty else { return }
        for start in gone { unlink(directory + "/" + LogSegment.fileName(start: start)) }
        syncDirectory()
    }

    /// The data directory the log lives in (for messages).
    private var dataDirectory: String {
        directory.hasSuffix("/log") ? String(directory.dropLast(4)) : directory
    }

    /// The log position the oldest segment starts at (`end` when there is none).
    var firstPosition: UInt64 { lock.withLock { segments.first ?? end } }

    /// The bytes of the segments `removeSegments(before: position)` would remove (whole
    /// segments wholly before the one holding `position`). Cost: one step per such segment.
    func bytesReleasable(at position: UInt64) -> UInt64 {
        lock.withLock {
            var i = 0
            while i + 1 < segments.count && segments[i + 1] <= position { i += 1 }
            return segments.isEmpty ? 0 : segments[i] - segments[0]
        }
    }

    /// Bytes the segments hold on disk.
    var bytesOnDisk: Int {
        lock.withLock { segments.isEmpty ? 0 : Int(end - segments[0]) + segments.count * LogSegment.headerBytes }
    }
}
