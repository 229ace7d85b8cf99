#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataWire

/// Options of `ClusterClient.getOrLoad`.
public struct LoadOptions: Sendable {
    /// Remember a failed load for this many seconds (a negative entry, SDWebImage's failed-URL
    /// list): callers in that time get `LoadFailure(cached: true)` without running the loader.
    /// Nil: failures are not remembered.
    public var negativeTTL: Double? = nil
    /// Seconds before expiry in which the first reader refreshes the value (under the lease)
    /// while everyone else keeps getting the still-valid one. 0 = off.
    public var refreshAhead: Double = 0
    /// Longest wait, in seconds, for another caller's load before loading anyway.
    public var maxWait: Double = 10
    /// Client flags stored with a loaded value.
    public var flags: UInt32 = 0
    public init(negativeTTL: Double? = nil, refreshAhead: Double = 0, maxWait: Double = 10, flags: UInt32 = 0) {
        self.negativeTTL = negativeTTL; self.refreshAhead = refreshAhead; self.maxWait = maxWait; self.flags = flags
    }
}

/// What `getOrLoad` returned and where it came from.
public struct LoadedValue: Sendable, Equatable {
    public enum Origin: String, Sendable {
        /// A fresh cached value.
        case cache
        /// A stale (invalidated) value: another caller holds the lease and is refreshing it,
        /// or this caller's refresh failed.
        case stale
        /// The key was missing; this caller ran the loader.
        case loaded
        /// The value was stale or inside the refresh-ahead window; this caller refreshed it.
        case refreshed
        /// Another caller (in this process or elsewhere) loaded it while this one waited.
        case waited
    }
    public var value: [UInt8]
    public var version: UInt64
    public var origin: Origin
    /// Why a value this caller loaded or refreshed was not stored (version 0): the nodes
    /// refused it (larger than their max item size, say) or too few were reachable. Nil when it
    /// was stored, or when the lease was lost to a write meanwhile (that write's value stands).
    public var notStored: String? = nil
    public init(value: [UInt8], version: UInt64, origin: Origin) { self.value = value; self.version = version; self.origin = origin }
}

/// A failed load: the loader's error (in every caller that shared the load), or a negative
/// entry remembered from an earlier failure (`cached`).
public struct LoadFailure: Error, CustomStringConvertible, Sendable {
    public let message: String
    public let cached: Bool
    /// A loader can throw its own `LoadFailure` to choose the message a negative entry keeps.
    public init(message: String, cached: Bool = false) { self.message = message; self.cached = cached }
    public var description: String { cached ? "cached failure: \(message)" : message }
}

extension ClusterClient {
    /// The cached value of `key`, or `loader`'s result, run once among all callers that miss
    /// at the same time: in this process callers share one load (single flight); across
    /// processes and machines the key's owner node grants one lease and tells the other
    /// callers the key is being filled, and they poll until it is (at most `maxWait`, then
    /// they load anyway). The result is stored with `ttl` on the key's nodes and returned to
    /// every waiter. A loader error reaches every caller that shared the load; with
    /// `negativeTTL` it is also stored as a negative entry. A stale key (see `invalidate`) is
    /// served stale to everyone but the lease holder, who refreshes it.
    ///
    /// Cost: one GET with LEASE for a fresh hit (no version comparison across replicas unless
    /// the owner restarted recently); a miss adds the load and one replicated SET. Blocking.
    /// (Disfavored: in async code a closure fits both forms, and the async one is the one to
    /// take there — without this, README's snippet was ambiguous inside an async function.)
    @_disfavoredOverload
    public func getOrLoad(_ key: [UInt8], namespace: [UInt8] = [], ttl: WireExpiry = .storeDefault,
                          options: LoadOptions = LoadOptions(), loader: () throws -> [UInt8]) throws -> LoadedValue {
        let r = try loadFlights.run(ItemKey(namespace: namespace, key: key)) { try readThrough(key, namespace, ttl, options, loader) }
        guard r.shared else { return r.value }
        var v = r.value
        if v.origin == .loaded || v.origin == .refreshed { v.origin = .waited }
        return v
    }

    /// The async form: the loader runs as a task; the waiting happens on a worker thread.
    public func getOrLoad(_ key: [UInt8], namespace: [UInt8] = [], ttl: WireExpiry = .storeDefault,
                          options: LoadOptions = LoadOptions(),
                          loader: @escaping @Sendable () async throws -> [UInt8]) async throws -> LoadedValue {
        try await offload {
            try self.getOrLoad(key, namespace: namespace, ttl: ttl, options: options) {
                let done = Completion<Result<[UInt8], Error>>()
                Task {
                    do { done.fulfil(.success(try await loader())) } catch { done.fulfil(.failure(error)) }
                }
                return try done.wait().get()
            }
        }
    }

