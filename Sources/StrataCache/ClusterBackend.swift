import Foundation
import StrataClient
import StrataCore
import StrataWire

/// The facade over a `ClusterClient`, through its public API only: the client's placement,
/// replication, read repair and leases are what the facade gets. Namespace-wide operations
/// (flush, stats) go to every node of the configuration with `onNode`.
struct ClusterBackend: CacheBackend {
    let client: ClusterClient
    var identity: ObjectIdentifier { ObjectIdentifier(client) }

    private var clock: any Clock { client.configuration.clock }

    /// The wire's expiry: whole seconds stay relative (the node's clock counts them); a
    /// fraction of a second becomes an absolute time from the client's clock.
    func wireExpiry(_ e: CacheExpiry) throws -> WireExpiry {
        switch e {
        case .storeDefault: return .storeDefault
        case .never: return .never
        case .after(let d):
            let us = d.micros
            guard us > 0 else { throw CacheError(.invalidArgument, status: .invalidArgument, "a TTL must be positive, got \(d)") }
            if us % 1_000_000 == 0 && us / 1_000_000 <= Int64(Int32.max) { return .seconds(us / 1_000_000) }
            // Past Int64's microseconds (~292,000 years): the latest time there is, as the
            // embedded store keeps it.
            let (at, over) = clock.nowMicros().addingReportingOverflow(us)
            return .at(unixMicros: over ? .max : at)
        case .at(let date):
            let us = Int64((date.timeIntervalSince1970 * 1e6).rounded())
            guard us > 0 else { throw CacheError(.invalidArgument, status: .invalidArgument, "an expiry date must be after 1970") }
            return .at(unixMicros: us)
        }
    }

    func get(_ key: [UInt8], namespace: [UInt8]) throws -> RawItem? {
        guard let i = try client.get(key, namespace: namespace) else { return nil }
        return RawItem(value: i.value, version: i.version, expiresAtMicros: i.expiresAt == 0 ? nil : i.expiresAt, flags: i.flags,
                       extended: i.extended, tier: i.tier == 0 ? nil : Tiers(rawValue: i.tier), stale: i.stale, negative: i.negative)
    }

    func set(_ key: [UInt8], _ value: [UInt8], namespace: [UInt8], expiry: CacheExpiry, options: WriteOptions) throws -> UInt64 {
        guard options.tiers == .all else {
            throw CacheError(.unsupported, "a cluster places copies itself (owner in every tier, replicas on disk); WriteOptions.tiers must be .all")
        }
        let (mode, cas): (SetModeCode, UInt64) = switch options.mode {
        case .set: (.set, 0)
        case .add: (.add, 0)
        case .replace: (.replace, 0)
        case .cas(let v): (.cas, v)
        }
        let outcome = try client.set(key, value, namespace: namespace, expiry: try wireExpiry(expiry), flags: options.flags,
                                     extended: options.extended, mode: mode, casVersion: cas, writeBehind: options.writeBehind)
        switch outcome {
        case .stored(let v): return v
        case .exists: throw CacheError(.exists, status: .exists, "the key is present (add)")
        case .notFound: throw CacheError(.notFound, status: .notFound, "the key is absent (\(options.mode == .replace ? "replace" : "cas"))")
        case .casMismatch(let current): throw CacheError(.casMismatch, status: .casMismatch, "the stored version is \(current)")
        case .leaseLost: throw CacheError(.internalError, status: .leaseLost, "lease lost")
        }
    }

    func remove(_ key: [UInt8], namespace: [UInt8]) throws -> Bool {
        try client.delete(key, namespace: namespace)
    }

    func invalidate(_ key: [UInt8], namespace: [UInt8]) throws -> Bool {
        try client.invalidate(key, namespace: namespace)
    }

    func touch(_ key: [UInt8], namespace: [UInt8], expiry: CacheExpiry) throws -> Bool {
        try client.touch(key, namespace: namespace, expiry: try wireExpiry(expiry))
    }

    func counter(_ key: [UInt8], namespace: [UInt8], delta: UInt64, decrement: Bool, initial: UInt64?) throws -> UInt64? {
        try client.counter(key, delta: delta, decrement: decrement, namespace: namespace, initial: initial)
    }

