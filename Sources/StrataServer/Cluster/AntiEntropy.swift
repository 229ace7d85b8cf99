#if canImport(Glibc)
import Glibc
#endif
import StrataClient
import StrataCore
import StrataImage
import StrataStore
import StrataWire
import Synchronization

/// Anti-entropy (ARCHITECTURE.md "Repair in the nodes"): a `strata-sync` thread that, every
/// `interval`, compares what this node holds with each peer and copies the newer side across.
///
/// A round with peer P: HELLO; SYNC_DIGEST asks P for one XOR digest per bucket of the
/// entries (namespace, key, version, tombstone) that P holds and that both nodes replicate by
/// this node's ring (when P runs another member list — a rolling change — P answers "member
/// lists differ" and this node sends its list along, §7.19); this node computes the same over its own entries; for the buckets that differ,
/// SYNC_KEYS lists P's entries, and each key newer on P (or only there) is read from P and
/// written here with its version, each key newer here is written to P. Versions decide, so
/// a copy that crosses a client's write is ignored (SUPERSEDED) — never an older value over a
/// newer one, and a tombstone wins over the older items it deleted.
///
/// While P is synced, items written in the last `settle` seconds are left out of the
/// comparison (they are usually still on their way to both nodes); a round that catches up
/// (P unsynced) compares everything. A finished round marks P synced in `ClusterView` unless
/// something unverified it meanwhile.
///
/// Contact: a pass in which rounds with more than half of the peers fail means this node may
/// be the one cut off (clients may be writing to the others without it), so those peers are
/// unverified at once. Rounds failing with a minority of peers mean those peers are down or
/// cut off; this node stays verified, and unverifies each of them when contact comes back
/// (it may have taken writes this node missed), so the round that regains contact catches up.
///
/// Cost when nothing differs: once synced, settled rounds take both sides' digests from
/// `SyncDigests` (no pass over the rows: 4 ms a round at 200,000 rows, bench/RESULTS.md);
/// catching-up rounds, and rounds by another list, pass over the rows on both sides. Plus the
/// digests on the wire (8 × 2^bits bytes); a differing bucket costs a SYNC_KEYS and, here, a
/// pass over the rows to list it. `interval` stretches
/// to 20 × the last round's time, so the passes stay under ~5 % of one core; while a peer is
/// not synced (it may not have started yet), the next pass comes within a second. Passes that
/// copied nothing and passed over the rows (digests, or buckets that differed) double the wait,
/// up to `quietCeiling` (or `interval` if longer; passes on maintained digests that found no
/// bucket differing keep `interval`): hinted handoff
/// (`Handoff`) delivers the writes, and the rounds are its backstop (under load buckets differ
/// by the writes landing during a round, which copy nothing). A copy, a peer unsynced (a pause
/// noticed) or a dropped hint (`wake`) bring the next pass back at once.
final class AntiEntropy: @unchecked Sendable {
    let view: ClusterView
    let store: TieredCache
    let dispatcher: Dispatcher
    let log: Logger
    let stats: NodeStats
    let token: [UInt8]?
    /// TLS to the peers (`--cluster-tls-ca`), nil for plaintext.
    let tls: TLSClientConfiguration?
    let interval: Double
    let timeout: Double
    let settle: Double = 2
    private let stopFlag = Atomic<Bool>(false)
    /// Set by `wake()`: the next pass starts without waiting out the interval.
    private let urgent = Atomic<Bool>(false)
    /// Passes in a row in which every round finished and no bucket differed (sync thread only).
    private var quietPasses = 0
    /// Whether the last finished round copied anything either way (sync thread only). Under
    /// load buckets differ by the writes that land during the round itself; those copy nothing.
    private var lastRoundCopied = false
    /// The longest wait between passes while nothing differs (unless `interval` is longer).
    static let quietCeiling: Double = 30
    private let finished = Completion<Void>()
    /// When rounds with each former member still to catch up with began failing (sync thread only).
    private var formerFailing: [String: Double] = [:]
    /// How long a former member whose rounds fail is tried before it is given up.
    static let formerPatience: Double = 30
    /// Peers whose last round failed (touched by the sync thread only).
    private var outOfContact: Set<String> = []
    /// Why the last connection to each peer failed (for the `peer_contact_lost` line), and the
    /// kind of that failure (a refused connection, AUTH_FAILED, …).
    private var connectFailure: [String: (message: String, kind: String)] = [:]
    /// The kind of failure the last `peer_contact_lost` line named for each peer out of contact:
    /// a different one is logged again (an outside review, op7: a node that first saw its peer
    /// down never said that the peer later refused its token).
    private var loggedFailure: [String: String] = [:]

