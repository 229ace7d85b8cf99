#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import StrataCore
import Synchronization

// TieredCache's async forms: the blocking calls run off the caller's task.
extension TieredCache {
    // MARK: Async forms

    func offload<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { cont in
            workQueue.async { cont.resume(with: Result { try body() }) }
        }
    }

    public func set(_ key: [UInt8], _ value: [UInt8], namespace: [UInt8] = [], options: SetOptions = SetOptions()) async throws -> SetOutcome {
        try await offload { try self.set(key, value, namespace: namespace, options: options) }
    }
    public func get(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all, touch: Expiry? = nil) async throws -> CacheItem? {
        try await offload { try self.get(key, namespace: namespace, tiers: tiers, touch: touch) }
    }
    public func getMany(_ keys: [[UInt8]], namespace: [UInt8] = [], tiers: Tiers = .all) async throws -> [CacheItem?] {
        try await offload { try self.getMany(keys, namespace: namespace, tiers: tiers) }
    }
    public func contains(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all) async throws -> Bool {
        try await offload { try self.contains(key, namespace: namespace, tiers: tiers) }
    }
    public func remove(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all, version: UInt64? = nil) async throws -> RemoveOutcome {
        try await offload { try self.remove(key, namespace: namespace, tiers: tiers, version: version) }
    }
    @discardableResult
    public func invalidate(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all, version: UInt64? = nil) async throws -> InvalidateOutcome {
        try await offload { try self.invalidate(key, namespace: namespace, tiers: tiers, version: version) }
    }
    public func touch(_ key: [UInt8], namespace: [UInt8] = [], expiry: Expiry, tiers: Tiers = .all) async throws -> Bool {
        try await offload { try self.touch(key, namespace: namespace, expiry: expiry, tiers: tiers) }
    }
    public func increment(_ key: [UInt8], by delta: UInt64 = 1, namespace: [UInt8] = [], tiers: Tiers = .all,
                          initial: UInt64? = nil, expiry: Expiry = .storeDefault) async throws -> CounterOutcome {
        try await offload { try self.increment(key, by: delta, namespace: namespace, tiers: tiers, initial: initial, expiry: expiry) }
    }
    public func decrement(_ key: [UInt8], by delta: UInt64 = 1, namespace: [UInt8] = [], tiers: Tiers = .all,
                          initial: UInt64? = nil, expiry: Expiry = .storeDefault) async throws -> CounterOutcome {
        try await offload { try self.decrement(key, by: delta, namespace: namespace, tiers: tiers, initial: initial, expiry: expiry) }
    }
    public func metadata(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all) async throws -> ItemMetadata? {
        try await offload { try self.metadata(key, namespace: namespace, tiers: tiers) }
    }
    public func keys(namespace: [UInt8] = [], after cursor: [UInt8]? = nil, limit: Int = 1000,
                     tiers: Tiers = .all) async throws -> (keys: [[UInt8]], next: [UInt8]?) {
        let r = try await offload { try self.keys(namespace: namespace, after: cursor, limit: limit, tiers: tiers) }
        return r
    }
    public func flush(namespace: [UInt8], tiers: Tiers = .all) async throws {
        try await offload { try self.flush(namespace: namespace, tiers: tiers) }
    }
    public func flushAll(tiers: Tiers = .all) async throws { try await offload { try self.flushAll(tiers: tiers) } }
    public func trim(toCount count: Int = Int.max, toBytes bytes: Int = Int.max, tiers: Tiers = .all) async throws {
        try await offload { try self.trim(toCount: count, toBytes: bytes, tiers: tiers) }
    }

    var writeBehindCounts: (pending: Int, total: Int) {
        (writeBehindPending.load(), writeBehindWrites.load())
    }
}
