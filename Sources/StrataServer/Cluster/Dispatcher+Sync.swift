import StrataCore
import StrataStore
import StrataWire

// The node's side of anti-entropy (PROTOCOL.md §7.19) and the UNVERIFIED flag on reads.
extension Dispatcher {
    static let noCluster = "this node has no --cluster: it takes part in no anti-entropy"

    /// Which entries a SYNC_DIGEST or SYNC_KEYS compares: those this node and the requester
    /// both hold by the requester's member list — this node's own when the two run the same
    /// list (or the requester sent no digest), else the list the requester sent with
    /// SYNC_DIGEST (§7.19 "Member lists": during a rolling change the two compare by the
    /// requester's ring, so what it calls caught up it has compared). A message when refused.
    private func syncDomain(_ s: SyncRequest) -> Result<([UInt8], [UInt8]) -> Bool, ClusterView.ListError> {
        guard let c = cluster else { return .failure(.init(Self.noCluster)) }
        let peer = String(decoding: s.requester, as: UTF8.self)
        guard let theirs = s.members, theirs != c.membersDigest else {
            if let why = syncRefusal(requester: s.requester) { return .failure(.init(why)) }
            return .success(c.sharedTest(with: peer))
        }
        switch c.domain(forList: theirs, text: s.memberList) {
        case .failure(let e): return .failure(e)
        case .success(let d):
            guard d.names(peer), d.names(c.selfName) else {
                return .failure(.init("the requester's member list must name both '\(peer)' and this node ('\(c.selfName)')"))
            }
            return .success(d.sharedTest(me: c.selfName, peer: peer))
        }
    }

    private func syncRefusal(requester: [UInt8]) -> String? {
        guard let c = cluster else { return Self.noCluster }
        let peer = String(decoding: requester, as: UTF8.self)
        guard c.peers.contains(where: { $0.name == peer }) else {
            return "'\(peer)' is not a member of this node's --cluster (its members: \(c.ring.members.map(\.name).joined(separator: ",")))"
        }
        return nil
    }

    /// SYNC_DIGEST: one XOR digest per bucket of the entries this node holds that it and the
    /// requester both replicate.
    func syncDigest(_ s: SyncRequest, _ f: Frame) throws -> Frame {
        let shared: ([UInt8], [UInt8]) -> Bool
        switch syncDomain(s) {
        case .failure(let e): return Responses.error(to: f, .invalidArgument, e.message)
        case .success(let test): shared = test
        }
        let c = cluster!
        let peer = String(decoding: s.requester, as: UTF8.self)
        let sameList = s.members.map { $0 == c.membersDigest } ?? true
        let (digests, n) = try syncDigests(peer: peer, list: sameList ? c.membersDigest : nil, bits: s.bucketBits,
                                           maxVersion: s.maxVersion, include: shared)
        // A requester on another list learns this node's in return (it hands writes to the
        // replicas by it during the change, and compares by it: `ClusterView.hintTargets`,
        // `AntiEntropy.round`) — also when this node knew the requester's list already. So
        // does any requester learn the other lists this node has in use that name both: a node
        // restarted onto the new list with a wiped directory knows no old list of its own.
        var lists: [[UInt8]] = sameList ? [] : [c.membersText]
        // (Only to a request with `members`, as nodes send: a bare SYNC_DIGEST gets the digests alone.)
        if s.members != nil {
            for l in c.otherListsNaming(peer, c.selfName) where l.digest != s.members { lists.append(l.text) }
        }
        return Responses.syncDigest(to: f, digests: digests, entries: n, memberList: Responses.joinMemberLists(lists))
    }

