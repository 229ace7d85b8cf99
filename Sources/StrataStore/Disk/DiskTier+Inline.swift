#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import Synchronization

/// Disk reads run by the caller's own thread — an event loop — instead of a worker
/// (ARCHITECTURE.md "Disk reads on the loop"): only while the database file and its WAL are
/// wholly in the page cache (`checkResidency`, once a second), so the read does not wait for
/// the device, and only for rows whose stored value is at most `InlineDiskRead.maxBytes`.
/// A read that cannot run so (a larger value, a database being replaced) *bails*: it stops
/// before counting anything, and the caller runs it again on a worker.
///
/// The mode is per thread (`begin`/`end`), so the read path needs no extra parameter; the
/// disk tier asks `active` where it would block or read a large value.
public enum InlineDiskRead {
    /// The largest stored value read inline: 64 KiB (a 10 KiB value decodes in a few µs).
    public static let maxBytes = 64 << 10

    /// 0: not inline; 1: inline; 2: inline and bailed.
    private static let thread = ThreadLocalInt()
    private static var slot: Int {
        get { thread.value }
        set { thread.value = newValue }
    }

    /// This thread's disk reads run inline from now until `end`.
    public static func begin() { slot = 1 }

    /// Ends the inline mode; true when a read bailed (its request must run on a worker).
    public static func end() -> Bool {
        let bailed = slot == 2
        slot = 0
        return bailed
    }

    /// Whether this thread reads inline now.
    static var active: Bool { slot != 0 }

    /// Whether a read of this thread's inline mode bailed (its answer will be discarded).
    public static var hasBailed: Bool { slot == 2 }

    /// The read cannot run inline: marks the bail and returns the error that unwinds it.
    static func bail(_ why: String) -> StoreError {
        slot = 2
        return StoreError(.busy, "not read inline: \(why)")
    }
}

extension DiskTier {
    /// Whether the database file and its WAL were wholly in the page cache at the last check.
    var resident: Bool { residentFlag.load(ordering: .relaxed) }

    /// Looks again whether the files are resident (the sweeper, once a second).
    func checkResidency() {
        let r = fileIsResident(dbPath) && fileIsResident(dbPath + "-wal")
        residentFlag.store(r, ordering: .relaxed)
    }
}

extension TieredCache {
    /// Whether a disk read may run on the caller's thread now (`InlineDiskRead`): allowed by
    /// the configuration, and the files were wholly resident at the last check (≤ 1 s ago).
    /// A page evicted since then makes one read wait for the device on that thread.
    public var diskReadsMayRunInline: Bool { configuration.diskReadsInline && disk.resident }
}
