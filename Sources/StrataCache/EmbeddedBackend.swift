import Foundation
import StrataCore
import StrataImage
import StrataStore

/// The facade over an in-process `TieredCache`: every call is the store's blocking call (the
/// facade runs it on a `BlockingPool` thread, never on the store's Dispatch-based async
/// forms). Image facts and variants come from `StrataImage` on the calling thread; variants
/// are computed on every request (nothing is stored). Read-through shares one load per key
/// among concurrent callers in this process (`SingleFlight`), which is all the sharing there
/// is to do: no other process can open the same data directory. An invalidated (stale) key is
/// refreshed by the first caller while later ones wait for that refresh (not served stale).
final class EmbeddedBackend: CacheBackend, @unchecked Sendable {
    let store: TieredCache
    /// Whether `close()` closes the store (false for a store the caller opened and passed in).
    private let ownsStore: Bool
    private let loads = SingleFlight<ItemKey, RawLoaded>()
    var identity: ObjectIdentifier { ObjectIdentifier(store) }

    init(store: TieredCache, ownsStore: Bool) {
        self.store = store
        self.ownsStore = ownsStore
    }

    func storeExpiry(_ e: CacheExpiry) throws -> Expiry {
        switch e {
        case .storeDefault: return .storeDefault
        case .never: return .never
        case .after(let d):
            guard d > .zero else { throw CacheError(.invalidArgument, status: .invalidArgument, "a TTL must be positive, got \(d)") }
            return .seconds(d.seconds)
        case .at(let date):
            let us = Int64((date.timeIntervalSince1970 * 1e6).rounded())
            guard us > 0 else { throw CacheError(.invalidArgument, status: .invalidArgument, "an expiry date must be after 1970") }
            return .at(unixMicros: us)
        }
    }

    func get(_ key: [UInt8], namespace: [UInt8]) throws -> RawItem? {
        guard let i = try store.get(key, namespace: namespace) else { return nil }
        return RawItem(value: i.value, version: i.version, expiresAtMicros: i.expiresAt, flags: i.flags, extended: i.extended,
                       tier: i.tier, stale: i.stale, negative: i.negative)
    }

    func set(_ key: [UInt8], _ value: [UInt8], namespace: [UInt8], expiry: CacheExpiry, options: WriteOptions) throws -> UInt64 {
        let mode: SetMode = switch options.mode {
        case .set: .set
        case .add: .add
        case .replace: .replace
        case .cas(let v): .cas(v)
        }
        let o = SetOptions(mode: mode, expiry: try storeExpiry(expiry), flags: options.flags, extended: options.extended,
                           tiers: options.tiers, writeBehind: options.writeBehind)
        switch try store.set(key, value, namespace: namespace, options: o) {
        case .stored(let v): return v
        case .exists: throw CacheError(.exists, status: .exists, "the key is present (add)")
        case .notFound: throw CacheError(.notFound, status: .notFound, "the key is absent (\(options.mode == .replace ? "replace" : "cas"))")
        case .casMismatch(let current): throw CacheError(.casMismatch, status: .casMismatch, "the stored version is \(current)")
        case .superseded(let current): throw CacheError(.internalError, status: .superseded, "a newer version (\(current)) is stored")
        }
    }

    func remove(_ key: [UInt8], namespace: [UInt8]) throws -> Bool {
        try store.remove(key, namespace: namespace) == .removed
    }

    func invalidate(_ key: [UInt8], namespace: [UInt8]) throws -> Bool {
        if case .invalidated = try store.invalidate(key, namespace: namespace) { return true }
        return false
    }

    func touch(_ key: [UInt8], namespace: [UInt8], expiry: CacheExpiry) throws -> Bool {
        try store.touch(key, namespace: namespace, expiry: try storeExpiry(expiry))
    }

    func counter(_ key: [UInt8], namespace: [UInt8], delta: UInt64, decrement: Bool, initial: UInt64?) throws -> UInt64? {
        let outcome = decrement ? try store.decrement(key, by: delta, namespace: namespace, initial: initial)
                                : try store.increment(key, by: delta, namespace: namespace, initial: initial)
        switch outcome {
        case .value(let v, _): return v
        case .notFound: return nil
        case .notANumber: throw CacheError(.notANumber, status: .notANumber, "the stored value is not a decimal number")
        case .superseded: throw CacheError(.internalError, "a counter without a version was superseded") // never: no version is given
        }
    }

