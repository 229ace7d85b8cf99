import StrataCore

// Read-through and images: the facade's calls built on the backends' leases, single flights
// and image operations.

extension StrataCache {
    /// The cached value of `key`, or `loader`'s, run **once** among every caller that misses
    /// at the same time: in this process one load per key (single flight); on a cluster also
    /// across processes (the owner node grants one lease, the others wait for the fill; see
    /// `ClusterClient.getOrLoad`). The loaded value is stored with `ttl` (nil: the backend's
    /// default) and returned to every waiter.
    ///
    /// A loader error reaches the callers that shared the load as `.loadFailed` (with the
    /// loader's own error as `underlying` in the caller that ran it); with
    /// `options.negativeTTL` it is remembered and served as `.loadFailed` without running the
    /// loader until it expires. Cancelling the caller ends its wait; a load it started runs on
    /// for the callers that share it and still stores its value. A loader that reads its own
    /// key through this cache — directly, through the loaders it calls, or through another
    /// task's load in this process that waits for it (P's loader reads Q while Q's reads P) —
    /// makes that read fail at once with `.invalidArgument` (its loader's caller then gets
    /// `.loadFailed`): it would otherwise wait for its own load forever. Loads in other
    /// processes are not seen: such a cycle through a cluster's leases waits for
    /// `options.maxWait`. A `ttl` must be positive (`.invalidArgument`).
    public func value<Value: Codable & Sendable>(for key: some CacheKey, ttl: Duration? = nil,
                                                 options: ReadThroughOptions = ReadThroughOptions(),
                                                 loader: @escaping @Sendable () async throws -> Value) async throws -> Value {
        try await readThrough(key, ttl: ttl, options: options, loader: loader).value
    }

    /// `value(for:ttl:options:loader:)` with the version and where the value came from
    /// (`.cache`, `.loaded`, `.waited`, …), for hit ratios.
    public func readThrough<Value: Codable & Sendable>(_ key: some CacheKey, ttl: Duration? = nil,
                                                       options: ReadThroughOptions = ReadThroughOptions(),
                                                       loader: @escaping @Sendable () async throws -> Value) async throws -> ReadThroughResult<Value> {
        let k = try checked(key)
        // As `set` refuses it, on every backend (the embedded store returned the value without
        // storing it, a cluster refused it: an outside review, api2).
        if let t = ttl, t <= .zero {
            throw CacheError(.invalidArgument, status: .invalidArgument, "a TTL must be positive, got \(t)")
        }
        let (b, ns) = (backend, namespaceBytes)
        // A loader that reads its own key through the cache — directly, through other loaders,
        // or through another task's load that waits on one of this task's (P loads and reads
        // Q while Q's loader reads P) — would wait for its own load forever (outside reviews
        // api1, api2): refused at once (`LoadCycles`).
        let loading = LoadingKey(backend: b.identity, namespace: ns, key: k)
        let ancestors = LoadCycles.running
        if let cycle = LoadCycles.shared.wouldWait(on: loading, ancestors: ancestors) {
            throw CacheError(.invalidArgument, status: .invalidArgument, "the loader of \(quotedKey(cycle)) read \(quotedKey(k)) through the cache, and that load waits for it (directly or through other loaders): it would wait for its own load forever")
        }
        defer { LoadCycles.shared.doneWaiting(ancestors, on: loading) }
        let expiry: CacheExpiry = ttl.map { .after($0) } ?? .storeDefault
        let run = LoaderRun()
        let blocking = run.blocking { [self] in
            let marker = LoadCycles.shared.started(loading)
            defer { LoadCycles.shared.finished(marker) }
            return try await LoadCycles.$running.withValue(ancestors + [marker]) { try self.encode(try await loader()) }
        }
        let raw: RawLoaded
        do {
            raw = try await Offload.run { try b.readThrough(k, namespace: ns, expiry: expiry, options: options, loader: blocking) }
        } catch let e as CacheError where e.code == .loadFailed {
            // The cluster client passes a loader's error on as text: give back the error itself.
            if let original = run.loaderError { throw CacheError(.loadFailed, e.message, underlying: original) }
            throw e
        }
        return ReadThroughResult(value: try decode(Value.self, raw.value), version: raw.version, origin: raw.origin)
    }


    // MARK: Images

    /// The image under `key`: what its headers say (format, size, alpha, animation) and a
    /// handle for variants. Nil on a miss; `.invalidImage` when the value is not an image.
    /// Cluster: one META to the key's owner. Embedded: reads the value and its headers.
    public func image(_ key: some CacheKey) async throws -> CachedImage? {
        let k = try checked(key)
        let (b, ns) = (backend, namespaceBytes)
        guard let facts = try await Offload.run({ try b.imageFacts(k, namespace: ns) }) else { return nil }
        return CachedImage(cache: self, key: k, facts: facts)
    }
}

/// A cached image: its facts, and resized variants of it.
public struct CachedImage: Sendable {
    let cache: StrataCache
    /// The original's key.
    public let key: [UInt8]
    /// What the original's headers said when `image(_:)` read them.
    public let facts: ImageFacts

    /// A copy resized into `width` × `height` (never enlarged), as WebP (quality 0–100, nil =
    /// lossless) or PNG. Cluster: computed once on the original's node and stored there (later
    /// requests are `cached`; a new version of the original drops its variants). Embedded:
    /// decoded, resized and encoded on every call. `.notFound` when the original is gone;
    /// `.invalidImage` for a GIF or JPEG original (variants are made of PNG and WebP only).
    public func variant(width: Int, height: Int, fit: VariantFit = .contain, format: VariantFormat = .webp,
                        quality: Int? = 80) async throws -> ImageVariant {
        guard (1...Int(UInt16.max)).contains(width), (1...Int(UInt16.max)).contains(height) else {
            throw CacheError(.invalidArgument, status: .invalidArgument, "a variant's box is 1 to 65535 pixels a side, got \(width)×\(height)")
        }
        if let q = quality, !(0...100).contains(q) {
            throw CacheError(.invalidArgument, status: .invalidArgument, "quality is 0 to 100 (nil: lossless), got \(q)")
        }
        let spec = VariantSpecification(width: width, height: height, fit: fit, format: format, quality: quality)
        let (b, ns, k) = (cache.backend, cache.namespaceBytes, key)
        guard let v = try await Offload.run({ try b.variant(k, namespace: ns, spec: spec) }) else {
            throw CacheError(.notFound, status: .notFound, "the original image is gone")
        }
        return v
    }
}
