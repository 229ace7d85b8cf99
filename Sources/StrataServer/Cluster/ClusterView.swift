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
    /// Former members to catch up with once (`addFormerMembers`): while any is left, nothing
    /// is verified.
    private var formerToSync: Set<String> = []
    private let everythingVerified = Atomic<Bool>(false)

    /// One member list: the ring, the peers, its digest and text (§7.19 "Member lists"), and the
    /// ring's replica masks (`RingDomain`).
    private struct Membership {
        let domain: RingDomain
        var ring: HashRing { domain.ring }
        /// Every member but this node, in ring-name order.
        let peers: [NodeAddress]
        /// PROTOCOL.md §7.19 "Member lists": the ring names, sorted and unique, each followed by
        /// a newline, then "replicas=R"; `digest` is its XXH64.
        let text: [UInt8]
        let digest: UInt64

        init(members: [NodeAddress], selfName: String, replicas: Int) {
            domain = RingDomain(names: members.map(\.name), replicas: replicas)
            text = ClusterView.membersText(names: members.map(\.name), replicas: replicas)
            digest = XXH64.hash(text)
            var seen = Set<String>()
            peers = members.filter { $0.name != selfName && seen.insert($0.name).inserted }.sorted { $0.name < $1.name }
        }
    }

    /// A ring and, per ring point, the replica set of the keys it owns as a bit mask over
    /// `ring.members` (owner and the next `replicas − 1`; nil past 64 members), which lets
    /// anti-entropy's passes decide "both nodes hold this key" without a ring walk or an
    /// allocation per row. Built for this node's list, and for a peer's other list during a
    /// rolling change (`domain(forList:)`).
    struct RingDomain {
        let ring: HashRing
        let replicas: Int
        let pointMasks: [UInt64]?
        let memberBits: [String: UInt64]

        init(names: [String], replicas: Int) {
            let ring = HashRing(members: names.map { HashRing.Member(name: $0) })
            self.ring = ring
            self.replicas = replicas
            if ring.members.count <= 64 {
                pointMasks = (0..<ring.pointCount).map { i in
                    ring.memberIndices(fromPoint: i, count: replicas).reduce(UInt64(0)) { $0 | (1 << UInt64($1)) }
                }
                memberBits = Dictionary(ring.members.enumerated().map { ($0.element.name, UInt64(1) << UInt64($0.offset)) },
                                        uniquingKeysWith: { a, _ in a })
            } else {
                pointMasks = nil
                memberBits = [:]
            }
        }

        /// Whether the ring names `name`.
        func names(_ name: String) -> Bool { ring.members.contains { $0.name == name } }

        /// Whether `me` and `peer` both hold a key by this ring, made once for a pass over many
        /// keys: each call one ring position, a binary search and a mask test.
        func sharedTest(me: String, peer: String) -> ([UInt8], [UInt8]) -> Bool {
            guard let masks = pointMasks, let mine = memberBits[me], let theirs = memberBits[peer] else {
                let ring = self.ring, replicas = self.replicas
                return { ClusterView.shared($0, $1, ring: ring, replicas: replicas, me: me, peer: peer) }
            }
            let both = mine | theirs, ring = self.ring
            // Variants are node-local (`VariantLineage.isDerived`): in no comparison.
            return { ns, key in key.isEmpty || (!VariantLineage.isDerived(key) && masks[ring.point(at: HashRing.position(key: key, namespace: ns))] & both == both) }
        }
    }

    /// Rings of other member lists that peers sent during a rolling change (by digest; a few),
    /// with when a round last used each (monotonic seconds).
    private var otherLists: [UInt64: OtherList] = [:]

    /// Another member list in use: its ring, text (§7.19 "Member lists"), digest, and when a
    /// peer last sent it or answered with it (monotonic seconds).
    struct OtherList {
        let domain: RingDomain
        let text: [UInt8]
        let digest: UInt64
        var used: Double
    }
    /// A peer's other list counts for hints (`hintTargets`) while a round used it this recently:
    /// peers sync at least every ~30 s, so a list unused for 2 minutes is rolled out.
    static let otherListLifetime: Double = 120
    static let maxOtherLists = 8
    /// The most members a peer's list may name.
    static let maxListMembers = 1024

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
    /// The current member list's ring domain and digest, read together.
    var currentDomain: (domain: RingDomain, digest: UInt64) { lock.withLock { (membership.domain, membership.digest) } }

    /// The digest of a member list: XXH64 of `membersText` (§7.19 "Member lists").
    static func membersDigest(names: [String], replicas: Int) -> UInt64 {
        XXH64.hash(membersText(names: names, replicas: replicas))
    }

    /// A member list as §7.19 "Member lists" writes it: the sorted, unique ring names, each
    /// followed by "\n", then "replicas=R".
    static func membersText(names: [String], replicas: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        for n in Set(names).sorted() { bytes += Array(n.utf8); bytes.append(0x0A) }
        bytes += Array("replicas=\(replicas)".utf8)
        return bytes
    }

    /// The current member list's text (sent with SYNC_DIGEST to a peer on another list).
    var membersText: [UInt8] { lock.withLock { membership.text } }

    /// The ring of a peer's member list (`text`, whose XXH64 is `digest`), for a round the peer
    /// asks for while its list differs from this node's (§7.19 "Member lists"): built from
    /// `text` (then kept by digest) or found by the digest of a list sent before; an error
    /// message when neither works.
    func domain(forList digest: UInt64, text: [UInt8]) -> Result<RingDomain, ListError> {
        let now = monotonicSeconds()
        if let d = lock.withLock({ () -> RingDomain? in
            otherLists[digest]?.used = now
            return otherLists[digest]?.domain
        }) { return .success(d) }
        guard digest != membersDigest else { return .failure(ListError("the member list sent is this node's own")) }
        guard !text.isEmpty else {
            return .failure(ListError("member lists differ: this node's (\(ring.members.count) members, \(replicas) replicas) is not the requester's, and the requester's list is not known here: send it with SYNC_DIGEST (§7.19)"))
        }
        guard XXH64.hash(text) == digest else { return .failure(ListError("the member list sent does not match its digest")) }
        var lines = text.split(separator: 0x0A, omittingEmptySubsequences: false)
        guard let last = lines.popLast(), last.starts(with: Array("replicas=".utf8)),
              let r = Int(String(decoding: last.dropFirst(9), as: UTF8.self)), r >= 1, r <= 64 else {
            return .failure(ListError("the member list sent does not end with replicas=R (R 1…64)"))
        }
        let names = lines.map { String(decoding: $0, as: UTF8.self) }
        guard !names.isEmpty, names.count <= Self.maxListMembers, names.allSatisfy({ !$0.isEmpty }), Set(names).count == names.count else {
            return .failure(ListError("the member list sent must name 1…\(Self.maxListMembers) distinct members, one per line"))
        }
        // Sorted bytewise, as §7.19 says: the same members in another order would be another
        // digest for the same list (an outside review: kept, and passed on to other peers).
        guard zip(lines, lines.dropFirst()).allSatisfy({ $0.lexicographicallyPrecedes($1) }) else {
            return .failure(ListError("the member list sent must be sorted bytewise"))
        }
        let d = RingDomain(names: names, replicas: r)
        keep(OtherList(domain: d, text: text, digest: digest, used: now))
        return .success(d)
    }

    /// Whether this node keeps the list of `digest` (in use or not).
    func knowsList(_ digest: UInt64) -> Bool { lock.withLock { otherLists[digest] != nil } }

    /// This node's own previous member list (the one it last ran with, `DIR/cluster-members`,
    /// with the current replica count): it counts for hints as a peer's other list does, for
    /// `otherListLifetime` unless peers sync by it meanwhile — the writes this node takes right
    /// after it switched lists still reach the replicas by the old one.
    func rememberPrevious(names: [String]) {
        guard !names.isEmpty, Set(names).count == names.count else { return }
        let text = Self.membersText(names: names, replicas: replicas), digest = XXH64.hash(text)
        guard digest != membersDigest else { return }
        keep(OtherList(domain: RingDomain(names: names, replicas: replicas), text: text, digest: digest, used: monotonicSeconds()))
        if names.contains(selfName) { addFormerMembers(names) }
    }

    /// Keeps another list by its digest, making room by forgetting the least recently used.
    private func keep(_ l: OtherList) {
        lock.withLock {
            if otherLists.count >= Self.maxOtherLists, let oldest = otherLists.min(by: { $0.value.used < $1.value.used }) {
                otherLists[oldest.key] = nil
            }
            otherLists[l.digest] = l
        }
    }

    /// The other lists in use: a peer sent or answered with each within `otherListLifetime`
    /// (or it is this node's previous list, that long after the start). Under `lock`.
    private var listsInUse: [OtherList] {
        let now = monotonicSeconds()
        return otherLists.values.filter { now - $0.used < Self.otherListLifetime }
    }

    /// The other lists in use that name both `a` and `b`: a round compares by each of them too
    /// (`AntiEntropy.round`).
    func otherListsNaming(_ a: String, _ b: String) -> [OtherList] {
        lock.withLock { listsInUse.filter { $0.domain.names(a) && $0.domain.names(b) } }
    }

    struct ListError: Error { let message: String; init(_ m: String) { message = m } }

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
            // The members the new list drops are former members (a removal), in the same step:
            // the node is never verified in between.
            formerToSync.formUnion(before.subtracting(after).subtracting([selfName]))
            formerToSync.subtract(after)
            everythingVerified.store(next.peers.isEmpty && formerToSync.isEmpty, ordering: .relaxed)
            return Change(added: after.subtracting(before).sorted(), removed: before.subtracting(after).sorted())
        }
    }

    /// The names of the key's replica set (owner first).
    func replicaSet(namespace: [UInt8], key: [UInt8]) -> [String] {
        ring.nodes(for: key, namespace: namespace, count: replicas).map(\.name)
    }

    /// Whom a write this node applied is handed to (`Handoff`): the other nodes of the key's
    /// replica set by this node's list and, during a rolling change, by each other list a peer
    /// synced with recently (so a replica still on the old list gets the write too, and a node
    /// on the new list that the old list does not name yet); and whether this node holds the
    /// key by any of those lists (false: a foreign write). One ring lookup, and one per other
    /// list in use.
    func hintTargets(namespace: [UInt8], key: [UInt8]) -> (targets: [String], replica: Bool, mine: [String]) {
        let (m, others) = lock.withLock { () -> (Membership, [RingDomain]) in
            (membership, otherLists.isEmpty ? [] : listsInUse.map(\.domain))
        }
        let mine = m.ring.nodes(for: key, namespace: namespace, count: replicas).map(\.name)
        var replica = mine.contains(selfName)
        var targets = mine.filter { $0 != selfName }
        for d in others {
            let set = d.ring.nodes(for: key, namespace: namespace, count: d.replicas).map(\.name)
            replica = replica || set.contains(selfName)
            for n in set where n != selfName && !targets.contains(n) { targets.append(n) }
        }
        return (targets, replica, mine)
    }

    /// Whether `name` is a peer, or a member of another list in use (`hintTargets` may name it).
    func isHintTarget(_ name: String) -> Bool {
        guard name != selfName else { return false }
        return lock.withLock {
            membership.peers.contains { $0.name == name } || listsInUse.contains { $0.domain.names(name) }
        }
    }

    /// Whether this node has caught up with every other node of the key's replica set (and
    /// with every former member it must catch up with: until then, with none of its keys).
    /// Whether this node has caught up with every peer (then every key is verified). One atomic load.
    var allVerified: Bool { everythingVerified.load(ordering: .relaxed) }

    func isVerified(namespace: [UInt8], key: [UInt8]) -> Bool {
        if everythingVerified.load(ordering: .relaxed) { return true }
        let set = replicaSet(namespace: namespace, key: key)
        return lock.withLock { formerToSync.isEmpty && set.allSatisfy { $0 == selfName || synced.contains($0) } }
    }

    /// Members of another list naming this node — its previous list at a start, or one a peer
    /// answered with — that its own list does not name: a node being removed, which still runs
    /// the old list and may have taken writes of keys this node holds by that list while this
    /// node was down. This node catches up with each once (a round by the lists naming both,
    /// `AntiEntropy`) and is unverified until then; one that cannot be reached is given up
    /// (`formerMemberDone`).
    func addFormerMembers(_ names: [String]) {
        lock.withLock {
            let members = Set(membership.ring.members.map(\.name))
            for n in names where n != selfName && !members.contains(n) {
                if formerToSync.insert(n).inserted { everythingVerified.store(false, ordering: .relaxed) }
            }
        }
    }

    /// The former members still to catch up with.
    var formerMembersToSync: [String] { lock.withLock { formerToSync.sorted() } }

    /// A former member was caught up with, or given up.
    func formerMemberDone(_ name: String) {
        lock.withLock {
            formerToSync.remove(name)
            if formerToSync.isEmpty && synced.count == membership.peers.count { everythingVerified.store(true, ordering: .relaxed) }
        }
    }

    /// Whether every peer is synced (STATS `cluster_verified`).
    var verified: Bool { everythingVerified.load(ordering: .relaxed) }

    /// Peers not synced in their current epoch, and former members still to catch up with.
    var unsyncedPeers: [String] {
        lock.withLock { membership.peers.map(\.name).filter { !synced.contains($0) } + formerToSync.sorted() }
    }

    /// The node may have missed writes any peer holds (a start, a pause).
    func unverifyAll() {
        lock.withLock {
            for p in membership.peers { epochs[p.name, default: 0] += 1 }
            synced.removeAll()
            everythingVerified.store(membership.peers.isEmpty && formerToSync.isEmpty, ordering: .relaxed)
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
            if synced.count == membership.peers.count && formerToSync.isEmpty { everythingVerified.store(true, ordering: .relaxed) }
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

    static func shared(_ namespace: [UInt8], _ key: [UInt8], ring: HashRing, replicas: Int, me: String, peer: String) -> Bool {
        if key.isEmpty { return true } // a flush mark (FlushMarks) is every node's
        if VariantLineage.isDerived(key) { return false } // a variant is node-local
        let set = ring.nodes(for: key, namespace: namespace, count: replicas).map(\.name)
        return set.contains(me) && set.contains(peer)
    }

    /// `shared(_:_:with:)` for many keys and one peer (a pass over the rows): the test made
    /// once, each call one ring position, a binary search and a mask test.
    func sharedTest(with peer: String) -> ([UInt8], [UInt8]) -> Bool {
        lock.withLock { membership.domain }.sharedTest(me: selfName, peer: peer)
    }
}
