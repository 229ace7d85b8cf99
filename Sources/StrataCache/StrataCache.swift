import Foundation
import StrataClient
import StrataCore
import StrataStore

/// Strata from Swift: typed keys and values, `Duration` expiry, namespace handles, images and
/// read-through, over a cluster of nodes or an in-process tiered cache — the same calls for
/// both, so a service can start embedded and move to a cluster by changing one line:
///
/// ```swift
/// let cache = try StrataCache(.directory("/var/cache/myapp"))      // in-process
/// let cache = try StrataCache(.nodes(["10.0.0.1:7400", "10.0.0.2:7400"]))  // a cluster
/// try await cache.set("greeting", "hello", ttl: .seconds(60))
/// let user = cache.namespace("user-42")
/// let profile = try await user.value(for: "profile", ttl: .seconds(300)) { try await db.profile(42) }
/// ```
///
/// Guarantees:
/// - `Sendable`: a value type holding the shared backend; copy it into actors and task groups.
///   A `namespace(_:)` handle is the same cache scoped to one namespace.
/// - Misses are `nil`; every failure is a `CacheError` with the protocol's status inside.
/// - `[UInt8]`, `String` (UTF-8) and `Data` values are stored as their bytes; any other
///   `Codable` goes through the `CacheCoder` (JSON by default).
/// - Cancelling the calling task ends its wait at once with `CacheError.Code.cancelled`; the
///   operation already sent is not undone (see `Offload`).
/// - No Dispatch in the async paths: every backend call is blocking and runs on StrataCore's
///   `BlockingPool` (threads of its own).
///
/// Costs: one pool-thread hand-off per call on top of the backend's call (a cluster call is
/// one request to the key's owner for a read, one per copy for a write) — measured at 2–3 µs
/// over the cluster client's own async form (bench/RESULTS.md); typed values add their
/// coding. N calls in flight at once hold N pool threads and, on a cluster, up to N
/// connections per node (`ClusterConfiguration.maxIdleConnectionsPerNode` are kept idle).
public struct StrataCache: Sendable {
    /// Where the cache lives.
    public enum Backend: Sendable {
        /// A cluster given as `HOST:PORT` strings, one node each — or `dns:NAME:PORT` (every
        /// address NAME resolves to, resolved at init) or `file:PATH` (the entries in the file)
        /// as the CLI's `--nodes` takes them (2 copies per key, every copy acknowledged).
        case nodes([String])
        /// A cluster with every setting of the client (replicas, acknowledgement, timeouts, token).
        case cluster(ClusterConfiguration)
        /// An existing cluster client (shared with other code; never closed by the facade).
        case clusterClient(ClusterClient)
        /// An embedded store in this directory (created with its missing parents), with the
        /// store's defaults: its events (a log replayed after a crash, …) go to standard error;
        /// `.embedded` with `StoreConfiguration.log` routes or silences them.
        case directory(String)
        /// An embedded store with every setting, and the clock it takes time from (a
        /// `ManualClock` in tests).
        case embedded(StoreConfiguration, clock: any StrataCore.Clock = SystemClock())
        /// An open store (shared with other code; never closed by the facade).
        case store(TieredCache)
    }

    let backend: any CacheBackend
    let coder: any CacheCoder
    /// The namespace this handle reads and writes (empty: the default namespace).
    public let namespaceBytes: [UInt8]

    /// Opens the backend: connects nothing yet for a cluster (connections open on first use);
    /// opens (creating when needed) the data directory for an embedded store.
    public init(_ backend: Backend, coder: any CacheCoder = JSONCacheCoder()) throws {
        do {
            switch backend {
            case .nodes(let list):
                var addresses: [NodeAddress] = []
                for s in list {
                    // `dns:NAME:PORT` and `file:PATH` entries, as the CLI's --nodes takes them:
                    // resolved (or read) now, so a bad one fails here, not at the first call.
                    if s.hasPrefix("dns:") || s.hasPrefix("file:") {
                        do { addresses += try NodeAddress.parseList(s, option: "nodes") } catch {
                            throw CacheError(.invalidArgument, "'\(s)': \(error)")
                        }
                        continue
                    }
                    guard let a = NodeAddress.parse(s) else {
                        throw CacheError(.invalidArgument, s.contains(",") ? "'\(s)' names several nodes: give one HOST:PORT per element"
                                                                          : "'\(s)' is not HOST:PORT")
                    }
                    addresses.append(a)
                }
                self.backend = ClusterBackend(client: try ClusterClient(configuration: ClusterConfiguration(nodes: addresses)))
            case .cluster(let c): self.backend = ClusterBackend(client: try ClusterClient(configuration: c))
            case .clusterClient(let c): self.backend = ClusterBackend(client: c)
            case .directory(let d): self.backend = EmbeddedBackend(store: try TieredCache(configuration: StoreConfiguration(directory: d)), ownsStore: true)
            case .embedded(let c, let clock): self.backend = EmbeddedBackend(store: try TieredCache(configuration: c, clock: clock), ownsStore: true)
            case .store(let s): self.backend = EmbeddedBackend(store: s, ownsStore: false)
            }
        } catch {
            throw CacheError.mapping(error)
        }
        self.coder = coder
        self.namespaceBytes = []
    }