    /// One caller's read-through, outside the in-process single flight.
    private func readThrough(_ key: [UInt8], _ ns: [UInt8], _ ttl: WireExpiry, _ options: LoadOptions,
                             _ loader: () throws -> [UInt8]) throws -> LoadedValue {
        let clock = configuration.clock
        let deadline = clock.nowMicros() + Int64(min(max(options.maxWait, 0), 1e9) * 1e6)
        var delay = 0.002
        var waited = false
        let refreshMillis = UInt32(min(max(0, options.refreshAhead), 4e6) * 1000)
        // A returning owner's hit may be an old value or a deleted one (an outside review).
        settleBeforeDeciding(key, ns)
        while true {
            let (node, f) = try leaseGet(key, ns, refreshMillis)
            let lease = Responses.leaseState(f)
            switch f.statusCode {
            case .ok:
                let item = try Responses.parseGet(f)
                if case .granted(let token) = lease {
                    // Stale, or inside the refresh-ahead window: this caller refreshes it.
                    let value: [UInt8]
                    do { value = try loader() } catch {
                        // The old value is still the best answer; the next reader may try again.
                        release(node, key, ns, token)
                        return LoadedValue(value: item.value, version: item.version, origin: item.stale ? .stale : .cache)
                    }
                    return stored(value, key, ns, ttl, options, token: token, node: node, origin: .refreshed)
                }
                return LoadedValue(value: item.value, version: item.version, origin: item.stale ? .stale : (waited ? .waited : .cache))
            case .negative:
                throw LoadFailure(message: String(decoding: f.value, as: UTF8.self), cached: true)
            case .notFound:
                switch lease {
                case .granted(let token):
                    // A node that restarted recently may have missed the key: ask its replicas first.
                    if mustVerify(node, .absent(tombstone: f.cas), key, ns), let item = try? get(key, namespace: ns), !item.negative {
                        release(node, key, ns, token)
                        return LoadedValue(value: item.value, version: item.version, origin: .cache)
                    }
                    return try fill(key, ns, ttl, options, token: token, node: node, loader)
                case .filling:
                    let now = clock.nowMicros()
                    if now >= deadline { return try fill(key, ns, ttl, options, token: nil, node: node, loader) }
                    waited = true
                    let pause = min(delay, Double(deadline - now) / 1e6)
                    usleep(UInt32(max(0.0005, pause) * 1e6))
                    delay = min(delay * 2, 0.05)
                case .none:
                    // The node granted no lease (its lease table is full): load without one.
                    return try fill(key, ns, ttl, options, token: nil, node: node, loader)
                }
            default:
                let msg = String(decoding: f.value, as: UTF8.self)
                throw ClusterError(message: "GET of \(keyText(key)) failed: \(f.statusCode)\(msg.isEmpty ? "" : ": " + msg)", failures: [])
            }
        }
    }

    /// GET with LEASE on the key's first live node (leases are granted by the owner, by the
    /// next replica while the owner is down).
    private func leaseGet(_ key: [UInt8], _ ns: [UInt8], _ refreshMillis: UInt32) throws -> (NodeHandle, Frame) {
        var failures: [(String, String)] = []
        for node in targets(key, ns) {
            do {
                let f = try node.run { try $0.call(.get(GetRequest(key: key, namespace: ns, lease: true, refreshAheadMillis: refreshMillis))) }
                return (node, f)
            } catch { failures.append((node.address.name, "\(error)")) }
        }
        throw ClusterError(message: "no node could serve \(keyText(key))", failures: failures)
    }

    /// Runs the loader and stores its value (under the lease when one is held) or, on failure,
    /// the negative entry; rethrows the loader's error as a `LoadFailure`.
    private func fill(_ key: [UInt8], _ ns: [UInt8], _ ttl: WireExpiry, _ options: LoadOptions, token: UInt64?,
                      node: NodeHandle, _ loader: () throws -> [UInt8]) throws -> LoadedValue {
        let value: [UInt8]
        do { value = try loader() } catch {
            let message = (error as? LoadFailure)?.message ?? "\(error)"
            if let negative = options.negativeTTL, negative > 0 {
                var s = SetRequest(key: key, value: Array(message.utf8.prefix(4096)), namespace: ns)
                s.negative = true
                s.expiry = negative >= 1 ? .seconds(Int64(negative.rounded())) : .at(unixMicros: configuration.clock.nowMicros() + Int64(min(max(negative, 0), 1) * 1e6))
                s.version = hlc.next()
                if let t = token { s.mode = .lease; s.casVersion = t }
                _ = try? replicate(s)
            } else if let t = token {
                release(node, key, ns, t)
            }
            throw LoadFailure(message: message, cached: false)
        }
        return stored(value, key, ns, ttl, options, token: token, node: node, origin: .loaded)
    }

    /// Stores a loaded value and returns it. A value that could not be stored (a node down
    /// past the ack policy, or refused: larger than the max item size) is still the answer,
    /// with the reason in `notStored`; the lease is given back at once, so the callers waiting
    /// on it load themselves instead of waiting out the lease timeout (an outside review: a
    /// second `get --or-run` waited 10 s for a value that could never be stored).
    private func stored(_ value: [UInt8], _ key: [UInt8], _ ns: [UInt8], _ ttl: WireExpiry, _ options: LoadOptions,
                        token: UInt64?, node: NodeHandle, origin: LoadedValue.Origin) -> LoadedValue {
        do {
            let version = try store(value, key, ns, ttl, options, token: token)
            return LoadedValue(value: value, version: version ?? 0, origin: origin)
        } catch {
            if let t = token { release(node, key, ns, t) }
            var v = LoadedValue(value: value, version: 0, origin: origin)
            v.notStored = "\(error)"
            return v
        }
    }

    /// Stores a loaded value on the key's nodes; nil when the lease was lost (the key was
    /// deleted or invalidated during the load: the value is returned but not stored). Version
    /// 0 in a `LoadedValue` means the value was not stored.
    private func store(_ value: [UInt8], _ key: [UInt8], _ ns: [UInt8], _ ttl: WireExpiry, _ options: LoadOptions,
                       token: UInt64?) throws -> UInt64? {
        var s = SetRequest(key: key, value: value, namespace: ns)
        s.expiry = ttl
        s.flags = options.flags
        s.version = hlc.next()
        if let t = token { s.mode = .lease; s.casVersion = t }
        if case .stored(let v) = try replicate(s).outcome { return v }
        return nil
    }

    private func release(_ node: NodeHandle, _ key: [UInt8], _ ns: [UInt8], _ token: UInt64) {
        _ = try? node.run { try $0.call(.release(namespace: ns, key: key, token: token)) }
    }
}
