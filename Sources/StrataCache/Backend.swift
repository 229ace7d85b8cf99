import StrataCore

/// An item as a backend returns it, before the value is decoded.
struct RawItem: Sendable {
    var value: [UInt8]
    var version: UInt64
    /// µs since the epoch; nil = never.
    var expiresAtMicros: Int64?
    var flags: UInt32
    var extended: [UInt8]
    var tier: Tiers?
    var stale: Bool
    /// A remembered load failure (the value is its message).
    var negative: Bool
}

/// A read-through's raw answer.
struct RawLoaded: Sendable {
    var value: [UInt8]
    var version: UInt64
    var origin: LoadOrigin
}

/// A variant's spec, in the facade's terms.
struct VariantSpecification: Sendable {
    var width: Int
    var height: Int
    var fit: VariantFit
    var format: VariantFormat
    /// 0–100; nil = lossless (WebP).
    var quality: Int?
}

/// What the facade needs from a cache: the cluster (`ClusterBackend`) or the embedded store
/// (`EmbeddedBackend`). Every call is blocking and may throw anything; `StrataCache` runs it
/// on a `BlockingPool` thread and maps the error into `CacheError` (so backends stay free of
/// concurrency and of error mapping). Keys, namespaces and extended data are already checked
/// against the protocol's limits.
protocol CacheBackend: Sendable {
    /// What the backend's loads are single-flighted by: the store, or the cluster client.
    var identity: ObjectIdentifier { get }
    func get(_ key: [UInt8], namespace: [UInt8]) throws -> RawItem?
    /// Stores the value; returns its version. A conditional write that does not store throws
    /// `CacheError` (`.exists`, `.notFound`, `.casMismatch`).
    func set(_ key: [UInt8], _ value: [UInt8], namespace: [UInt8], expiry: CacheExpiry, options: WriteOptions) throws -> UInt64
    /// Whether the key was present.
    func remove(_ key: [UInt8], namespace: [UInt8]) throws -> Bool
    /// Marks the key stale (served, flagged, until a read-through refreshes it); false when absent.
    func invalidate(_ key: [UInt8], namespace: [UInt8]) throws -> Bool
    /// Gives the key a new expiry; false when absent.
    func touch(_ key: [UInt8], namespace: [UInt8], expiry: CacheExpiry) throws -> Bool
    /// Adds (or subtracts) `delta`; nil when absent and no `initial` was given.
    func counter(_ key: [UInt8], namespace: [UInt8], delta: UInt64, decrement: Bool, initial: UInt64?) throws -> UInt64?
    /// Empties the namespace.
    func flush(namespace: [UInt8]) throws
    func namespaceStats(_ namespace: [UInt8]) throws -> NamespaceStats
    /// Nil when absent; throws `.invalidImage` when the value is not an image.
    func imageFacts(_ key: [UInt8], namespace: [UInt8]) throws -> ImageFacts?
    /// Nil when the original is absent.
    func variant(_ key: [UInt8], namespace: [UInt8], spec: VariantSpecification) throws -> ImageVariant?
    /// The cached value or the loader's, loaded once among concurrent callers. `loader` is
    /// blocking here: the facade turns the caller's async loader into one.
    func readThrough(_ key: [UInt8], namespace: [UInt8], expiry: CacheExpiry, options: ReadThroughOptions,
                     loader: @escaping @Sendable () throws -> [UInt8]) throws -> RawLoaded
    /// Releases what the backend holds (the embedded store's data directory). Idempotent.
    func close()
}

extension Duration {
    /// The duration in seconds, as a Double.
    var seconds: Double {
        let c = components
        return Double(c.seconds) + Double(c.attoseconds) / 1e18
    }
    /// Whole microseconds (rounded toward zero), saturating at Int64's bounds: a TTL of
    /// `.seconds(Int64.max / 2)` wrapped to a negative number and a node refused it as "not
    /// positive" while the embedded store took it (an outside review, api1).
    var micros: Int64 {
        let c = components
        let (whole, over) = c.seconds.multipliedReportingOverflow(by: 1_000_000)
        if over { return c.seconds < 0 ? .min : .max }
        let (sum, over2) = whole.addingReportingOverflow(c.attoseconds / 1_000_000_000_000)
        return over2 ? (whole < 0 ? .min : .max) : sum
    }
}