    func flush(namespace: [UInt8]) throws {
        try store.flush(namespace: namespace)
    }

    func namespaceStats(_ namespace: [UInt8]) throws -> NamespaceStats {
        let n = try store.namespaceStats(namespace)
        var s = NamespaceStats()
        s.items = n.diskItems ?? 0; s.bytes = n.diskBytes ?? 0
        s.hits = n.hits; s.misses = n.misses; s.sets = n.sets; s.writes = n.writes
        return s
    }

    func imageFacts(_ key: [UInt8], namespace: [UInt8]) throws -> ImageFacts? {
        guard let item = try store.get(key, namespace: namespace), !item.negative else { return nil }
        let info = try ImageCodec.inspect(item.value)
        guard let format = ImageFacts.Format(rawValue: info.format.rawValue) else {
            throw CacheError(.invalidImage, status: .invalidImage, "unknown image format \(info.format)")
        }
        return ImageFacts(format: format, width: info.width, height: info.height, hasAlpha: info.hasAlpha, animated: info.animated,
                          frames: info.frameCount, byteCount: item.value.count, version: item.version)
    }

    func variant(_ key: [UInt8], namespace: [UInt8], spec: VariantSpecification) throws -> ImageVariant? {
        guard let item = try store.get(key, namespace: namespace), !item.negative else { return nil }
        let s = VariantSpec(maxWidth: spec.width, maxHeight: spec.height, fit: spec.fit == .cover ? .cover : .contain,
                            format: spec.format == .png ? .png : .webp, quality: spec.quality)
        let v = try ImageCodec.variant(item.value, s)
        return ImageVariant(bytes: v.bytes, width: v.width, height: v.height, format: spec.format, cached: false)
    }

    func readThrough(_ key: [UInt8], namespace: [UInt8], expiry: CacheExpiry, options: ReadThroughOptions,
                     loader: @escaping @Sendable () throws -> [UInt8]) throws -> RawLoaded {
        let r = try loads.run(ItemKey(namespace: namespace, key: key)) {
            try readThroughOnce(key, namespace, expiry, options, loader)
        }
        guard r.shared else { return r.value }
        var v = r.value
        if v.origin == .loaded || v.origin == .refreshed { v.origin = .waited }
        return v
    }

    /// One load, inside the single flight: the cached value, a remembered failure, or the
    /// loader's value stored with `expiry`.
    private func readThroughOnce(_ key: [UInt8], _ ns: [UInt8], _ expiry: CacheExpiry, _ options: ReadThroughOptions,
                                 _ loader: () throws -> [UInt8]) throws -> RawLoaded {
        if let item = try store.get(key, namespace: ns) {
            if item.negative {
                throw CacheError(.loadFailed, status: .negative, "cached failure: " + String(decoding: item.value, as: UTF8.self))
            }
            guard item.stale else { return RawLoaded(value: item.value, version: item.version, origin: .cache) }
            // Invalidated: this caller refreshes it (callers arriving meanwhile share the
            // refresh); if the loader fails, the stale value is still the best answer.
            guard let value = try? loader() else { return RawLoaded(value: item.value, version: item.version, origin: .stale) }
            let version = try? set(key, value, namespace: ns, expiry: expiry, options: WriteOptions(flags: options.flags))
            return RawLoaded(value: value, version: version ?? 0, origin: .refreshed)
        }
        let value: [UInt8]
        do { value = try loader() } catch {
            if let ttl = options.negativeTTL, ttl > .zero {
                var o = SetOptions(expiry: .seconds(ttl.seconds))
                o.negative = true
                _ = try? store.set(key, Array("\(error)".utf8.prefix(4096)), namespace: ns, options: o)
            }
            throw error
        }
        // A value that cannot be stored (disk full) is still the answer; version 0 says so.
        let version = try? set(key, value, namespace: ns, expiry: expiry, options: WriteOptions(flags: options.flags))
        return RawLoaded(value: value, version: version ?? 0, origin: .loaded)
    }

    func close() {
        if ownsStore { store.close() }
    }
}
