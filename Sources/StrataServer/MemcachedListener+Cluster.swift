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
        guard !memoryOnly, dispatcher.mustRepairBeforeRead(namespace: namespace, key: key) else { return true }
        // Before anti-entropy is started (the listeners open first) nothing can be checked: a
        // miss (an outside review, mc8: reads in that moment got the old copy under load).
        guard let repair = dispatcher.readRepair else {
            dispatcher.stats?.readRepairFailures.add()
            return false
        }
        return repair(ItemKey(namespace: namespace, key: key))
    }
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
