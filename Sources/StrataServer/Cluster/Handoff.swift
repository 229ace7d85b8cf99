#if canImport(Glibc)
import Glibc
#endif
import StrataClient
import StrataCore
import StrataWire

/// Hinted handoff (ARCHITECTURE.md "Repair in the nodes"): the node that accepted a write
/// makes sure the key's other replicas have it, whoever the client was and whatever it did
/// afterwards — a client may have skipped a replica it thought dead, timed out on it, or
/// written to one node only.
///
/// Every write this node applies to its disk tier (SET, DELETE, INVALIDATE, TOUCH, INCR/DECR,
/// including the copies peers send) becomes a hint (namespace, key, version) for each other
/// node of the key's replica set — during a rolling change, by this node's list and by the
/// other lists its peers sync with (`ClusterView.hintTargets`). One thread per peer (`strata-handoff`) sends the hints in
/// batches of up to `SyncCheck.maxEntries` as SYNC_CHECK; the peer answers which writes it
/// lacks (it holds nothing, or an older version), and this node copies those across with their
/// versions (as anti-entropy does, so a newer write on the peer always wins). When a client
/// wrote every replica — the usual case — a hint costs one entry in a SYNC_CHECK and one
/// index lookup on the peer, and nothing is copied; a copy a peer receives becomes a hint back
/// that finds the write already there, so nothing bounces.
///
/// Delivery: hints wait while their peer is unreachable (retried with backoff from 0.2 s up to
/// 5 s) and are kept in memory, bounded by `maxHints` per peer; the oldest are dropped
/// (`handoff_dropped`) past it. A dropped hint, or one lost with this process, is still
/// delivered by anti-entropy: the write is in this node's disk tier, a peer that was down,
/// paused or cut off catches up from this node when it returns, and this node catches up
/// everything with every peer after its own restart.
///
/// Membership: `update()` follows a change of the view's peers while running — a new peer gets
/// a queue and a thread; a removed peer's hints are dropped (anti-entropy is the backstop, as
/// for any dropped hint) and its thread ends after its current batch.
///
/// Cost per accepted write: a ring lookup and an append under a lock; per batch, one round
/// trip per peer.
final class Handoff: @unchecked Sendable {
    struct Hint { var id: ItemKey; var version: UInt64; var tombstone: Bool }

    let view: ClusterView
    let stats: NodeStats
    let log: Logger
    /// Opens a connection to a peer (with the cluster's token and TLS).
    let connect: @Sendable (NodeAddress) throws -> NodeConnection
    /// Copies this node's current disk copies of keys to a peer, pipelined (`AntiEntropy.push`);
    /// returns how many the peer took.
    let copy: @Sendable ([ItemKey], NodeAddress, NodeConnection) throws -> Int
    /// The version this node's disk tier holds for a key (0: nothing).
    let localVersion: @Sendable (ItemKey) -> UInt64
    /// Hints were dropped: anti-entropy must deliver those writes (`AntiEntropy.wake`).
    let dropped: @Sendable () -> Void
    /// The most hints kept for one peer.
    let maxHints: Int

    private let cond = ConditionLock()
    private var queues: [String: HintQueue] = [:]
    /// Hints taken from `queues` and being sent (under `cond`): not delivered yet.
    private var inFlight = 0
    /// Shutting down (`finish`): failed deliveries are retried every 0.1 s, not with the backoff.
    private var finishing = false
    /// Hints dropped while finishing for a peer that was down.
    private var abandoned = 0
    private var stopped = false
    private var running = 0
    /// Peers with a delivering thread (under `cond`): a thread leaves the set when it sees its
    /// peer's queue gone, in the same critical section, so `update` never starts a second one.
    private var delivering: Set<String> = []

    private let foreignWriteLog = LogRateLimiter(interval: 60)

