import StrataCore

/// When an item expires.
public enum Expiry: Sendable, Equatable {
    /// The store's default TTL (none unless configured).
    case storeDefault
    /// Never expires.
    case never
    /// Expires this many seconds from now (EGOCache's per-item timeout). Zero, negative or
    /// NaN: expired at once (stored, and never read — memcached's negative exptime; the
    /// `StrataCache` facade refuses such a TTL instead).
    case seconds(Double)
    /// Expires at this absolute time, in microseconds since the Unix epoch.
    case at(unixMicros: Int64)

    /// The absolute expiry in µs (0 = never) at time `now`.
    func resolve(now: Int64, defaultTTL: Double?) -> Int64 {
        switch self {
        case .never: return 0
        case .at(let t): return max(t, 1)
        case .seconds(let s): return now + max(1, Self.micros(s))
        case .storeDefault:
            guard let d = defaultTTL, d > 0 else { return 0 }
            return now + Self.micros(d)
        }
    }

    /// `seconds` in µs, within 0 … 10^12 s (any TTL a caller or a configuration gives, even
    /// an absurd one, then resolves without overflowing).
    static func micros(_ seconds: Double) -> Int64 {
        seconds.isNaN ? 0 : Int64(min(max(seconds, 0), 1e12) * 1_000_000)
    }
}

/// What a set does when the key is (or is not) present.
public enum SetMode: Sendable, Equatable {
    /// Store unconditionally.
    case set
    /// Store only when absent (memcached `add`).
    case add
    /// Store only when present (memcached `replace`).
    case replace
    /// Store only when present with exactly this version (compare-and-swap).
    case cas(UInt64)
}

/// Options of a set. Defaults: mode `.set`, the store's default expiry, flags 0, no extended
/// data, all tiers, a node-assigned version, and acknowledgement after the disk commit.
public struct SetOptions: Sendable {
    public var mode: SetMode = .set
    public var expiry: Expiry = .storeDefault
    public var flags: UInt32 = 0
    public var extended: [UInt8] = []
    public var tiers: Tiers = .all
    /// A caller-supplied version (a replica's write); the store keeps whichever is newer.
    public var version: UInt64? = nil
    /// Return after the memory write; the disk write follows (may be lost in a crash; counted).
    public var writeBehind = false
    /// Store a negative entry ("this key failed to load"; the value is the message).
    public var negative = false
    /// Store the item already marked stale (replication and repair of a stale item).
    public var stale = false
    public init(mode: SetMode = .set, expiry: Expiry = .storeDefault, flags: UInt32 = 0,
                extended: [UInt8] = [], tiers: Tiers = .all, version: UInt64? = nil, writeBehind: Bool = false) {
        self.mode = mode; self.expiry = expiry; self.flags = flags; self.extended = extended
        self.tiers = tiers; self.version = version; self.writeBehind = writeBehind
    }
}

/// The outcome of a set.
public enum SetOutcome: Equatable, Sendable {
    case stored(version: UInt64)
    /// `add` on a key that is present.
    case exists
    /// `replace` or `cas` on a key that is absent.
    case notFound
    /// `cas` whose version is not the stored one.
    case casMismatch(current: UInt64)
    /// A caller-supplied version not newer than the stored one (or its tombstone): ignored.
    case superseded(current: UInt64)

    public var isStored: Bool { if case .stored = self { return true } else { return false } }
}

/// The outcome of a remove.
public enum RemoveOutcome: Equatable, Sendable {
    case removed
    case notFound
    case superseded(current: UInt64)
}

/// The outcome of an invalidate (mark stale).
public enum InvalidateOutcome: Equatable, Sendable {
    /// Marked stale with this version.
    case invalidated(version: UInt64)
    case notFound
    /// A caller-supplied version not newer than the stored one: ignored.
    case superseded(current: UInt64)
}

/// The outcome of an increment or decrement.
public enum CounterOutcome: Equatable, Sendable {
    case value(UInt64, version: UInt64)
    case notFound
    /// The stored value is not a decimal number of at most 20 digits that fits in 64 bits.
    case notANumber
    /// A caller version not newer than the stored one (an INCR that arrived late): nothing
    /// changed.
    case superseded(current: UInt64)
}

