import StrataCore

// The memcached listener on a `--cluster` node (read repair of keys the node has not
// verified, MEMCACHED.md §1), and what its connections audit about a `flush_all`.
extension MemcachedListener {
    /// Whether reads on the event loop must leave this listener's keys to a worker: a
    /// `--cluster` node that has not caught up with every peer repairs a key it has not
    /// verified before answering it (`repaired`), which may wait on the network.
    var readsMayNeedRepair: Bool {
        guard !memoryOnly, let c = dispatcher.cluster else { return false }
        return !c.allVerified
    }

    /// What `bringUpToDate` found.
    enum KeyFreshness { case current, starting, noReplicaAnswered }

    /// Brings `key` up to date from its other replicas when this node may hold an old copy of
    /// it — it has not verified the key (a restart, a pause, lost contact), or its limits
    /// removed a write of it another replica may still hold (`remembersEviction`): the listener
    /// cannot flag an answer UNVERIFIED (MEMCACHED.md §1), so it answers and decides on what the
    /// replicas hold. `.current`: nothing to do, or pulled from a replica that answered. A
    /// memory-only listener's keys are the node's own (they are not replicated).
    func bringUpToDate(_ key: [UInt8]) -> KeyFreshness {
        guard !memoryOnly, dispatcher.cluster != nil,
              dispatcher.mustRepairBeforeRead(namespace: namespace, key: key) || remembersEviction(key) else { return .current }
        // Before anti-entropy is started (the listeners open first) nothing can be checked (an
        // outside review, mc8: reads in that moment got the old copy under load).
        guard let repair = dispatcher.readRepair else {
            dispatcher.stats?.readRepairFailures.add()
            return .starting
        }
        return repair(ItemKey(namespace: namespace, key: key)) ? .current : .noReplicaAnswered
    }

    /// For a read: false when the key could not be brought up to date (the caller answers a miss).
    func repaired(_ key: [UInt8]) -> Bool { bringUpToDate(key) == .current }

    /// What an `incr`/`decr`/`touch`, a conditional store (`add`, `replace`, `cas`, `append`,
    /// `prepend`) or a meta counter or conditional write answers instead of deciding from a
    /// possibly old copy (an outside review, cl24/cl25: increments lost, `add` storing over a
    /// replica's value): nil when it may decide here, once the key is up to date.
    func unverifiedRefusal(_ key: [UInt8]) -> String? {
        switch bringUpToDate(key) {
        case .current: return nil
        case .starting: return Self.startingLine
        case .noReplicaAnswered: return Self.unverifiedLine
        }
    }

    /// Whether this node's limits removed a write of `key` that another replica may still
    /// hold (`EvictedVersions`, the last 65,536): reads and decisions then ask the replicas,
    /// so a `gets` sees what an `add` would be refused on (an outside review, cl27).
    func remembersEviction(_ key: [UInt8]) -> Bool {
        guard let e = store.evictedDelete(key, namespace: namespace) else { return false }
        // Once this node holds that write (or a newer one) again, its own copy is as new.
        return ((try? store.syncVersion(key, namespace: namespace)) ?? 0) < e.evicted
    }

    static let unverifiedLine = "SERVER_ERROR unverified: this node has not caught up with the key's other replicas, and none of them answered; nothing was done, retry"
    /// The moment between the listener opening and anti-entropy starting: nothing is asked.
    static let startingLine = "SERVER_ERROR unverified: this node is starting and has not yet caught up with the key's other replicas; nothing was done, retry"
}

/// What a memcached connection audits about a `flush_all` beyond the line written when it was
/// asked (OPERATING.md "Audit").
struct FlushAudit: Sendable {
    /// Asked when a delayed flush's delay is up: whether it still runs (audits `flush_run` or
    /// `flush_dropped`).
    let mayRunNow: @Sendable () -> Bool
    /// The flush was refused when it ran (DISK_FULL, a flush-mark bound…): audits `flush_refused`.
    let refused: @Sendable (_ why: String) -> Void
}