    init(view: ClusterView, stats: NodeStats, log: Logger, maxHints: Int = 100_000,
         connect: @escaping @Sendable (NodeAddress) throws -> NodeConnection,
         copy: @escaping @Sendable ([ItemKey], NodeAddress, NodeConnection) throws -> Int,
         localVersion: @escaping @Sendable (ItemKey) -> UInt64,
         dropped: @escaping @Sendable () -> Void = {}) {
        self.view = view; self.stats = stats; self.log = log; self.maxHints = maxHints
        self.connect = connect; self.copy = copy; self.localVersion = localVersion; self.dropped = dropped
        for p in view.peers { queues[p.name] = HintQueue() }
    }

    /// Hints waiting, over all peers (STATS `handoff_pending`).
    var pending: Int { cond.withLock { queues.values.reduce(0) { $0 + $1.count } } }

    /// At shutdown, before `stop`: delivers what is queued or being sent — at once, and a
    /// peer that fails again every 0.1 s instead of with the backoff — until nothing is left or
    /// `deadline` (monotonic seconds) passes; a peer that refuses the connection (down) is not
    /// waited for. Returns how many hints were not delivered. A node leaving the cluster for
    /// good (a removal) never returns to hand these writes on, and the peers' rounds cannot
    /// reach it once it stops accepting.
    func finish(by deadline: Double) -> Int {
        cond.withLock { finishing = true }
        cond.broadcast()
        var left = 0
        repeat {
            left = cond.withLock { inFlight + queues.values.reduce(0) { $0 + $1.count } }
            if left == 0 { break }
            usleep(10_000)
        } while monotonicSeconds() < deadline
        return left + cond.withLock { abandoned }
    }

    /// This node applied a write of `version` to the disk tier (0: not known to the caller, as
    /// for the memcached listener's writes; looked up when sent): the key's other replicas get
    /// a hint — every replica when this node is none of them (a foreign write).
    /// `relisted`: a row of such a key found at the start (`SyncDigests.foreignRow`), not a new
    /// write — hinted again, not counted or logged as a foreign write.
    func accepted(namespace: [UInt8], key: [UInt8], version: UInt64, tombstone: Bool = false, relisted: Bool = false) {
        let (set, replica, mine) = view.hintTargets(namespace: namespace, key: key)
        if !replica && !relisted {
            // Not this node's key by its own list: the client placed it by another placement
            // (twemproxy's or mcrouter's hashing in front of the memcached listener, one node
            // named two ways, a `dns:` list beside written names). Its replicas get it all the
            // same, by hints (an outside review, mc7: behind twemproxy ~30 % of the writes stayed
            // on a node that held no replica, never seen by `--nodes` clients); counted, and
            // logged once a minute.
            stats.foreignWrites.add()
            if foreignWriteLog.admit(now: monotonicSeconds()) != nil {
                log.warn("foreign_write", [("namespace_hex", NamespaceStats.hex(namespace)), ("key_hex", NamespaceStats.hex(Array(key.prefix(64)))),
                                           ("replicas", mine.joined(separator: ",")),
                                           ("hint", "the client placed the key by another member list than this node's --cluster (or a proxy's own hashing), or wrote this node directly (--server): the key's replicas get it by handoff; give --nodes clients the nodes' list, each node named the same way")])
            }
        }
        guard !set.isEmpty else { return }
        let id = ItemKey(namespace: namespace, key: key)
        var dropped = 0, wake = false, wakeSync = false
        var starting: [NodeAddress] = []
        cond.lock()
        for name in set {
            if queues[name] == nil {
                // A member of another list in use (a rolling change) that is no peer of this
                // node: it gets a queue and a thread while it stays a target (`take`).
                guard !stopped, let address = NodeAddress.parse(name) else { continue }
                queues[name] = HintQueue()
                if delivering.insert(name).inserted {
                    running += 1
                    starting.append(address)
                }
            }
            if queues[name]!.count >= maxHints {
                // The oldest one, exactly at the bound (an outside review, cl18: dropping an
                // eighth of it at a time let 12,500 go where the docs say one).
                queues[name]!.dropOldest(1)
                dropped += 1
                // Anti-entropy delivers what a peer's dropped hints carried; it does not run
                // with a member of another list (a node stopped after a removal, say): no wake.
                wakeSync = wakeSync || view.peers.contains { $0.name == name }
            }
            // A non-empty queue's thread is awake (or backing off): no wake-up needed.
            wake = wake || queues[name]!.isEmpty
            queues[name]!.append(Hint(id: id, version: version, tombstone: tombstone))
        }
        cond.unlock()
        if wake { cond.broadcast() }
        start(starting)
        stats.handoffHints.add(set.count)
        if dropped > 0 { stats.handoffDropped.add(dropped) }
        if wakeSync { self.dropped() }
    }