/// An item returned by a read: the value with its metadata.
public struct CacheItem: Sendable, Equatable {
    public var value: [UInt8]
    public var flags: UInt32
    public var extended: [UInt8]
    /// Absolute expiry in µs since the epoch; nil when it never expires.
    public var expiresAt: Int64?
    public var version: UInt64
    /// The tier that answered.
    public var tier: Tiers
    /// Marked stale by `invalidate`: served until a new write replaces it.
    public var stale = false
    /// A negative entry (a failed load remembered for its TTL); the value is the message.
    public var negative = false
}

/// Metadata of one item (META).
public struct ItemMetadata: Sendable, Equatable {
    public var size: Int
    /// Bytes on disk for the value (after compression); nil when not on disk.
    public var storedSize: Int?
    public var encoding: ValueEncoding?
    public var tiers: Tiers
    public var expiresAt: Int64?
    public var version: UInt64
    public var flags: UInt32
    public var extendedSize: Int
}

/// The full state of one item as a tier holds it. A tombstone has an empty value and
/// carries the version of the remove that made it.
struct ItemState: Sendable {
    var value: [UInt8]
    var flags: UInt32
    var extended: [UInt8]
    var expiry: Int64
    var version: UInt64
    /// `ItemMarks` bits, stored as they are in memory records and in the disk rows.
    var marks: UInt8

    init(value: [UInt8], flags: UInt32, extended: [UInt8], expiry: Int64, version: UInt64, marks: UInt8) {
        self.value = value; self.flags = flags; self.extended = extended; self.expiry = expiry; self.version = version; self.marks = marks
    }
    init(value: [UInt8], flags: UInt32, extended: [UInt8], expiry: Int64, version: UInt64, tombstone: Bool) {
        self.init(value: value, flags: flags, extended: extended, expiry: expiry, version: version, marks: tombstone ? ItemMarks.tombstone : 0)
    }

    var tombstone: Bool { marks & ItemMarks.tombstone != 0 }
    var stale: Bool { marks & ItemMarks.stale != 0 }
    var negative: Bool { marks & ItemMarks.negative != 0 }

    func isLive(now: Int64) -> Bool { !tombstone && (expiry == 0 || expiry > now) }
    /// Live, and written at or after `oldestVersion` (a store's `maxAge`: `MaxAge.oldestVersion`).
    func isLive(now: Int64, oldestVersion: UInt64) -> Bool { isLive(now: now) && version >= oldestVersion }
    /// Whether a store's `maxAge` hides this item: older than `oldestVersion`, not a tombstone
    /// (tombstones keep their own lifetime).
    func isAged(oldestVersion: UInt64) -> Bool { !tombstone && version < oldestVersion }
    /// Whether this state still guards against older writes (live, or an unexpired tombstone).
    func guards(now: Int64) -> Bool { expiry == 0 || expiry > now }
}

/// The bits of an item's marks (one byte in memory records, the `tombstone` column on disk,
/// and in the checksum). A live item may be stale, negative, or both.
enum ItemMarks {
    /// A versioned remove's tombstone.
    static let tombstone: UInt8 = 1
    /// Marked stale by an invalidate: still served, flagged, until a new write.
    static let stale: UInt8 = 2
    /// A negative entry: "this key failed to load"; the value is the failure's message.
    static let negative: UInt8 = 4
}

/// A store's `maxAge` (SDWebImage's `maxCacheAge`) in the units items carry: an item whose
/// version (its write's time in µs) is older than `now − maxAge` is treated as expired.
struct MaxAge: Sendable {
    /// 0 = no limit.
    let micros: Int64

    init(seconds: Double) { micros = seconds > 0 ? Int64(min(seconds, 1e12) * 1_000_000) : 0 }

    /// The oldest version a live item may have at `now` (0 when there is no limit).
    @inline(__always)
    func oldestVersion(now: Int64) -> UInt64 { micros > 0 && now > micros ? UInt64(now - micros) : 0 }

    /// The expiry a reader is told: the earlier of the item's own and the moment it turns too old.
    func effectiveExpiry(_ s: ItemState) -> Int64? {
        guard micros > 0, !s.tombstone else { return s.expiry == 0 ? nil : s.expiry }
        let agedAt = Int64(clamping: s.version) &+ micros
        return s.expiry == 0 ? agedAt : min(s.expiry, agedAt)
    }
}
