import StrataClient
import StrataCore

// Read repair for the memcached listener of a node that has not verified a key (MEMCACHED.md §1).
extension AntiEntropy {
    /// How long a read repair waits for a replica (a live one answers in milliseconds; a proxy
    /// in front, twemproxy's shipped file, gives up after 2 s), and how long one that did not
    /// answer is then skipped.
    static let readRepairTimeout = 0.5, readRepairBackoff = 2.0

    /// Brings `id` up to date from the key's other replicas, for a read this node answers while
    /// it has not verified the key and cannot flag its answer UNVERIFIED (the memcached
    /// listener, MEMCACHED.md §1): each replica's copy is taken here when newer (as a round's
    /// pull would). True when at least one other replica answered (or there is none); false
    /// when none could be reached — the caller then must not answer from its own copy. A new
    /// connection per replica (HELLO, token, TLS as the rounds'): read repair runs only on a
    /// node catching up after a restart, a pause or lost contact, and only for its unverified keys.
    func repairForRead(_ id: ItemKey) -> Bool {
        let others = view.replicaSet(namespace: id.namespace, key: id.key).filter { $0 != view.selfName }
        guard !others.isEmpty else { return true }
        var answered = false
        let now = monotonicSeconds()
        for name in others {
            // A replica that did not answer is skipped for `readRepairBackoff` (an outside
            // review, mc8: a stopped one cost 2 s per key, a 60-key get 121 s).
            if repairDownLock.withLock({ (repairDownUntil[name] ?? 0) > now }) { continue }
            guard let peer = NodeAddress.parse(name),
                  let conn = try? NodeConnection(host: peer.host, port: peer.port, timeout: Self.readRepairTimeout, token: token, hello: true, tls: tls),
                  (try? pull([id], from: conn)) != nil
            else {
                repairDownLock.withLock { repairDownUntil[name] = monotonicSeconds() + Self.readRepairBackoff }
                continue
            }
            answered = true
            conn.close()
        }
        if answered { stats.readRepairs.add() } else { stats.readRepairFailures.add() }
        return answered
    }
}
