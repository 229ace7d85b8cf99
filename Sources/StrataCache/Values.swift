import Foundation
import StrataCore
@_exported import struct StrataCore.Tiers // see CacheError.swift

/// Which storage tiers an operation touches (memory, disk, or both), as in YYImageCacheType.
public typealias CacheTiers = StrataCore.Tiers

/// Something usable as a key or a namespace name: its exact bytes are what is stored.
/// `String` (its UTF-8) and `[UInt8]` conform.
public protocol CacheKey: Sendable {
    /// The bytes the protocol and the store see.
    var cacheKeyBytes: [UInt8] { get }
}

extension String: CacheKey {
    /// The string's UTF-8.
    public var cacheKeyBytes: [UInt8] { Array(utf8) }
}

extension Array: CacheKey where Element == UInt8 {
    /// The bytes themselves.
    public var cacheKeyBytes: [UInt8] { self }
}

/// Turns values into stored bytes and back. `[UInt8]`, `String` (UTF-8) and `Data` are stored
/// as their own bytes and never reach the coder; every other `Codable` goes through it.
public protocol CacheCoder: Sendable {
    /// The stored form of `value`.
    func encode<T: Encodable>(_ value: T) throws -> [UInt8]
    /// A `T` from its stored form; throws when the bytes are not one.
    func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T
}

/// The default coder: JSON through Foundation. A new encoder and decoder per call (they are
/// not `Sendable`), made by the closures given, so date and key strategies can be chosen.
public struct JSONCacheCoder: CacheCoder {
    let makeEncoder: @Sendable () -> JSONEncoder
    let makeDecoder: @Sendable () -> JSONDecoder

    /// A coder using the encoders and decoders these closures make (plain ones by default).
    public init(encoder: @escaping @Sendable () -> JSONEncoder = { JSONEncoder() },
                decoder: @escaping @Sendable () -> JSONDecoder = { JSONDecoder() }) {
        makeEncoder = encoder; makeDecoder = decoder
    }

    /// `value` as JSON.
    public func encode<T: Encodable>(_ value: T) throws -> [UInt8] { [UInt8](try makeEncoder().encode(value)) }
    /// A `T` from JSON.
    public func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        try makeDecoder().decode(type, from: Data(bytes))
    }
}

/// When a written item expires.
public enum CacheExpiry: Sendable, Equatable {
    /// The store's or node's default TTL (none unless configured).
    case storeDefault
    /// Never.
    case never
    /// This long after the write (on a cluster: whole seconds are counted by the node's clock;
    /// a fraction of a second makes it an absolute time from the client's clock).
    case after(Duration)
    /// At this moment.
    case at(Date)

    /// `.after(duration)`.
    public static func ttl(_ duration: Duration) -> CacheExpiry { .after(duration) }
}

/// What a write does when the key is (or is not) present.
public enum WriteMode: Sendable, Equatable {
    /// Store unconditionally.
    case set
    /// Store only when absent; else `CacheError.Code.exists`.
    case add
    /// Store only when present; else `CacheError.Code.notFound`.
    case replace
    /// Store only when the stored version is this one; else `.casMismatch` (or `.notFound`).
    case cas(version: UInt64)
}

/// Options of a write. The defaults: unconditional, client flags 0, no extended data, every
/// tier, acknowledged once durable.
public struct WriteOptions: Sendable, Equatable {
    /// Unconditional, or add / replace / compare-and-swap.
    public var mode: WriteMode = .set
    /// The client's flags, returned untouched with the item (memcached).
    public var flags: UInt32 = 0
    /// Up to 4 KiB kept beside the value (YYDiskCache's extended data: an image's scale).
    public var extended: [UInt8] = []
    /// Where to write. Embedded store only: a cluster places copies itself (the owner in every
    /// tier, replicas on disk) and refuses anything but `.all` with `.unsupported`.
    public var tiers: CacheTiers = .all
    /// Return before the disk write is in the log (may be lost in a crash); on a cluster, each
    /// node answers before its log has it.
    public var writeBehind = false
    /// Options with the defaults above, changed where given.
    public init(mode: WriteMode = .set, flags: UInt32 = 0, extended: [UInt8] = [], tiers: CacheTiers = .all, writeBehind: Bool = false) {
        self.mode = mode; self.flags = flags; self.extended = extended; self.tiers = tiers; self.writeBehind = writeBehind
    }
}

/// An item as a read returns it: the decoded value and what the cache knows about it.
public struct CachedItem<Value> {
    /// The stored value, decoded.
    public var value: Value
    /// The item's version (a CAS token for `WriteMode.cas`).
    public var version: UInt64
    /// When it expires; nil = never.
    public var expiresAt: Date?
    /// The client flags written with it.
    public var flags: UInt32
    /// The extended data written with it.
    public var extended: [UInt8]
    /// The tier that answered (memory or disk), when the backend says.
    public var tier: CacheTiers?
    /// Marked stale by an invalidation: still served until someone refreshes it.
    public var stale: Bool
}

extension CachedItem: Sendable where Value: Sendable {}
extension CachedItem: Equatable where Value: Equatable {}

