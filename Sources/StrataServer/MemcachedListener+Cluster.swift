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

    /// Brings `key` up to date from its other replicas when this node has not verified it
    /// (a `--cluster` node catching up after a restart, a pause or lost contact): the
    /// listener cannot flag an answer UNVERIFIED (MEMCACHED.md §1), so it answers what the
    /// replicas hold. False when none of them answered: the caller answers a miss. A
    /// memory-only listener's keys are the node's own (they are not replicated).
    func repaired(_ key: [UInt8]) -> Bool {
        guard !memoryOnly, dispatcher.cluster != nil, remembersEviction(key) || dispatcher.mustRepairBeforeRead(namespace: namespace, key: key)
        else { return true }
        // Before anti-entropy is started (the listeners open first) nothing can be checked: a
        // miss (an outside review, mc8: reads in that moment got the old copy under load).
        guard let repair = dispatcher.readRepair else {
            dispatcher.stats?.readRepairFailures.add()
            return false
        }
        return repair(ItemKey(namespace: namespace, key: key))
    }

    /// What an `incr`/`decr`/`touch`, a conditional store (`add`, `replace`, `cas`, `append`,
    /// `prepend`) or a meta counter or conditional write answers instead of deciding from a
    /// possibly old copy: nil when it may decide here. On a `--cluster` node that has not
    /// verified the key — or whose limits evicted a write of it another replica may still
    /// hold — the key is first brought up to date from its other replicas (as reads are:
    /// `repaired`), so the decision is made on the newest copy any of them holds (an outside
    /// review, cl24/cl25: increments lost, `add` storing over a replica's value); when none of
    /// them answers, nothing is done and the command is refused.
    func unverifiedRefusal(_ key: [UInt8]) -> String? {
        guard !memoryOnly, dispatcher.cluster != nil,
              remembersEviction(key) || dispatcher.mustRepairBeforeRead(namespace: namespace, key: key) else { return nil }
        guard let repair = dispatcher.readRepair else {
            dispatcher.stats?.readRepairFailures.add()
            return Self.startingLine
        }
        return repair(ItemKey(namespace: namespace, key: key)) ? nil : Self.unverifiedLine
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
