import StrataClient
import StrataCore
import Synchronization

/// The node's view of its cluster (`--cluster`, ARCHITECTURE.md "Repair in the nodes"): the
/// ring (RING.md, the same one clients use), the node's own ring name, the replica count, and
/// which peers it has caught up with since it last may have missed writes.
///
/// Verification: every event after which the node may lack writes that a peer holds — its
/// start (a restart, a wiped directory, a new node), a pause it noticed, contact with a peer
/// regained after a gap — bumps that peer's epoch and drops it from `synced`. An anti-entropy
/// round with a peer that started in the current epoch and finished puts it back. A key is
/// verified when every other node of its replica set is synced; an unverified GET answer
/// carries the UNVERIFIED flag (PROTOCOL.md §7.19), so clients compare it with the replicas.
///
/// Cost: `isVerified` is one atomic load while everything is verified; otherwise a ring
/// lookup (a binary search over 512 points per node, and a small allocation) and a lock.
final class ClusterView: @unchecked Sendable {
    let selfName: String
    let ring: HashRing
    let replicas: Int
    /// Every member but this node, in ring-name order.
    let peers: [NodeAddress]
    private let lock = Lock()
    private var epochs: [String: UInt64] = [:]
    private var synced: Set<String> = []
    private let everythingVerified = Atomic<Bool>(false)

    init(members: [NodeAddress], selfName: String, replicas: Int) {
        self.selfName = selfName
        self.replicas = max(1, replicas)
        ring = HashRing(members: members.map { HashRing.Member(name: $0.name) })
        var seen = Set<String>()
        peers = members.filter { $0.name != selfName && seen.insert($0.name).inserted }.sorted { $0.name < $1.name }
        for p in peers { epochs[p.name] = 1 }
        everythingVerified.store(peers.isEmpty, ordering: .relaxed)
    }

    /// The names of the key's replica set (owner first).
    func replicaSet(namespace: [UInt8], key: [UInt8]) -> [String] {
        ring.nodes(for: key, namespace: namespace, count: replicas).map(\.name)
    }

    /// Whether this node has caught up with every other node of the key's replica set.
    func isVerified(namespace: [UInt8], key: [UInt8]) -> Bool {
        if everythingVerified.load(ordering: .relaxed) { return true }
        let set = replicaSet(namespace: namespace, key: key)
        return lock.withLock { set.allSatisfy { $0 == selfName || synced.contains($0) } }
    }

    /// Whether every peer is synced (STATS `cluster_verified`).
    var verified: Bool { everythingVerified.load(ordering: .relaxed) }

    /// Peers not synced in their current epoch.
    var unsyncedPeers: [String] { lock.withLock { peers.map(\.name).filter { !synced.contains($0) } } }

    /// The node may have missed writes any peer holds (a start, a pause).
    func unverifyAll() {
        lock.withLock {
            for p in peers { epochs[p.name, default: 0] += 1 }
            synced.removeAll()
            everythingVerified.store(peers.isEmpty, ordering: .relaxed)
        }
    }

    /// The node may have missed writes `peer` holds (contact regained after a gap).
    func unverify(peer: String) {
        lock.withLock {
            epochs[peer, default: 0] += 1
            synced.remove(peer)
            everythingVerified.store(false, ordering: .relaxed)
        }
    }

    /// The current epoch of `peer`: a round records it when it starts.
    func epoch(of peer: String) -> UInt64 { lock.withLock { epochs[peer] ?? 0 } }

    /// A round with `peer` that started in `epoch` finished: synced, unless something
    /// unverified the peer meanwhile. True when it counted.
    @discardableResult
    func markSynced(_ peer: String, epoch: UInt64) -> Bool {
        lock.withLock {
            guard epochs[peer] == epoch else { return false }
            synced.insert(peer)
            if synced.count == peers.count { everythingVerified.store(true, ordering: .relaxed) }
            return true
        }
    }

    /// The bucket of a key for `bits` bucket bits: the top bits of its ring position.
    static func bucket(namespace: [UInt8], key: [UInt8], bits: UInt8) -> Int {
        Int(HashRing.position(key: key, namespace: namespace) >> UInt64(64 - Int(bits)))
    }

    /// An entry's contribution to its bucket's digest (digests are XORs of these).
    static func digest(namespace: [UInt8], key: [UInt8], version: UInt64, tombstone: Bool) -> UInt64 {
        var b: [UInt8] = []
        b.reserveCapacity(namespace.count + key.count + 12)
        b.append(UInt8(namespace.count)); b.append(contentsOf: namespace)
        b.append(UInt8(key.count >> 8)); b.append(UInt8(key.count & 0xFF)); b.append(contentsOf: key)
        for i in stride(from: 56, through: 0, by: -8) { b.append(UInt8(truncatingIfNeeded: version >> UInt64(i))) }
        b.append(tombstone ? 1 : 0)
        return XXH64.hash(b)
    }

    /// Whether the pair (this node, `peer`) both hold `key` by the ring: the anti-entropy domain.
    func shared(_ namespace: [UInt8], _ key: [UInt8], with peer: String) -> Bool {
        let set = replicaSet(namespace: namespace, key: key)
        return set.contains(selfName) && set.contains(peer)
    }
}
