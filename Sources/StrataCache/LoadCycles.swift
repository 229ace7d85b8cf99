import StrataCore
import Synchronization

/// A read-through's key in one backend (the store, or the cluster client, whose single flight
/// it waits in).
struct LoadingKey: Hashable, Sendable {
    let backend: ObjectIdentifier
    let namespace: [UInt8]
    let key: [UInt8]
}

/// A load in progress in this process: its key and the keys its loader is waiting for now
/// (several at once when it reads from a task group), with how many reads wait for each.
final class LoadMarker: @unchecked Sendable {
    let key: LoadingKey
    /// Guarded by `LoadCycles`'s lock.
    var waitingOn: [LoadingKey: Int] = [:]
    var running = true
    init(_ key: LoadingKey) { self.key = key }
}

/// The wait-for graph of this process's read-through loads, so a loader that would end up
/// waiting for its own load is refused instead of hanging (single flights and leases have no
/// timeout for a waiter whose load never ends). A task knows the loads it is running inside
/// (`running`, a task local: a `Task {}` started in a loader inherits it, so only loads still
/// running count); each running load records the key its loader waits for. Before a
/// read-through waits for key K, the chain from K's running load through what each waits for
/// is followed: reaching one of this task's own loads is a cycle. Setting the wait and
/// checking are one step under one lock, so of two loads that start waiting for each other at
/// once, the second sees the first. Loads across processes (a cluster's leases) are not seen.
/// Costs a lock and a walk of the chain (usually empty) per read-through.
final class LoadCycles: @unchecked Sendable {
    static let shared = LoadCycles()

    /// The loads this task is running inside, outermost first.
    @TaskLocal static var running: [LoadMarker] = []

    private let lock = Lock()
    private var byKey: [LoadingKey: LoadMarker] = [:]

    /// Registers a load that starts running (its loader is about to be called).
    func started(_ key: LoadingKey) -> LoadMarker {
        let m = LoadMarker(key)
        lock.withLock { byKey[key] = m }
        return m
    }

    func finished(_ m: LoadMarker) {
        lock.withLock {
            m.running = false
            m.waitingOn = [:]
            if byKey[m.key] === m { byKey[m.key] = nil }
        }
    }

    /// Records that the innermost running load of `ancestors` now waits for `key`; returns the
    /// key of the load that would be waited for by itself (a cycle), nil when none. Follows
    /// every wait of every load reachable from `key` (each load visited once).
    func wouldWait(on key: LoadingKey, ancestors: [LoadMarker]) -> [UInt8]? {
        lock.withLock {
            let mine = ancestors.filter { $0.running }
            guard let inner = mine.last else { return nil }
            let ownKeys = Set(mine.map(\.key))
            if ownKeys.contains(key) { return key.key }
            var queue = [key]
            var seen: Set<LoadingKey> = [key]
            while let k = queue.popLast() {
                guard let m = byKey[k], m.running else { continue }
                for w in m.waitingOn.keys {
                    if ownKeys.contains(w) { return w.key }
                    if seen.insert(w).inserted { queue.append(w) }
                }
            }
            inner.waitingOn[key, default: 0] += 1
            return nil
        }
    }

    /// A read of `key` by the innermost running load of `ancestors` waits no longer.
    func doneWaiting(_ ancestors: [LoadMarker], on key: LoadingKey) {
        lock.withLock {
            guard let inner = ancestors.last(where: { $0.running }), let n = inner.waitingOn[key] else { return }
            inner.waitingOn[key] = n > 1 ? n - 1 : nil
        }
    }
}
