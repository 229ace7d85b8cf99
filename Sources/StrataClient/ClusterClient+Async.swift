#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataWire

// MARK: Async forms (each runs the blocking call on a worker thread; the caller's task is not
// blocked).

extension ClusterClient {
    /// Runs a blocking call on a `BlockingPool` thread (never a Dispatch or concurrency-pool
    /// thread, which it could starve) and resumes the caller's task with its result.
    func offload<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { cont in
            BlockingPool.shared.run { cont.resume(with: Result { try body() }) }
        }
    }

    public func set(_ key: [UInt8], _ value: [UInt8], namespace: [UInt8] = [], expiry: WireExpiry = .storeDefault,
                    flags: UInt32 = 0, extended: [UInt8] = [], mode: SetModeCode = .set, casVersion: UInt64 = 0,
                    writeBehind: Bool = false) async throws -> ClusterSetOutcome {
        try await offload { try self.set(key, value, namespace: namespace, expiry: expiry, flags: flags, extended: extended, mode: mode,
                                         casVersion: casVersion, writeBehind: writeBehind) }
    }
    public func get(_ key: [UInt8], namespace: [UInt8] = []) async throws -> ItemPayload? {
        try await offload { try self.get(key, namespace: namespace) }
    }
    public func getMany(_ keys: [[UInt8]], namespace: [UInt8] = []) async throws -> [ItemPayload?] {
        try await offload { try self.getMany(keys, namespace: namespace) }
    }
    @discardableResult
    public func delete(_ key: [UInt8], namespace: [UInt8] = []) async throws -> Bool {
        try await offload { try self.delete(key, namespace: namespace) }
    }
    public func exists(_ key: [UInt8], namespace: [UInt8] = []) async throws -> Bool {
        try await offload { try self.exists(key, namespace: namespace) }
    }
    public func touch(_ key: [UInt8], namespace: [UInt8] = [], expiry: WireExpiry) async throws -> Bool {
        try await offload { try self.touch(key, namespace: namespace, expiry: expiry) }
    }
    public func counter(_ key: [UInt8], delta: UInt64, decrement: Bool = false, namespace: [UInt8] = [],
                        initial: UInt64? = nil) async throws -> UInt64? {
        try await offload { try self.counter(key, delta: delta, decrement: decrement, namespace: namespace, initial: initial) }
    }
    public func meta(_ key: [UInt8], namespace: [UInt8] = []) async throws -> MetaInfo? {
        try await offload { try self.meta(key, namespace: namespace) }
    }
}
