/// Which items the disk tier evicts first when a limit is reached.
public enum DiskEviction: String, Sendable, CaseIterable {
    /// Least recently used (written or read) first: YYCache's order. Approximate past
    /// `DiskTier.exactEvictionRows` rows (a sample of 8 rows per row to evict, at least 256).
    case lru
    /// Oldest write first, exactly (SDWebImage's `deleteOldFiles` order): a read does not
    /// save an item. An overwrite moves the row to the end of the table (a delete and an
    /// insert instead of an update in place).
    case oldest
}

/// How one `--disk-limit` is shared out, so that everything the disk tier keeps on disk —
/// SQLite's database file, its WAL and the durability log's segments — fits in it, and most of
/// it holds items. Pure: derived from the configuration once, at open.
///
/// - The WAL is checkpointed every `walLimit` bytes and the log's backlog is capped at
///   `logLimit`: at most 1/128 and 1/64 of the limit (never below 128 KiB), and never more
///   than the configured values. A 16 MiB limit gets a 128 KiB WAL and a 256 KiB backlog; the
///   default 4 GiB keeps 16 MiB and 64 MiB.
/// - Items are trimmed when the database file, the WAL and the log's segments together pass
///   `highWater` (the limit less room for a full backlog, which is appended before the
///   applier can evict), down to `lowWater` (`trimTo` × `highWater`) in one batch — so a full
///   store does not evict on every write. On disk, usage stays under the limit (by at most one
///   item while a batch is applied).
/// - A value whose stored (compressed) size passes `maxStoredItem` is refused at once
///   (`TOO_LARGE`): it is written three times before the copies settle (the log, the WAL, the
///   database file), so more could not fit however much were evicted — an accepted write is
///   never evicted to make room for itself.
public struct DiskBudget: Sendable, Equatable {
    /// 0 or `Int.max`: no byte limit (nothing below is adjusted).
    public let limit: Int
    public let walLimit: Int
    public let logLimit: Int
    public let logSegmentBytes: Int
    public let trimTo: Double

    public static let minimumShare = 128 << 10

    public init(limit: Int, walLimit: Int, logLimit: Int, logSegmentBytes: Int, trimTo: Double) {
        self.limit = limit
        self.trimTo = min(1, max(0.05, trimTo))
        guard limit > 0 && limit < Int.max else {
            (self.walLimit, self.logLimit, self.logSegmentBytes) = (walLimit, logLimit, logSegmentBytes)
            return
        }
        self.walLimit = min(walLimit, max(Self.minimumShare, limit / 128))
        self.logLimit = min(logLimit, max(Self.minimumShare, limit / 64))
        // Segments go once SQLite has checkpointed them: small ones go sooner.
        self.logSegmentBytes = min(logSegmentBytes, max(64 << 10, self.logLimit / 4))
    }

    public init(_ c: StoreConfiguration) {
        self.init(limit: c.diskByteLimit, walLimit: c.walLimit, logLimit: c.logLimit,
                  logSegmentBytes: c.logSegmentBytes, trimTo: c.diskTrimTo)
    }

    public var isLimited: Bool { limit > 0 && limit < Int.max }

    /// Past this, items are trimmed (bytes of the database file, the WAL and the log's segments).
    public var highWater: Int { isLimited ? max(0, limit - logLimit) : Int.max }

    /// Trimming stops here.
    public var lowWater: Int { isLimited ? Int(Double(highWater) * trimTo) : Int.max }

    /// The largest stored (compressed) value the disk tier accepts.
    public var maxStoredItem: Int {
        isLimited ? max(0, (limit - logLimit - 4 * walLimit) / 3) : Int.max
    }
}

extension StoreConfiguration {
    /// This configuration with the WAL and log sizes fitted to the disk limit (see `DiskBudget`).
    public func fittedToDiskBudget() -> StoreConfiguration {
        let b = DiskBudget(self)
        var c = self
        c.walLimit = b.walLimit
        c.logLimit = b.logLimit
        c.logSegmentBytes = b.logSegmentBytes
        return c
    }
}