    init(view: ClusterView, store: TieredCache, dispatcher: Dispatcher, log: Logger, stats: NodeStats,
         token: [UInt8]?, interval: Double, timeout: Double = 2, tls: TLSClientConfiguration? = nil) {
        self.view = view; self.store = store; self.dispatcher = dispatcher; self.log = log; self.stats = stats
        self.token = token; self.interval = interval; self.timeout = timeout; self.tls = tls
    }

    func start() {
        _ = startThread(name: "strata-sync") { [self] in
            // The maintained digests: one listing of the rows, then every change (SyncDigests).
            if let d = dispatcher.syncDigests {
                do { try store.watchDiskRows(d) } catch { log.warn("sync_digests_off", [("why", "\(error)")]) }
            }
            while !stopFlag.load(ordering: .relaxed) {
                let t0 = monotonicSeconds()
                let passesBefore = stats.syncDigestsPassed.load(), differingBefore = stats.syncBucketsDiffering.load()
                var failed: [String] = []
                var differed = false
                // The member list of this pass (it may change meanwhile: `ClusterView.replace`).
                let peers = view.peers
                outOfContact.formIntersection(peers.map(\.name))
                for peer in peers where !stopFlag.load(ordering: .relaxed) {
                    if !round(peer) { failed.append(peer.name) } else if lastRoundCopied { differed = true }
                }
                for name in view.formerMembersToSync where !stopFlag.load(ordering: .relaxed) { catchUp(former: name) }
                if !stopFlag.load(ordering: .relaxed) { lost(failed, of: peers.count) }
                // Quiet passes back off only while they pass over the rows — for the digests, or
                // to list buckets that differ with nothing to copy (replicas whose disk tiers
                // evicted different items: an outside review saw every round list ~130 such
                // buckets): rounds on maintained digests that find nothing differing cost about
                // the same at any size, so they keep the interval.
                let passedRows = stats.syncDigestsPassed.load() != passesBefore || stats.syncBucketsDiffering.load() != differingBefore
                quietPasses = failed.isEmpty && !differed ? (passedRows ? quietPasses + 1 : 0) : 0
                let wait = Self.wait(interval: interval, spent: monotonicSeconds() - t0, quietPasses: quietPasses,
                                     unsynced: !view.unsyncedPeers.isEmpty)
                let wasVerified = view.verified
                // Something may have cost this node writes (a pause it noticed), or a hint was
                // dropped: the next pass now.
                sleep(upTo: wait) {
                    stopFlag.load(ordering: .relaxed) || urgent.exchange(false, ordering: .relaxed) || (wasVerified && !view.verified)
                }
            }
            finished.fulfil(())
        }
    }

    func stop() {
        stopFlag.store(true, ordering: .relaxed)
        finished.wait()
    }

    /// Seconds to wait after a pass that took `spent`. While a peer is unsynced (one not started
    /// yet, or one a restart, a pause or a membership change left behind: this node's answers
    /// for its keys stay flagged until then), within a second, and never less than 4 × the
    /// pass's time minus that time (catching up takes at most ~25 % of a core, and ends).
    /// Otherwise `interval`, doubled for each quiet pass in a row up to `quietCeiling` (or
    /// `interval` if longer), and never less than 20 × the pass's time minus that time (≤ ~5 %).
    static func wait(interval: Double, spent: Double, quietPasses: Int, unsynced: Bool) -> Double {
        if unsynced { return max(min(interval, 1), 4 * spent) - spent }
        let base = min(interval * Double(1 << min(quietPasses, 16)), max(interval, quietCeiling))
        return max(base, 20 * spent) - spent
    }