    /// One digest per bucket of the entries this node and `peer` both hold (`include`) with a
    /// version up to `maxVersion`, and their count: from the maintained digests (`SyncDigests`)
    /// for a settled comparison (`maxVersion` below 2^64 − 1) by this node's member list
    /// (`list`: its digest; nil for another list) when they are ready, else by a pass over the
    /// rows (`forEachSyncEntry`) — always for a catching-up one, which must be exact.
    func syncDigests(peer: String, list: UInt64?, bits: UInt8, maxVersion: UInt64,
                     include: ([UInt8], [UInt8]) -> Bool) throws -> (digests: [UInt64], entries: Int) {
        if maxVersion < .max, let list, let d = syncDigests, var (digests, n) = d.digests(for: peer, list: list, bits: bits, maxVersion: maxVersion) {
            // The flush marks, as `FlushMarks.forEachSyncEntry` lists them (every pair's).
            for (ns, v) in flushMarks?.floors().live ?? [] where v <= maxVersion {
                digests[ClusterView.bucket(namespace: ns, key: [], bits: bits)] ^= ClusterView.digest(namespace: ns, key: [], version: v, tombstone: true)
                n += 1
            }
            stats?.syncDigestsMaintained.add()
            return (digests, n)
        }
        var digests = [UInt64](repeating: 0, count: 1 << Int(bits))
        var n = 0
        try forEachSyncEntry(maxVersion: maxVersion, include: include) { e in
            digests[ClusterView.bucket(namespace: e.namespace, key: e.key, bits: bits)] ^=
                ClusterView.digest(namespace: e.namespace, key: e.key, version: e.version, tombstone: e.tombstone)
            n += 1
        }
        stats?.syncDigestsPassed.add()
        return (digests, n)
    }

    /// The most entry bytes one SYNC_KEYS answer carries (the rest of the buckets are asked for again).
    static let syncKeysBudget = 1 << 20

    /// SYNC_KEYS: the shared entries of the buckets asked for, whole buckets in the order asked,
    /// as many as fit in `syncKeysBudget` (at least one bucket).
    func syncKeys(_ s: SyncRequest, _ f: Frame) throws -> Frame {
        let shared: ([UInt8], [UInt8]) -> Bool
        switch syncDomain(s) {
        case .failure(let e): return Responses.error(to: f, .invalidArgument, e.message)
        case .success(let test): shared = test
        }
        var byBucket: [Int: [SyncKeyEntry]] = [:]
        for b in s.buckets { byBucket[Int(b)] = [] }
        let include = { (ns: [UInt8], key: [UInt8]) in
            byBucket[ClusterView.bucket(namespace: ns, key: key, bits: s.bucketBits)] != nil && shared(ns, key)
        }
        var listed = Set<ItemKey>()
        try forEachSyncEntry(maxVersion: s.maxVersion, include: include) { e in
            listed.insert(ItemKey(namespace: e.namespace, key: e.key))
            byBucket[ClusterView.bucket(namespace: e.namespace, key: e.key, bits: s.bucketBits)]?
                .append(SyncKeyEntry(namespace: e.namespace, key: e.key, version: e.version, tombstone: e.tombstone))
        }
        // Writes a disk limit removed here, listed as held (`EvictedVersions`, as in
        // `AntiEntropy.reconcile`): a peer holding the same write pushes nothing.
        let floors = flushMarks?.floors() ?? FlushMarks.Floors()
        for e in store.evictedSyncEntries(include: include) where e.version <= s.maxVersion && !floors.hides(e) {
            guard !listed.contains(ItemKey(namespace: e.namespace, key: e.key)) else { continue }
            byBucket[ClusterView.bucket(namespace: e.namespace, key: e.key, bits: s.bucketBits)]?
                .append(SyncKeyEntry(namespace: e.namespace, key: e.key, version: e.version, tombstone: e.tombstone))
        }
        var out: [SyncKeyEntry] = []
        var bytes = 0, covered = 0
        for b in s.buckets {
            let entries = byBucket[Int(b)] ?? []
            let size = entries.reduce(0) { $0 + $1.encodedSize }
            if covered > 0 && bytes + size > Self.syncKeysBudget { break }
            out += entries
            bytes += size
            covered += 1
        }
        return Responses.syncKeys(to: f, entries: out, bucketsCovered: covered)
    }

