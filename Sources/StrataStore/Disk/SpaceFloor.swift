#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import Synchronization

/// Keeps room on the filesystem for what frees space. While the filesystem holding the data
/// directory has less than `floor` bytes free — counting the database's free pages, which new
/// rows reuse, as free, but always keeping half the floor truly free for the log — new data is
/// refused (DISK_FULL) when it is appended; deletes, flushes, the applier, sweeps and checkpoints still run in the room left —
/// so a full disk recovers by deleting or flushing, and a restart on a full disk opens and
/// answers (issue 16: without it, deletes answered DISK_FULL, a flush left SQLite unable to
/// write its WAL, and a restart refused everything).
///
/// A value is charged its whole footprint, not only its log record: `footprint` × its bytes (the
/// record now, then its WAL frames and its database pages when the applier writes it — all
/// exist at once until a checkpoint and the log's trim), and the log's backlog still to be
/// applied (`pending`, answered writes whose WAL frames and pages are yet to come) counts
/// against the room too. An outside review (dur6) drove free space to 0 with eight writers of
/// 2.6 MB values on an 85 MB disk when only the records were charged, and the node then could
/// apply nothing — not even the deletes that would have freed space.
///
/// Costs: a write far from the floor reads two atomics; within 8 × `floor` (plus the backlog's
/// bound) of it, or 100 ms after the last reading, it reads `statvfs` (~1 µs) and the backlog.
final class SpaceFloor: Sendable {
    /// Bytes kept free; 0 = no floor.
    let floor: Int
    /// How many times its bytes a value may take on the file system before it is settled: its
    /// log record, its WAL frames, its database pages, and the pages an overwrite frees only
    /// after its transaction (dur8: with 3, write-behind writers went up to 202 KB under half
    /// the floor).
    static let footprint = 4
    private let probe: @Sendable () -> Int
    /// Bytes still to be written for what was answered (`DurabilityLog.floorOwed`), and its bound.
    private let pending: @Sendable () -> Int
    private let pendingBound: Int
    /// Bytes of free pages inside the database file (room for rows, not for the log).
    let reusable = Atomic<Int>(0)
    /// Charges admitted and not yet in the log (`appended` takes them back): writers admitted
    /// together each see the others' (an outside review, dur7: 64 writers of mid-size values
    /// went up to 161 KB under half the floor when a probe forgot what was admitted before it).
    private let reserved = Atomic<Int>(0)
    private let free = Atomic<Int>(Int.max)
    private let admittedSince = Atomic<Int>(0)
    private let readAt = Atomic<Int>(0) // milliseconds, monotonic

    /// The default floor for a filesystem of `total` bytes: 1/16 of it, from 256 KiB to 64 MiB
    /// (1 MiB on a 16 MiB disk).
    static func defaultFloor(filesystemBytes total: Int) -> Int {
        min(64 << 20, max(256 << 10, total / 16))
    }

    init(floor: Int, probe: @escaping @Sendable () -> Int, pending: @escaping @Sendable () -> Int = { 0 }, pendingBound: Int = 0) {
        self.floor = floor
        self.probe = probe
        self.pending = pending
        self.pendingBound = pendingBound
    }

    /// Whether the file system is below the floor now (read now: one `statvfs`).
    var isBelowNow: Bool { floor > 0 && probe() < floor }

    /// Whether a value of `bytes` more fits above the floor (charged `footprint` × its bytes).
    func admits(_ bytes: Int) -> Bool {
        guard floor > 0 else { return true }
        let charge = Self.footprint * bytes
        let now = Int(monotonicSeconds() * 1000)
        var room = free.load(ordering: .relaxed) &- admittedSince.load(ordering: .relaxed)
        var owed = pendingBound
        if room - charge - owed < 8 * floor || now - readAt.load(ordering: .relaxed) >= 100 {
            room = probe()
            owed = pending()
            free.store(room, ordering: .relaxed)
            admittedSince.store(0, ordering: .relaxed)
            readAt.store(now, ordering: .relaxed)
        }
        let held = reserved.load(ordering: .relaxed)
        guard room - charge - owed - held >= floor / 2, room &+ reusable.load(ordering: .relaxed) - charge - owed - held >= floor else { return false }
        admittedSince.add(charge, ordering: .relaxed)
        reserved.add(charge, ordering: .relaxed)
        return true
    }

    /// The value of `bytes` that `admits` let through is in the log now (or will not be): its
    /// charge leaves `reserved` (the log's backlog counts it from here on).
    func appended(_ bytes: Int) {
        guard floor > 0 else { return }
        reserved.subtract(Self.footprint * bytes, ordering: .relaxed)
    }

    /// Bytes free on the filesystem holding `path` (or its nearest existing parent), for an
    /// unprivileged process; `Int.max` when it cannot be read.
    static func freeBytes(_ path: String) -> Int {
        guard let st = statfs(path) else { return Int.max }
        return Int(st.f_bavail) * Int(st.f_frsize)
    }

    /// The size of the filesystem holding `path` (or its nearest existing parent).
    static func filesystemBytes(_ path: String) -> Int? {
        guard let st = statfs(path) else { return nil }
        return Int(st.f_blocks) * Int(st.f_frsize)
    }

    private static func statfs(_ path: String) -> statvfs? {
        var p = path.isEmpty ? "." : path
        for _ in 0..<64 {
            var st = statvfs()
            if statvfs(p, &st) == 0 { return st }
            guard errno == ENOENT, p != "/" && p != "." else { return nil }
            if let slash = p.lastIndex(of: "/") { p = slash == p.startIndex ? "/" : String(p[..<slash]) } else { p = "." }
        }
        return nil
    }
}