    /// Starts the next pass now (a hint was dropped: only a round delivers that write).
    func wake() { urgent.store(true, ordering: .relaxed) }

    /// A round reached `peer`. After a failed one, the peer may hold writes this node missed:
    /// unverified until this round (which starts after this call) finishes.
    private func contacted(_ peer: String) {
        connectFailure[peer] = nil
        loggedFailure[peer] = nil
        if outOfContact.remove(peer) != nil {
            view.unverify(peer: peer)
            log.info("peer_contact_regained", [("peer", peer)])
        }
    }

    /// The peers this pass failed to finish a round with (see the type's "Contact").
    private func lost(_ failed: [String], of peers: Int) {
        let isolated = failed.count * 2 > peers
        for p in failed {
            let kind = connectFailure[p]?.kind ?? "round"
            let first = outOfContact.insert(p).inserted
            if first { stats.peersLost.add() }
            if first || loggedFailure[p] != kind {
                loggedFailure[p] = kind
                log.warn("peer_contact_lost", [("peer", p), ("isolated", isolated ? "1" : "0"),
                                               ("error", connectFailure[p]?.message ?? "the round failed (see sync_failed)")])
            }
            if isolated { view.unverify(peer: p) }
        }
    }

    /// One round with `peer`; true when it finished (every difference copied).
    @discardableResult
    func round(_ peer: NodeAddress) -> Bool {
        let conn: NodeConnection
        do { conn = try NodeConnection(host: peer.host, port: peer.port, timeout: timeout, token: token, hello: true, tls: tls) } catch {
            let kind = (error as? ClientError).map { "\($0.kind) \($0.status.map { "\($0)" } ?? "")" } ?? "\(type(of: error))"
            connectFailure[peer.name] = ("\(error)", kind)
            return false
        }
        defer { conn.close() }
        contacted(peer.name)
        let epoch = view.epoch(of: peer.name)
        let catchingUp = view.unsyncedPeers.contains(peer.name)
        let maxVersion: UInt64 = catchingUp ? .max : UInt64(max(0, store.clock.nowMicros() - Int64(settle * 1e6)))
        let t0 = monotonicSeconds()
        do {
            let bits = bucketBits()
            // By this node's list, then — during a rolling change — by each other list in use
            // that names both nodes (this node may hold keys by the old list only, which old-list
            // clients read here: a catching-up node must have compared those too).
            var (differing, copied) = try compare(peer, conn, list: nil, bits: bits, maxVersion: maxVersion)
            for other in view.otherListsNaming(view.selfName, peer.name) {
                let (d, c) = try compare(peer, conn, list: other, bits: bits, maxVersion: maxVersion)
                differing += d; copied += c
            }
            stats.syncRounds.add()
            stats.syncBucketsDiffering.add(differing)
            lastRoundCopied = copied > 0
            stats.syncMicros.add(Int((monotonicSeconds() - t0) * 1e6))
            if view.markSynced(peer.name, epoch: epoch) && catchingUp {
                log.info("peer_synced", [("peer", peer.name), ("buckets_differing", String(differing)),
                                         ("ms", String(Int((monotonicSeconds() - t0) * 1000)))])
            }
            return true
        } catch {
            stats.syncFailures.add()
            log.warn("sync_failed", [("peer", peer.name), ("error", "\(error)")])
            return false
        }
    }