    /// SYNC_CHECK: the indices of the listed writes this node lacks (it holds nothing for the
    /// key on disk, or an older version). Asked by any node (§7.19): during a rolling change a
    /// node on the new list hands writes to replicas whose list does not name it yet.
    func syncCheck(_ s: SyncCheck, _ f: Frame) throws -> Frame {
        guard cluster != nil else { return Responses.error(to: f, .invalidArgument, Self.noCluster) }
        var lacking: [Int] = []
        // A write a flush superseded counts as held.
        let floors = flushMarks?.floors() ?? FlushMarks.Floors()
        for (i, e) in s.entries.enumerated() where e.version >= floors.floor(e.namespace) {
            // A write a disk limit removed here counts as held too (`EvictedVersions`).
            let held = max(try store.syncVersion(e.key, namespace: e.namespace), store.evictedDelete(e.key, namespace: e.namespace)?.evicted ?? 0)
            if held < e.version { lacking.append(i) }
        }
        return Responses.syncCheck(to: f, lacking: lacking)
    }

    /// The entries anti-entropy compares: the disk tier's, less those a flush superseded, and
    /// the flush marks (`FlushMarks.forEachSyncEntry`).
    func forEachSyncEntry(maxVersion: UInt64, include: ([UInt8], [UInt8]) -> Bool, _ body: (SyncEntry) -> Void) throws {
        if let m = flushMarks { try m.forEachSyncEntry(maxVersion: maxVersion, include: include, body) } else {
            try store.forEachSyncEntry(maxVersion: maxVersion, include: include, body)
        }
    }

    /// A write applied with `version` (0: unknown, looked up when the hint is sent): the key's
    /// other replicas get a hint when it reached the disk tier (replicas hold the disk tier).
    /// Variants (`VariantLineage.isDerived`) are node-local: no hint.
    func replicated(_ namespace: [UInt8], _ key: [UInt8], _ version: UInt64, tiers: Tiers, tombstone: Bool = false) {
        guard let h = handoff, tiers.contains(.disk), !VariantLineage.isDerived(key) else { return }
        h.accepted(namespace: namespace, key: key, version: version, tombstone: tombstone)
    }

    /// UNVERIFIED (status) for an INCR/DECR/TOUCH or SET with flag VERIFIED_ONLY on a node that has
    /// not caught up with the key's other replicas (PROTOCOL.md §7.19): the node must not decide
    /// from a copy that may be older than what a replica decided meanwhile. An outside review
    /// (cl14): increments sent to the owner while it was paused ran when it resumed, from its
    /// pre-pause value, with versions newer than what the replicas had decided during the
    /// pause — every increment acknowledged by a replica then was lost. Nil: go on.
    func refusedUnverified(_ r: Request, _ f: Frame) -> Frame? {
        guard let c = cluster else { return nil }
        let key: (ns: [UInt8], key: [UInt8])
        switch r {
        case .counter(let x) where x.verifiedOnly: key = (x.namespace, x.key)
        case .set(let x) where x.verifiedOnly: key = (x.namespace, x.key)
        case let .touch(ns, k, _, _, _, true): key = (ns, k)
        default: return nil
        }
        pauseCheck?()
        guard !c.verified, !c.isVerified(namespace: key.ns, key: key.key) else { return nil }
        stats?.unverifiedRefusals.add()
        return Responses.error(to: f, .unverified,
                               "this node has not caught up with the key's other replicas since it started, was paused or lost contact with them; nothing was done: decide on another replica")
    }

    /// Whether `markUnverified` flags the answer to `r`: a GET, MGET, EXISTS or META of a key
    /// this `--cluster` node has not verified.
    func mayBeUnverified(_ r: Request) -> Bool {
        guard let c = cluster, !c.verified else { return false }
        switch r {
        case .get(let g): return !c.isVerified(namespace: g.namespace, key: g.key)
        case let .mget(ns, keys, _): return keys.contains { !c.isVerified(namespace: ns, key: $0) }
        case let .exists(ns, key, _), let .meta(ns, key, _): return !c.isVerified(namespace: ns, key: key)
        default: return false
        }
    }

    /// `response` with the UNVERIFIED flag when this node has not caught up with the other
    /// replicas of a key the GET, MGET, EXISTS or META read (PROTOCOL.md §7.19).
    func markUnverified(_ r: Request, _ response: Frame) -> Frame {
        guard cluster != nil else { return response }
        // A SIGCONT's first requests may be read before any loop's tick noticed the pause.
        pauseCheck?()
        guard mayBeUnverified(r) else { return response }
        var out = response
        out.responseFlags |= ResponseFlags.unverified.rawValue
        stats?.unverifiedAnswers.add()
        return out
    }
}