    func start() { update() }

    /// Follows the view's current peers: queues and threads for new ones, removed ones' hints
    /// dropped and their threads ended.
    func update() {
        let peers = view.peers
        var starting: [NodeAddress] = []
        cond.withLock {
            guard !stopped else { return }
            let names = Set(peers.map(\.name))
            for name in Array(queues.keys) where !names.contains(name) { queues[name] = nil }
            for p in peers {
                if queues[p.name] == nil { queues[p.name] = HintQueue() }
                if delivering.insert(p.name).inserted {
                    running += 1
                    starting.append(p)
                }
            }
        }
        cond.broadcast()
        start(starting)
    }

    /// A delivering thread for each of `peers` (already counted in `running` and `delivering`).
    private func start(_ peers: [NodeAddress]) {
        for peer in peers {
            _ = startThread(name: "strata-handoff") { [self] in
                deliver(to: peer)
                cond.withLock { running -= 1 }
                cond.broadcast()
            }
        }
    }

    func stop() {
        cond.withLock { stopped = true }
        cond.broadcast()
        cond.lock()
        while running > 0 { cond.wait() }
        cond.unlock()
    }

    /// The hints for `peer`, waiting for some; nil at the stop, once the peer is no member,
    /// or — for a member of another list only — once no list in use names it.
    private func take(_ peer: String) -> [Hint]? {
        let extra = !view.peers.contains { $0.name == peer }
        cond.lock()
        defer { cond.unlock() }
        while !stopped && queues[peer]?.isEmpty == true {
            guard extra else { cond.wait(); continue }
            if !view.isHintTarget(peer) { queues[peer] = nil; break }
            cond.wait(seconds: 10)
        }
        if stopped || queues[peer] == nil {
            delivering.remove(peer)
            return nil
        }
        let batch = queues[peer]!.takeOldest(SyncCheck.maxEntries)
        inFlight += batch.count
        return batch
    }

    /// A batch `take` gave out was delivered or given back.
    private func settled(_ batch: [Hint]) { cond.withLock { inFlight -= batch.count } }

    /// Puts back hints that could not be delivered, ahead of the newer ones, within the bound.
    private func giveBack(_ hints: [Hint], _ peer: String) {
        var dropped = 0
        cond.withLock {
            guard queues[peer] != nil else { return } // the peer left the cluster
            queues[peer]!.putBack(hints)
            if queues[peer]!.count > maxHints {
                dropped = queues[peer]!.count - maxHints
                queues[peer]!.dropOldest(dropped)
            }
        }
        if dropped > 0 {
            stats.handoffDropped.add(dropped)
            if view.peers.contains(where: { $0.name == peer }) { self.dropped() }
        }
    }