    /// One comparison with `peer` over the keys both hold by a list — this node's (`list` nil)
    /// or another list in use (its text is sent at once) — copying the differences across;
    /// returns the buckets that differed and the copies taken.
    private func compare(_ peer: NodeAddress, _ conn: NodeConnection, list: ClusterView.OtherList?, bits: UInt8,
                         maxVersion: UInt64) throws -> (differing: Int, copied: Int) {
        let shared = list.map { $0.domain.sharedTest(me: view.selfName, peer: peer.name) } ?? view.sharedTest(with: peer.name)
        var req = SyncRequest(requester: Array(view.selfName.utf8), bucketBits: bits, maxVersion: maxVersion,
                              members: list?.digest ?? view.membersDigest, memberList: list?.text ?? [])
        var f = try conn.call(.syncDigest(req))
        if list == nil, f.statusCode == .invalidArgument, String(decoding: f.value, as: UTF8.self).hasPrefix("member lists differ") {
            // A rolling change: the peer runs another list. Send ours, so that it compares
            // the keys both nodes hold by this node's ring (§7.19 "Member lists").
            req.memberList = view.membersText
            req.members = XXH64.hash(req.memberList) // the list of this moment, should it have changed
            f = try conn.call(.syncDigest(req))
        }
        try NodeConnection.check(f, allow: [.ok])
        let theirs = try Responses.parseSyncDigest(f, bits: bits, withList: true)
        learn(Responses.splitMemberLists(Responses.syncDigestMemberList(f, bits: bits)), from: peer.name)
        let ours = try dispatcher.syncDigests(peer: peer.name, list: list == nil ? req.members! : nil, bits: bits,
                                              maxVersion: maxVersion, include: shared).digests
        contacted(peer.name)
        let differing = (0..<ours.count).filter { ours[$0] != theirs[$0] }
        guard !differing.isEmpty else { return (0, 0) }
        let copied = try reconcile(peer, conn, buckets: differing, bits: bits, maxVersion: maxVersion, members: req.members!, shared: shared)
        return (differing.count, copied)
    }

    /// The lists a peer answered with — its own when it is another than this node's, and the
    /// other lists it has in use that name both — kept for hints and rounds. One this node did
    /// not know before that names it (a node restarted with a wiped directory learns the old
    /// list here) makes the other peers it names unsynced: this node may hold keys by that
    /// list only, and must compare those with them before it calls itself caught up.
    private func learn(_ lists: [[UInt8]], from peer: String) {
        for text in lists {
            let digest = XXH64.hash(text)
            guard digest != view.membersDigest else { continue }
            let known = view.knowsList(digest)
            guard case .success(let d) = view.domain(forList: digest, text: text), !known, d.names(view.selfName) else { continue }
            let again = view.peers.map(\.name).filter { $0 != peer && d.names($0) }
            for p in again { view.unverify(peer: p) }
            view.addFormerMembers(d.ring.members.map(\.name))
            log.info("member_list_learned", [("from", peer), ("members", String(d.ring.members.count)), ("peers_to_compare_again", String(again.count))])
        }
    }

    /// A round with a former member (`ClusterView.addFormerMembers`: a node being removed that
    /// still runs a list naming this node) by each list in use that names both — its writes of
    /// the keys both hold by that list are copied here, and this node's there. Done once; given
    /// up when its connection is refused at once (it stopped: it handed its writes on as it
    /// did) or when its rounds have failed for `formerPatience` seconds (a paused node accepts
    /// connections and times out: it is waited for).
    private func catchUp(former name: String) {
        let lists = view.otherListsNaming(view.selfName, name)
        guard let peer = NodeAddress.parse(name), !lists.isEmpty else { return formerDone(name, "no list in use names it") }
        let tried = monotonicSeconds()
        do {
            let conn: NodeConnection
            do { conn = try NodeConnection(host: peer.host, port: peer.port, timeout: timeout, token: token, hello: true, tls: tls) } catch {
                if monotonicSeconds() - tried < 0.5 { return formerDone(name, "unreachable: \(error)") }
                throw error
            }
            defer { conn.close() }
            let bits = bucketBits()
            var copied = 0
            for l in lists { copied += try compare(peer, conn, list: l, bits: bits, maxVersion: .max).copied }
            formerDone(name, nil, copied: copied)
        } catch {
            let since = formerFailing[name] ?? tried
            formerFailing[name] = since
            if monotonicSeconds() - since > Self.formerPatience {
                return formerDone(name, "its rounds failed for \(Int(Self.formerPatience)) s: \(error)", mayStillRun: true)
            }
            log.warn("sync_failed", [("peer", name), ("former_member", "1"), ("error", "\(error)")])
        }
    }