    private init(backend: any CacheBackend, coder: any CacheCoder, namespace: [UInt8]) {
        self.backend = backend; self.coder = coder; self.namespaceBytes = namespace
    }

    /// The same cache scoped to one namespace (MMKV's per-user scope): its keys never meet
    /// another namespace's, and `removeAll()` empties only it. Names are at most 64 bytes
    /// (checked on each call). Cheap: no I/O.
    public func namespace(_ name: some CacheKey) -> StrataCache {
        StrataCache(backend: backend, coder: coder, namespace: name.cacheKeyBytes)
    }

    /// Releases the backend: an embedded store opened by this cache finishes its writes and
    /// releases its directory (later calls fail with `.closed`). A cluster, or a client or
    /// store passed in, is left as it is. Every handle of this cache shares the backend.
    public func close() { backend.close() }

    // MARK: Checks and coding

    func checked(_ key: some CacheKey) throws -> [UInt8] {
        let k = key.cacheKeyBytes
        guard !k.isEmpty, k.count <= ItemLimits.maxKeyBytes else {
            throw CacheError(.invalidArgument, status: .invalidArgument, "a key is 1 to \(ItemLimits.maxKeyBytes) bytes, got \(k.count)")
        }
        guard namespaceBytes.count <= ItemLimits.maxNamespaceBytes else {
            throw CacheError(.invalidArgument, status: .invalidArgument,
                             "a namespace is at most \(ItemLimits.maxNamespaceBytes) bytes, got \(namespaceBytes.count)")
        }
        return k
    }

