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
///   default 4 GiB keeps the configured 16 MiB of each.
/// - `transientRoom` is kept free for what comes and goes: the log's backlog, the WAL (SQLite
///   keeps up to four checkpoints' worth of it on disk), and four copies of the largest item
///   (`transientCopies`: a value is in the log and in the WAL before it settles in the database
///   file, and several large ones can wait in the log's applied segments for a checkpoint).
/// - Items are trimmed when the database's pages in use (plus whatever the WAL and the log
///   hold beyond their room) pass `highWater` (the limit less `transientRoom`), down to
///   `lowWater` (`trimTo` × `highWater`) in one batch, before the batch's rows are written — so
///   a full store does not evict on every write, and new rows reuse the freed pages instead of
///   growing the file. On disk, the directory stays under the limit.
/// - A value whose stored (compressed) size passes `maxStoredItem` (1/32 of the limit less the
///   log's and the WAL's room) is refused at once (`TOO_LARGE`), so the room kept for its
///   copies stays a small share of the limit; an accepted write is never evicted to make room
///   for itself.
public struct DiskBudget: Sendable, Equatable {
    /// 0 or `Int.max`: no byte limit (nothing below is adjusted).
    public let limit: Int
    public let walLimit: Int
    public let logLimit: Int
    public let logSegmentBytes: Int
    public let trimTo: Double

    public static let minimumShare = 128 << 10

    /// What the shares and the largest item are sized from: the limit, or the filesystem
    /// holding the data when that is smaller (a 16 MiB disk under the default 4 GiB limit).
    public let sizedFor: Int

    /// The largest value the configuration lets in (`maxItemBytes`): the room kept for a
    /// value's transient copies is sized from the smaller of it and `maxStoredItem`.
    public let maxItemBytes: Int

    public init(limit: Int, walLimit: Int, logLimit: Int, logSegmentBytes: Int, trimTo: Double,
                maxItemBytes: Int = Int.max, filesystemBytes: Int? = nil) {
        self.limit = limit
        self.trimTo = min(1, max(0.05, trimTo))
        self.maxItemBytes = maxItemBytes
        let limited = limit > 0 && limit < Int.max
        let size = min(limited ? limit : Int.max, filesystemBytes ?? Int.max)
        sizedFor = size
        guard size < Int.max else {
            (self.walLimit, self.logLimit, self.logSegmentBytes) = (walLimit, logLimit, logSegmentBytes)
            return
        }
        self.walLimit = min(walLimit, max(Self.minimumShare, size / 128))
        self.logLimit = min(logLimit, max(Self.minimumShare, size / 64))
        // Segments go once SQLite has checkpointed them: small ones go sooner (but a large
        // budget keeps the configured size: each rotation syncs the segment it closes).
        self.logSegmentBytes = min(logSegmentBytes, max(64 << 10, size / 256))
    }

    public init(_ c: StoreConfiguration, filesystemBytes: Int? = nil) {
        self.init(limit: c.diskByteLimit, walLimit: c.walLimit, logLimit: c.logLimit,
                  logSegmentBytes: c.logSegmentBytes, trimTo: c.diskTrimTo, maxItemBytes: c.maxItemBytes,
                  filesystemBytes: filesystemBytes)
    }

    public var isLimited: Bool { limit > 0 && limit < Int.max }

    /// Room kept free for the log's backlog, the WAL (up to four checkpoints' worth stays on
    /// disk: SQLite's `journal_size_limit`) and four more copies of the largest item: a value is
    /// in the log and in the WAL before it settles in the database file, and with several
    /// writers of large values the log's applied segments wait for a checkpoint while the next
    /// ones arrive (an outside review measured 101.5–105.7 % of a 16–64 MiB limit with two
    /// copies' room; `transientCopies`).
    public var transientRoom: Int {
        guard sizedFor < Int.max else { return 0 }
        return logLimit + 4 * walLimit + Self.transientCopies * min(maxStoredItem, maxItemBytes)
    }

    /// Copies of the largest item `transientRoom` keeps room for.
    public static let transientCopies = 4

    /// Past this, items are trimmed (the database's pages in use, and what the WAL and the
    /// log hold beyond `transientRoom`).
    public var highWater: Int { isLimited ? max(0, limit - transientRoom) : Int.max }

    /// Trimming stops here.
    public var lowWater: Int { isLimited ? Int(Double(highWater) * trimTo) : Int.max }

    /// The most of the WAL's and the log's bytes beyond `transientRoom` that eviction counts:
    /// one trim's room (`highWater − lowWater`), at most half of `lowWater`. So a transient
    /// excess (an old run's log and WAL right after a restart that lowered the limit) costs at
    /// most one more trim's worth of items, never the whole store.
    public var transientExcessCap: Int { isLimited ? min(highWater - lowWater, lowWater / 2) : 0 }

    /// The largest stored (compressed) value the disk tier accepts: 1/32 of what the limit
    /// (or the file system, when smaller) leaves after the log's and the WAL's room.
    public var maxStoredItem: Int {
        sizedFor < Int.max ? max(0, (sizedFor - logLimit - 4 * walLimit) / 32) : Int.max
    }

    /// Free pages worth giving back to the file system: past the room a trim leaves plus a
    /// quarter of the high-water mark (the next inserts reuse free pages anyway, and moving
    /// them fills the WAL: a 16 MiB budget's WAL grew to 3.7 MiB). Without any size, any.
    public var vacuumThreshold: Int {
        guard sizedFor < Int.max else { return 0 }
        let high = max(0, sizedFor - transientRoom)
        return high - Int(Double(high) * trimTo) + high / 4
    }
}

extension StoreConfiguration {
    /// This configuration with the WAL and log sizes fitted to the disk budget.
    public func fitted(to b: DiskBudget) -> StoreConfiguration {
        var c = self
        c.walLimit = b.walLimit
        c.logLimit = b.logLimit
        c.logSegmentBytes = b.logSegmentBytes
        return c
    }
}