    private func deliver(to peer: NodeAddress) {
        var conn: NodeConnection? = nil
        var backoff = 0.2
        var failing = false
        while let batch = take(peer.name) {
            let tried = monotonicSeconds()
            do {
                if conn == nil { conn = try connect(peer) }
                try send(batch, to: peer, conn!)
                settled(batch)
                if failing { log.info("handoff_resumed", [("peer", peer.name)]) }
                failing = false
                backoff = 0.2
            } catch {
                // The connection itself failed at once (refused): the peer is down. (A paused peer
                // accepts and then times out: it is waited for.)
                let unreachable = conn == nil && monotonicSeconds() - tried < 0.5
                conn?.close()
                conn = nil
                giveBack(batch, peer.name)
                settled(batch)
                // Shutting down, a peer that is down is not waited for: its hints are left to
                // the rounds when it returns (a paused peer, which accepts connections, is).
                if unreachable && cond.withLock({ finishing }) {
                    cond.withLock {
                        abandoned += queues[peer.name]?.count ?? 0
                        queues[peer.name] = nil
                    }
                    log.warn("handoff_undelivered", [("peer", peer.name), ("error", "\(error)")])
                    continue
                }
                // A member of another list that no list in use names any more (stopped after a
                // removal): its hints are dropped (anti-entropy is the backstop) and the thread ends.
                if !view.isHintTarget(peer.name) { cond.withLock { queues[peer.name] = nil } }
                stats.handoffFailures.add()
                if !failing { log.warn("handoff_failed", [("peer", peer.name), ("error", "\(error)"), ("pending", String(pending))]) }
                failing = true
                let wasFinishing = cond.withLock { finishing }
                sleep(upTo: wasFinishing ? 0.1 : backoff) { cond.withLock { stopped || (finishing && !wasFinishing) } }
                backoff = min(backoff * 2, 5)
            }
        }
        conn?.close()
    }

    /// One SYNC_CHECK for `batch` (the newest version per key), then a copy of each write the
    /// peer lacks.
    private func send(_ batch: [Hint], to peer: NodeAddress, _ conn: NodeConnection) throws {
        var newest: [ItemKey: Hint] = [:]
        for var h in batch {
            if h.version == 0 { h.version = localVersion(h.id) }
            if newest[h.id] == nil || h.version > newest[h.id]!.version { newest[h.id] = h }
        }
        let entries = newest.values.filter { $0.version != 0 }.map { SyncKeyEntry(namespace: $0.id.namespace, key: $0.id.key, version: $0.version, tombstone: $0.tombstone) }
        guard !entries.isEmpty else { return }
        let f = try conn.call(.syncCheck(SyncCheck(requester: Array(view.selfName.utf8), entries: entries)))
        try NodeConnection.check(f, allow: [.ok])
        let lacking = try Responses.parseSyncCheck(f, entries: entries.count)
        stats.handoffChecked.add(entries.count)
        let ids = lacking.map { ItemKey(namespace: entries[$0].namespace, key: entries[$0].key) }
        stats.handoffCopied.add(try copy(ids, peer, conn))
    }
}

/// One peer's hints, oldest first: appended at the back, taken and dropped at the front in
/// amortized O(1) (a head index; the dead front is cut off once it is over half the array), so
/// the bound can drop exactly the oldest hint. Not thread-safe: used under `Handoff`'s lock.
struct HintQueue {
    private var items: [Handoff.Hint] = []
    private var head = 0

    var count: Int { items.count - head }
    var isEmpty: Bool { head == items.count }

    mutating func append(_ h: Handoff.Hint) { items.append(h) }

    mutating func dropOldest(_ n: Int) {
        head += min(n, count)
        compact()
    }

    /// Removes and returns up to `n` of the oldest hints.
    mutating func takeOldest(_ n: Int) -> [Handoff.Hint] {
        let k = min(n, count)
        let out = Array(items[head..<(head + k)])
        head += k
        compact()
        return out
    }

    /// Puts `hints` (taken earlier, not delivered) back ahead of the others.
    mutating func putBack(_ hints: [Handoff.Hint]) {
        items = hints + items[head...]
        head = 0
    }

    private mutating func compact() {
        if head == items.count {
            items.removeAll(keepingCapacity: items.count <= 4096)
            head = 0
        } else if head > 4096 && head * 2 > items.count {
            items.removeFirst(head)
            head = 0
        }
    }
}