    func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        if let b = value as? [UInt8] { return b }
        if let s = value as? String { return Array(s.utf8) }
        if let d = value as? Data { return [UInt8](d) }
        do { return try coder.encode(value) } catch {
            throw CacheError(.encoding, "cannot encode \(T.self): \(error)", underlying: error)
        }
    }

    func decode<T: Decodable>(_ type: T.Type, _ bytes: [UInt8]) throws -> T {
        if T.self == [UInt8].self { return bytes as! T }
        if T.self == String.self {
            guard let s = String(bytes: bytes, encoding: .utf8) else { throw CacheError(.decoding, "the stored value is not UTF-8") }
            return s as! T
        }
        if T.self == Data.self { return Data(bytes) as! T }
        do { return try coder.decode(type, from: bytes) } catch {
            throw CacheError(.decoding, "cannot decode \(T.self) from \(bytes.count) stored bytes: \(error)", underlying: error)
        }
    }

    // MARK: Reads and writes

    /// Stores `value` under `key` in this handle's namespace; returns the item's version.
    /// A conditional `options.mode` that does not store throws `.exists`, `.notFound` or
    /// `.casMismatch`. Waits until the backend acknowledged the write (a cluster: the
    /// acknowledgement policy; embedded: the durability log, unless `writeBehind`).
    @discardableResult
    public func set<Value: Encodable>(_ key: some CacheKey, _ value: Value, expiry: CacheExpiry = .storeDefault,
                                      options: WriteOptions = WriteOptions()) async throws -> UInt64 {
        let k = try checked(key)
        guard options.extended.count <= ItemLimits.maxExtendedBytes else {
            throw CacheError(.tooLarge, status: .tooLarge, "extended data is at most \(ItemLimits.maxExtendedBytes) bytes, got \(options.extended.count)")
        }
        let bytes = try encode(value)
        let (b, ns) = (backend, namespaceBytes)
        return try await Offload.run { try b.set(k, bytes, namespace: ns, expiry: expiry, options: options) }
    }

    /// `set(key, value, expiry: .after(ttl), options:)`.
    @discardableResult
    public func set<Value: Encodable>(_ key: some CacheKey, _ value: Value, ttl: Duration,
                                      options: WriteOptions = WriteOptions()) async throws -> UInt64 {
        try await set(key, value, expiry: .after(ttl), options: options)
    }

    /// The value under `key` decoded as `Value`, or nil on a miss (a remembered load failure
    /// reads as a miss too). `.decoding` when the bytes are not a `Value`.
    public func get<Value: Decodable>(_ key: some CacheKey, as type: Value.Type = Value.self) async throws -> Value? {
        try await item(key, as: type)?.value
    }

    /// The item under `key` with its version, expiry, flags, extended data and the tier that
    /// answered; nil on a miss.
    public func item<Value: Decodable>(_ key: some CacheKey, as type: Value.Type = Value.self) async throws -> CachedItem<Value>? {
        let k = try checked(key)
        let (b, ns) = (backend, namespaceBytes)
        guard let raw = try await Offload.run({ try b.get(k, namespace: ns) }), !raw.negative else { return nil }
        return CachedItem(value: try decode(type, raw.value), version: raw.version,
                          expiresAt: raw.expiresAtMicros.map { Date(timeIntervalSince1970: Double($0) / 1e6) },
                          flags: raw.flags, extended: raw.extended, tier: raw.tier, stale: raw.stale)
    }

    /// Removes `key` (on a cluster, with a versioned tombstone on every copy). Returns whether
    /// it was present.
    @discardableResult
    public func remove(_ key: some CacheKey) async throws -> Bool {
        let k = try checked(key)
        let (b, ns) = (backend, namespaceBytes)
        return try await Offload.run { try b.remove(k, namespace: ns) }
    }

    /// Marks `key` stale (stale-while-revalidate): reads keep getting the value, with
    /// `CachedItem.stale` set, until one read-through caller refreshes it; on a cluster any
    /// lease on the key is revoked, so a load that started before cannot store an old value.
    /// Returns whether the key was present.
    @discardableResult
    public func invalidate(_ key: some CacheKey) async throws -> Bool {
        let k = try checked(key)
        let (b, ns) = (backend, namespaceBytes)
        return try await Offload.run { try b.invalidate(k, namespace: ns) }
    }

    /// Gives `key` a new expiry; false when it is absent.
    @discardableResult
    public func touch(_ key: some CacheKey, expiry: CacheExpiry) async throws -> Bool {
        let k = try checked(key)
        let (b, ns) = (backend, namespaceBytes)
        return try await Offload.run { try b.touch(k, namespace: ns, expiry: expiry) }
    }

    /// Adds `delta` to a decimal counter and returns the new value; when absent, stores
    /// `initial` if given, else returns nil. `.notANumber` for a value that is not one. Wraps
    /// past `UInt64.max` (to `delta` − 1 beyond it), as memcached's incr does.
    public func increment(_ key: some CacheKey, by delta: UInt64 = 1, initial: UInt64? = nil) async throws -> UInt64? {
        let k = try checked(key)
        let (b, ns) = (backend, namespaceBytes)
        return try await Offload.run { try b.counter(k, namespace: ns, delta: delta, decrement: false, initial: initial) }
    }

    /// Subtracts `delta` from a decimal counter, stopping at 0; as `increment` otherwise.
    public func decrement(_ key: some CacheKey, by delta: UInt64 = 1, initial: UInt64? = nil) async throws -> UInt64? {
        let k = try checked(key)
        let (b, ns) = (backend, namespaceBytes)
        return try await Offload.run { try b.counter(k, namespace: ns, delta: delta, decrement: true, initial: initial) }
    }

    /// Empties this handle's namespace in O(1) per node or store (FLUSH of the namespace; on
    /// a cluster every node is asked, and a node that cannot be reached makes it fail).
    public func removeAll() async throws {
        try checkNamespace()
        let (b, ns) = (backend, namespaceBytes)
        try await Offload.run { try b.flush(namespace: ns) }
    }

    /// This namespace's counters (PROTOCOL.md §7.13.1): live items and bytes on disk, hits,
    /// misses, sets, writes. Cost: counts the namespace's rows (O(its items)) on each node or
    /// in the store, after the writes before it are applied.
    public func stats() async throws -> NamespaceStats {
        try checkNamespace()
        let (b, ns) = (backend, namespaceBytes)
        return try await Offload.run { try b.namespaceStats(ns) }
    }

    private func checkNamespace() throws {
        guard namespaceBytes.count <= ItemLimits.maxNamespaceBytes else {
            throw CacheError(.invalidArgument, status: .invalidArgument,
                             "a namespace is at most \(ItemLimits.maxNamespaceBytes) bytes, got \(namespaceBytes.count)")
        }
    }
}
