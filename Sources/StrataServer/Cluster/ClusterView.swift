import StrataClient
import StrataCore
import Synchronization

/// The node's view of its cluster (`--cluster`, ARCHITECTURE.md "Repair in the nodes"): the
/// ring (RING.md, the same one clients use), the node's own ring name, the replica count, and
/// which peers it has caught up with since it last may have missed writes.
///
/// Verification: every event after which the node may lack writes that a peer holds — its
/// start (a restart, a wiped directory, a new node), a pause it noticed, contact with a peer
/// regained after a gap, a change of the member list while running (`replace`) — bumps that
/// peer's epoch and drops it from `synced`. An anti-entropy round with a peer that started in
/// the current epoch and finished puts it back. A key is verified when every other node of its
/// replica set is synced; an unverified GET answer carries the UNVERIFIED flag (PROTOCOL.md
/// §7.19), so clients compare it with the replicas.
///
/// Membership: the ring and the peers are one immutable snapshot, swapped whole by `replace`
/// (a `dns:` or `file:` list re-read, `Node.refreshMembership`); readers take the snapshot
/// under the lock and use it outside.
///
/// Cost: `isVerified` is one atomic load while everything is verified; otherwise a ring
/// lookup (a binary search over 512 points per node, and a small allocation) and a lock.
/// `replicaSet` takes the lock once to read the snapshot.
final class ClusterView: @unchecked Sendable {
    let selfName: String
    let replicas: Int
    private let lock = Lock()
    private var membership: Membership
    private var epochs: [String: UInt64] = [:]
    private var synced: Set<String> = []
    private let everythingVerified = Atomic<Bool>(false)

    /// One member list: the ring, the peers, and per ring point the replica set of the keys it
    /// owns as a bit mask over `ring.members` (owner and the next `replicas − 1`; nil past 64
    /// members), which lets anti-entropy's passes decide "both nodes hold this key" without a
    /// ring walk or an allocation per row.
    private struct Membership {
        let ring: HashRing
        /// Every member but this node, in ring-name order.
        let peers: [NodeAddress]
        let pointMasks: [UInt64]?
        let memberBits: [String: UInt64]
        /// PROTOCOL.md §7.19 "Member lists": XXH64 of the ring names, sorted and unique, each
        /// followed by a newline, then "replicas=R".
        let digest: UInt64

        init(members: [NodeAddress], selfName: String, replicas: Int) {
            let ring = HashRing(members: members.map { HashRing.Member(name: $0.name) })
            self.ring = ring
            digest = ClusterView.membersDigest(names: members.map(\.name), replicas: replicas)
            var seen = Set<String>()
            peers = members.filter { $0.name != selfName && seen.insert($0.name).inserted }.sorted { $0.name < $1.name }
            if ring.members.count <= 64 {
                pointMasks = (0..<ring.pointCount).map { i in
                    ring.memberIndices(fromPoint: i, count: replicas).reduce(UInt64(0)) { $0 | (1 << UInt64($1)) }
                }
                memberBits = Dictionary(uniqueKeysWithValues: ring.members.enumerated().map { ($0.element.name, UInt64(1) << UInt64($0.offset)) })
            } else {
                pointMasks = nil
                memberBits = [:]
            }
        }
    }

    init(members: [NodeAddress], selfName: String, replicas: Int) {
        self.selfName = selfName
        self.replicas = max(1, replicas)
        membership = Membership(members: members, selfName: selfName, replicas: self.replicas)
        for p in membership.peers { epochs[p.name] = 1 }
        everythingVerified.store(membership.peers.isEmpty, ordering: .relaxed)
    }

    /// The ring of the current member list.
    var ring: HashRing { lock.withLock { membership.ring } }
    /// The current member list's digest (§7.19 "Member lists").
    var membersDigest: UInt64 { lock.withLock { membership.digest } }

    /// The digest of a member list: XXH64 of the sorted, unique ring names, each followed by
    /// "\n", then "replicas=R" (§7.19 "Member lists").
    static func membersDigest(names: [String], replicas: Int) -> UInt64 {
        var bytes: [UInt8] = []
        for n in Set(names).sorted() { bytes += Array(n.utf8); bytes.append(0x0A) }
        bytes += Array("replicas=\(replicas)".utf8)
        return XXH64.hash(bytes)
    }
    /// Every member but this node, in ring-name order (the current list).
    var peers: [NodeAddress] { lock.withLock { membership.peers } }

    /// What `replace` changed: ring names added and removed.
    struct Change: Equatable { var added: [String]; var removed: [String] }