/// Options of a read-through (`StrataCache.value(for:ttl:options:loader:)`).
public struct ReadThroughOptions: Sendable {
    /// Remember a failed load this long (a negative entry): callers get `.loadFailed` without
    /// running the loader until it expires. Nil: failures are not remembered.
    public var negativeTTL: Duration? = nil
    /// Cluster only: the first reader in the last stretch of the TTL refreshes the value under
    /// the lease while the others keep getting it. Zero = off. The embedded store ignores it.
    public var refreshAhead: Duration = .zero
    /// Cluster only: the longest wait for another process's load before loading anyway.
    public var maxWait: Duration = .seconds(10)
    /// Client flags stored with a loaded value.
    public var flags: UInt32 = 0
    /// Options with the defaults above, changed where given.
    public init(negativeTTL: Duration? = nil, refreshAhead: Duration = .zero, maxWait: Duration = .seconds(10), flags: UInt32 = 0) {
        self.negativeTTL = negativeTTL; self.refreshAhead = refreshAhead; self.maxWait = maxWait; self.flags = flags
    }
}

/// Where a read-through's value came from.
public enum LoadOrigin: String, Sendable {
    /// A fresh cached value.
    case cache
    /// A stale cached value (someone else is refreshing it, or this caller's refresh failed).
    case stale
    /// The key was missing; this caller ran the loader.
    case loaded
    /// The value was stale or near expiry; this caller refreshed it.
    case refreshed
    /// Another caller (in this process or elsewhere) loaded it while this one waited.
    case waited
}

/// A read-through's value and where it came from.
public struct ReadThroughResult<Value> {
    /// The value, decoded.
    public var value: Value
    /// The stored version (0 when the loaded value could not be stored).
    public var version: UInt64
    /// Where it came from.
    public var origin: LoadOrigin
    /// Whether the value came from the cache (`.cache`, `.stale`, `.waited`) rather than from
    /// this caller's loader.
    public var isHit: Bool { origin == .cache || origin == .stale || origin == .waited }
}

extension ReadThroughResult: Sendable where Value: Sendable {}

/// One namespace's counters (PROTOCOL.md §7.13.1; `TieredCache.namespaceStats` embedded).
/// On a cluster, the nodes' answers summed: `items` and `bytes` count every copy (owner and
/// replicas), the others every request each node served.
public struct NamespaceStats: Sendable, Equatable {
    /// Live items on disk (items written to memory only are not counted).
    public var items = 0
    /// Their value bytes before compression.
    public var bytes = 0
    /// Reads (GET and what is built on it) that found a live item.
    public var hits = 0
    /// Reads that did not.
    public var misses = 0
    /// SETs of any mode and outcome.
    public var sets = 0
    /// Every write (SET, DELETE, TOUCH, INVALIDATE, INCR, DECR).
    public var writes = 0
    /// Cluster only: each node's own figures, by node name.
    public var byNode: [String: NamespaceStats] = [:]
    /// Cluster only: nodes that could not be asked (their figures are missing from the sums).
    public var unreachable: [String] = []
    /// All zeros.
    public init() {}
    /// hits / (hits + misses), or nil before any read.
    public var hitRatio: Double? { hits + misses == 0 ? nil : Double(hits) / Double(hits + misses) }
}

/// What an image's headers say (nothing is decoded to learn it).
public struct ImageFacts: Sendable, Equatable {
    /// Image formats, numbered as PROTOCOL.md §7.10 numbers them.
    public enum Format: UInt8, Sendable {
        /// PNG, APNG, WebP (lossy, lossless, animated), GIF, JPEG.
        case png = 1, apng, webpLossy, webpLossless, webpAnimated, gif, jpeg
    }
    /// The format, from the magic bytes.
    public var format: Format
    /// Pixels across, from the header.
    public var width: Int
    /// Pixels down, from the header.
    public var height: Int
    /// Whether it has an alpha channel.
    public var hasAlpha: Bool
    /// Whether it is an animation (APNG, animated WebP, GIF with frames).
    public var animated: Bool
    /// Frames (1 for a still image; 0 where the header does not say).
    public var frames: Int
    /// The original's size in bytes.
    public var byteCount: Int
    /// The original's version (variants follow it: a new version drops them).
    public var version: UInt64
}

/// How a variant fills its box.
public enum VariantFit: UInt8, Sendable {
    /// Keep the aspect ratio inside the box.
    case contain = 0
    /// Fill the box, cropping the centre.
    case cover = 1
}

/// A variant's encoding.
public enum VariantFormat: UInt8, Sendable {
    /// WebP (lossy at a quality, or lossless).
    case webp = 0
    /// PNG (lossless).
    case png = 1
}

/// A resized copy of a cached image: its bytes and size.
public struct ImageVariant: Sendable, Equatable {
    /// The encoded variant.
    public var bytes: [UInt8]
    /// Its width in pixels.
    public var width: Int
    /// Its height in pixels.
    public var height: Int
    /// Its encoding.
    public var format: VariantFormat
    /// Served from a stored variant rather than computed for this request (cluster); the
    /// embedded store computes every variant it is asked for, so this is false there.
    public var cached: Bool
}