    /// FLUSH of the namespace on every node (`ClusterClient.flushEverywhere`: one flush mark on
    /// cluster nodes). A node that cannot be reached keeps its copies until it gets the mark
    /// (or, a node without `--cluster`, for good), so the call fails naming it.
    func flush(namespace: [UInt8]) throws {
        var failures: [String] = []
        var firstStatus: CacheError?
        for (node, error) in client.flushEverywhere(namespace: namespace, all: false) {
            let e = CacheError.mapping(error)
            if e.status != nil && firstStatus == nil { firstStatus = e }
            failures.append("\(node): \(error)")
        }
        guard failures.isEmpty else {
            let message = "flush of the namespace failed on \(failures.count) of \(client.configuration.nodes.count) nodes (\(failures.joined(separator: "; ")))"
            if let s = firstStatus { throw CacheError(s.code, status: s.status, message, underlying: s.underlying) }
            throw CacheError(.unavailable, message)
        }
    }

    /// One node's answer to STATS `namespace` (PROTOCOL.md §7.13.1).
    private struct NodeAnswer: Decodable {
        var namespace: String?
        var items, bytes, hits, misses, sets, writes: Int?
    }

    /// STATS `namespace` on every node, summed; unreachable nodes are listed, not fatal,
    /// unless none answered.
    func namespaceStats(_ namespace: [UInt8]) throws -> NamespaceStats {
        var total = NamespaceStats()
        var lastError: (any Error)?
        for node in client.configuration.nodes {
            do {
                let json = try client.onNode(node.name) { try $0.stats(.one(namespace)) }
                let a = try JSONDecoder().decode(NodeAnswer.self, from: Data(json.utf8))
                guard a.namespace != nil else {
                    throw CacheError(.unsupported, "\(node.name) predates per-namespace STATS (PROTOCOL.md §7.13.1)")
                }
                var s = NamespaceStats()
                s.items = a.items ?? 0; s.bytes = a.bytes ?? 0; s.hits = a.hits ?? 0
                s.misses = a.misses ?? 0; s.sets = a.sets ?? 0; s.writes = a.writes ?? 0
                total.items += s.items; total.bytes += s.bytes; total.hits += s.hits
                total.misses += s.misses; total.sets += s.sets; total.writes += s.writes
                total.byNode[node.name] = s
            } catch let e as CacheError where e.code == .unsupported {
                throw e
            } catch {
                lastError = error
                total.unreachable.append(node.name)
            }
        }
        if total.byNode.isEmpty, let e = lastError { throw e }
        return total
    }

    func imageFacts(_ key: [UInt8], namespace: [UInt8]) throws -> ImageFacts? {
        guard let m = try client.meta(key, namespace: namespace) else { return nil }
        guard let format = ImageFacts.Format(rawValue: m.imageFormat) else {
            throw CacheError(.invalidImage, status: .invalidImage, "the value is not an image the node recognises")
        }
        return ImageFacts(format: format, width: Int(m.imageWidth), height: Int(m.imageHeight), hasAlpha: m.imageFlags & 1 != 0,
                          animated: m.imageFlags & 2 != 0, frames: Int(m.imageFrames), byteCount: Int(m.size), version: m.version)
    }

    func variant(_ key: [UInt8], namespace: [UInt8], spec: VariantSpecification) throws -> ImageVariant? {
        var r = VariantRequest(key: key, maxWidth: UInt16(spec.width), maxHeight: UInt16(spec.height), namespace: namespace)
        r.fit = spec.fit.rawValue
        r.format = spec.format.rawValue
        r.quality = spec.quality.map { UInt8($0) } ?? 255
        let f = try client.variant(r)
        if f.statusCode == .notFound { return nil }
        guard f.statusCode == .ok else {
            throw CacheError.from(status: f.statusCode, String(decoding: f.value, as: UTF8.self))
        }
        let v = try Responses.parseImageVariant(f)
        return ImageVariant(bytes: v.bytes, width: Int(v.width), height: Int(v.height), format: spec.format, cached: v.cached)
    }

    func readThrough(_ key: [UInt8], namespace: [UInt8], expiry: CacheExpiry, options: ReadThroughOptions,
                     loader: @escaping @Sendable () throws -> [UInt8]) throws -> RawLoaded {
        let load = LoadOptions(negativeTTL: options.negativeTTL.map(\.seconds), refreshAhead: options.refreshAhead.seconds,
                               maxWait: options.maxWait.seconds, flags: options.flags)
        let v = try client.getOrLoad(key, namespace: namespace, ttl: try wireExpiry(expiry), options: load, loader: loader)
        return RawLoaded(value: v.value, version: v.version, origin: LoadOrigin(rawValue: v.origin.rawValue) ?? .cache)
    }

    func close() {}
}