    /// Makes `members` the member list (this node must be one of them): a new ring and peers,
    /// and every peer unsynced — the node may now hold keys it never had, and a peer that
    /// returns may hold writes it missed — until a round with each finishes. Nil (nothing
    /// changed) when the list names the same members.
    func replace(members: [NodeAddress]) -> Change? {
        let next = Membership(members: members, selfName: selfName, replicas: replicas)
        return lock.withLock {
            let before = Set(membership.ring.members.map(\.name)), after = Set(next.ring.members.map(\.name))
            guard before != after else { return nil }
            membership = next
            var nextEpochs: [String: UInt64] = [:]
            for p in next.peers { nextEpochs[p.name] = (epochs[p.name] ?? 0) + 1 }
            epochs = nextEpochs
            synced.removeAll()
            everythingVerified.store(next.peers.isEmpty, ordering: .relaxed)
            return Change(added: after.subtracting(before).sorted(), removed: before.subtracting(after).sorted())
        }
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
    var unsyncedPeers: [String] { lock.withLock { membership.peers.map(\.name).filter { !synced.contains($0) } } }

    /// The node may have missed writes any peer holds (a start, a pause).
    func unverifyAll() {
        lock.withLock {
            for p in membership.peers { epochs[p.name, default: 0] += 1 }
            synced.removeAll()
            everythingVerified.store(membership.peers.isEmpty, ordering: .relaxed)
        }
    }

    /// The node may have missed writes `peer` holds (contact regained after a gap).
    func unverify(peer: String) {
        lock.withLock {
            guard epochs[peer] != nil else { return } // no longer a member
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
            if synced.count == membership.peers.count { everythingVerified.store(true, ordering: .relaxed) }
            return true
        }
    }

    /// The bucket of a key for `bits` bucket bits: the top bits of its ring position.
    static func bucket(namespace: [UInt8], key: [UInt8], bits: UInt8) -> Int {
        Int(HashRing.position(key: key, namespace: namespace) >> UInt64(64 - Int(bits)))
    }

    /// An entry's contribution to its bucket's digest (digests are XORs of these).
    /// XXH64 of `u8 ns length | ns | u16 key length | key | u64 version | u8 tombstone` (§7.19),
    /// built in a stack buffer.
    static func digest(namespace: [UInt8], key: [UInt8], version: UInt64, tombstone: Bool) -> UInt64 {
        let n = namespace.count + key.count + 12
        return withUnsafeTemporaryAllocation(byteCount: n, alignment: 8) { buf in
            var at = 0
            func put(_ x: UInt8) { buf[at] = x; at += 1 }
            put(UInt8(truncatingIfNeeded: namespace.count))
            for x in namespace { put(x) }
            put(UInt8(truncatingIfNeeded: key.count >> 8)); put(UInt8(truncatingIfNeeded: key.count))
            for x in key { put(x) }
            for i in stride(from: 56, through: 0, by: -8) { put(UInt8(truncatingIfNeeded: version >> UInt64(i))) }
            put(tombstone ? 1 : 0)
            return XXH64.hash(UnsafeRawBufferPointer(buf))
        }
    }

    /// Whether the pair (this node, `peer`) both hold `key` by the ring: the anti-entropy domain.
    func shared(_ namespace: [UInt8], _ key: [UInt8], with peer: String) -> Bool {
        Self.shared(namespace, key, ring: ring, replicas: replicas, me: selfName, peer: peer)
    }

    private static func shared(_ namespace: [UInt8], _ key: [UInt8], ring: HashRing, replicas: Int, me: String, peer: String) -> Bool {
        if key.isEmpty { return true } // a flush mark (FlushMarks) is every node's
        let set = ring.nodes(for: key, namespace: namespace, count: replicas).map(\.name)
        return set.contains(me) && set.contains(peer)
    }

    /// `shared(_:_:with:)` for many keys and one peer (a pass over the rows): the test made
    /// once, each call one ring position, a binary search and a mask test.
    func sharedTest(with peer: String) -> ([UInt8], [UInt8]) -> Bool {
        let m = lock.withLock { membership }
        guard let masks = m.pointMasks, let mine = m.memberBits[selfName], let theirs = m.memberBits[peer] else {
            let ring = m.ring, replicas = self.replicas, me = selfName
            return { Self.shared($0, $1, ring: ring, replicas: replicas, me: me, peer: peer) }
        }
        let both = mine | theirs, ring = m.ring
        return { ns, key in key.isEmpty || masks[ring.point(at: HashRing.position(key: key, namespace: ns))] & both == both }
    }
}