    private func formerDone(_ name: String, _ gaveUp: String?, copied: Int = 0, mayStillRun: Bool = false) {
        formerFailing[name] = nil
        view.formerMemberDone(name)
        if let why = gaveUp {
            // Given up while it may still run (paused): writes only it took may read older here
            // until it resumes — a warning. Refused or gone: the usual end of a removal.
            let line: [(String, String)] = [("member", name), ("why", why)]
            if mayStillRun { log.warn("former_member_given_up", line) } else { log.info("former_member_given_up", line) }
        } else {
            log.info("former_member_synced", [("member", name), ("copied", String(copied))])
        }
    }

    /// 2^bits buckets, about 16 entries each (4 … 16 bits).
    private func bucketBits() -> UInt8 {
        let items = max(1, store.stats(includeNamespaces: false).disk.items)
        var bits: UInt8 = SyncRequest.minBits
        while bits < SyncRequest.maxBits && (1 << Int(bits)) * 16 < items { bits += 1 }
        return bits
    }

    /// Lists both sides' entries of `buckets` and copies each newer one across; returns how many
    /// copies the receiving side took (not superseded by a newer write meanwhile).
    private func reconcile(_ peer: NodeAddress, _ conn: NodeConnection, buckets: [Int], bits: UInt8, maxVersion: UInt64,
                           members: UInt64, shared: @escaping ([UInt8], [UInt8]) -> Bool) throws -> Int {
        let wanted = Set(buckets)
        var ours: [ItemKey: (version: UInt64, tombstone: Bool)] = [:]
        let include = { (ns: [UInt8], key: [UInt8]) in
            wanted.contains(ClusterView.bucket(namespace: ns, key: key, bits: bits)) && shared(ns, key)
        }
        try dispatcher.forEachSyncEntry(maxVersion: maxVersion, include: include) { e in
            ours[ItemKey(namespace: e.namespace, key: e.key)] = (e.version, e.tombstone)
        }
        // Writes a disk limit removed here count as held (`EvictedVersions`): the same write
        // there is not copied back here to be evicted again, an older copy there is told to go
        // (`pushRequest`), a newer one comes here as usual.
        let floors = dispatcher.flushMarks?.floors() ?? FlushMarks.Floors()
        for e in store.evictedSyncEntries(include: include) where e.version <= maxVersion && !floors.hides(e) {
            let id = ItemKey(namespace: e.namespace, key: e.key)
            if ours[id] == nil { ours[id] = (e.version, e.tombstone) }
        }
        var theirs: [ItemKey: (version: UInt64, tombstone: Bool)] = [:]
        var rest = buckets.map { UInt32($0) }
        while !rest.isEmpty {
            let chunk = Array(rest.prefix(SyncRequest.maxBuckets))
            let req = SyncRequest(requester: Array(view.selfName.utf8), bucketBits: bits, maxVersion: maxVersion, buckets: chunk,
                                  members: members)
            let f = try conn.call(.syncKeys(req))
            try NodeConnection.check(f, allow: [.ok])
            let page = try Responses.parseSyncKeys(f)
            for e in page.entries { theirs[ItemKey(namespace: e.namespace, key: e.key)] = (e.version, e.tombstone) }
            guard page.bucketsCovered > 0 else { throw ClientError(.protocolViolation, "\(peer.name) answered SYNC_KEYS covering no bucket") }
            rest.removeFirst(min(page.bucketsCovered, rest.count))
        }
        contacted(peer.name)
        let newerThere = theirs.filter { (ours[$0.key]?.version ?? 0) < $0.value.version }.map(\.key)
        let newerHere = ours.filter { (theirs[$0.key]?.version ?? 0) < $0.value.version }.map(\.key)
        // Flush marks first (the empty key): what they supersede is then neither pulled nor kept.
        var copied = 0
        for id in newerThere where id.key.isEmpty {
            if try dispatcher.takeFlushMark(namespace: id.namespace, version: theirs[id]!.version) { copied += 1; stats.syncPulled.add() }
        }
        return try copied + pull(newerThere.filter { !$0.key.isEmpty }, from: conn) + push(newerHere, to: peer, conn, dropRefused: true)
    }

    /// Replicas that did not answer a read repair, skipped until then (AntiEntropy+ReadRepair.swift).
    let repairDownLock = Lock()
    var repairDownUntil: [String: Double] = [:]
}
