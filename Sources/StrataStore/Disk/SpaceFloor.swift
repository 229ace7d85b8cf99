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
/// Costs: a write far from the floor reads two atomics; within 8 × `floor` of it (or 100 ms
/// after the last reading) it reads `statvfs` (~1 µs).
final class SpaceFloor: Sendable {
    /// Bytes kept free; 0 = no floor.
    let floor: Int
    private let probe: @Sendable () -> Int
    /// Bytes of free pages inside the database file (room for rows, not for the log).
    let reusable = Atomic<Int>(0)
    private let free = Atomic<Int>(Int.max)
    private let admittedSince = Atomic<Int>(0)
    private let readAt = Atomic<Int>(0) // milliseconds, monotonic

    /// The default floor for a filesystem of `total` bytes: 1/16 of it, from 256 KiB to 64 MiB
    /// (1 MiB on a 16 MiB disk).
    static func defaultFloor(filesystemBytes total: Int) -> Int {
        min(64 << 20, max(256 << 10, total / 16))
    }

    init(floor: Int, probe: @escaping @Sendable () -> Int) {
        self.floor = floor
        self.probe = probe
    }

    /// Whether `bytes` more fit above the floor.
    func admits(_ bytes: Int) -> Bool {
        guard floor > 0 else { return true }
        let now = Int(monotonicSeconds() * 1000)
        var room = free.load(ordering: .relaxed) &- admittedSince.load(ordering: .relaxed)
        if room - bytes < 8 * floor || now - readAt.load(ordering: .relaxed) >= 100 {
            room = probe()
            free.store(room, ordering: .relaxed)
            admittedSince.store(0, ordering: .relaxed)
            readAt.store(now, ordering: .relaxed)
        }
        guard room - bytes >= floor / 2, room &+ reusable.load(ordering: .relaxed) - bytes >= floor else { return false }
        admittedSince.add(bytes, ordering: .relaxed)
        return true
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
