#if canImport(Glibc)
import Glibc
#endif
import StrataClient
import StrataCore
import StrataStore

// The node's membership (`--cluster`), its identity, and its anti-entropy thread.
extension Node {
    /// The view of `config.cluster` with this node's own member picked out: `--advertise`, or
    /// the one member on this node's port whose host is this node's host (or loopback when
    /// it listens on loopback). Nil without `--cluster`.
    static func makeCluster(_ config: NodeConfiguration) throws -> ClusterView? {
        guard !config.cluster.isEmpty else { return nil }
        let names = config.cluster.map(\.name)
        let me: String
        if let a = config.advertise {
            guard names.contains(a) else {
                throw NodeError(exitCode: 2, "--advertise '\(a)' is not one of the --cluster members (\(names.joined(separator: ",")))")
            }
            me = a
        } else {
            let loopback = ["127.0.0.1", "localhost", "::1"]
            let ports = [config.tlsOnly ? nil : config.port, config.tlsPort].compactMap { $0 }
            let mine = config.cluster.filter {
                ports.contains($0.port) && ($0.host == config.host || (loopback.contains(config.host) && loopback.contains($0.host)))
            }
            guard mine.count == 1 else {
                throw NodeError(exitCode: 2, "cannot tell which --cluster member this node is (\(mine.count) match \(config.host):\(config.port)): pass --advertise NAME, one of \(names.joined(separator: ","))")
            }
            me = mine[0].name
        }
        guard config.replicas >= 1 else { throw NodeError(exitCode: 2, "--replicas must be at least 1") }
        if let ca = config.clusterTLSCA, access(ca, R_OK) != 0 {
            throw NodeError(exitCode: 2, "--cluster-tls-ca \(ca): \(String(cString: strerror(errno)))")
        }
        return ClusterView(members: config.cluster, selfName: me, replicas: config.replicas)
    }

    /// The node's identity: a random 128-bit id kept in `DIR/node-id`, made on the first start
    /// in a directory (so a wiped directory is a new identity).
    /// Also says why, when a `node-id` file was there but held no identity (empty or damaged:
    /// it is replaced, and the node logs `node_id_replaced`).
    static func loadIdentity(directory: String) throws -> (id: String, replaced: String?) {
        let path = directory + "/node-id"
        var replaced: String? = nil
        if let f = fopen(path, "r") {
            defer { fclose(f) }
            var buf = [CChar](repeating: 0, count: 64)
            if fgets(&buf, 64, f) != nil {
                let s = String(decoding: buf.prefix { $0 != 0 && $0 != 10 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                if s.count == 32 && s.allSatisfy({ $0.isHexDigit }) { return (s, nil) }
                replaced = "it does not hold 32 hex digits"
            } else {
                replaced = "it is empty"
            }
        }
        var rng = SystemRandomNumberGenerator()
        let id = (0..<2).map { _ in
            let h = String(rng.next() as UInt64, radix: 16)
            return String(repeating: "0", count: 16 - h.count) + h
        }.joined()
        do {
            try SmallFiles.replace(path, with: id + "\n")
        } catch {
            throw NodeError(exitCode: 3, "cannot write \(error)")
        }
        return (id, replaced)
    }

    /// Audits a membership change (docs/OPERATING.md "Clusters"): the `--cluster` list (or no
    /// list) this node starts with, compared with the one it last started with in this data
    /// directory (`DIR/cluster-members`, rewritten when it differs). Logged as
    /// `action=membership_change user=- peer=config from=… to=… added=… removed=…`.
    /// A refresh gives the list it replaced (`previous`): the audit's `from` is the running
    /// list, not the file (which may not have been written: an outside review, nu5, saw
    /// `from=-` after `cluster_members_not_saved`).
    func recordMembership(source: String = "config", previous: [String]? = nil) {
        let path = config.dataDirectory + "/cluster-members"
        let now = (cluster?.ring.members.map(\.name) ?? []).sorted()
        let before = previous?.sorted()
            ?? readSmallFile(path).map { String(decoding: $0, as: UTF8.self).split(separator: "\n").map(String.init).sorted() }
        guard before != now, !(before == nil && now.isEmpty) else { return }
        let old = before ?? []
        cluster?.rememberPrevious(names: old)
        audit("membership_change", user: "-", peer: source,
              [("self", cluster?.selfName ?? "-"), ("from", old.isEmpty ? "-" : old.joined(separator: ",")),
               ("to", now.isEmpty ? "-" : now.joined(separator: ",")),
               ("added", now.filter { !old.contains($0) }.joined(separator: ",")),
               ("removed", old.filter { !now.contains($0) }.joined(separator: ","))])
        if now.isEmpty { unlink(path); return }
        do {
            try SmallFiles.replace(path, with: now.joined(separator: "\n") + "\n")
        } catch {
            log.warn("cluster_members_not_saved", [("path", path), ("error", "\(error)")])
        }
    }

    /// Starts anti-entropy with the peers (after the listeners are up).
    func startCluster() {
        recordMembership()
        guard let c = cluster else { return }
        dispatcher.pauseCheck = { [weak self] in self?.checkPause() }
        let (domain, digest) = c.currentDomain
        dispatcher.syncDigests = SyncDigests(domain: domain, listDigest: digest, selfName: c.selfName, clock: store.clock, log: log,
                                             relist: { [store] in store.relistDiskRows() })
        let ae = AntiEntropy(view: c, store: store, dispatcher: dispatcher, log: log, stats: stats,
                             token: config.authToken, interval: config.syncInterval,
                             tls: config.clusterTLSCA.map { TLSClientConfiguration(caFile: $0, certificateFile: config.tlsCertificate, keyFile: config.tlsKey) })
        antiEntropy = ae
        dispatcher.readRepair = { [ae] id in ae.repairForRead(id) }
        let token = config.authToken, tls = ae.tls
        let h = Handoff(view: c, stats: stats, log: log,
                        connect: { try NodeConnection(host: $0.host, port: $0.port, timeout: 2, token: token, hello: true, tls: tls) },
                        copy: { [ae] ids, peer, conn in try ae.push(ids, to: peer, conn) },
                        localVersion: { [store] id in (try? store.syncVersion(id.key, namespace: id.namespace)) ?? 0 },
                        dropped: { [ae] in ae.wake() })
        handoff = h
        dispatcher.handoff = h
        // Rows of keys this node is no replica of, listed at the start: their hints again.
        dispatcher.syncDigests?.foreignBelow = store.openedVersion
        dispatcher.syncDigests?.foreignRow = { [h] ns, key, version, tombstone in
            h.accepted(namespace: ns, key: key, version: version, tombstone: tombstone, relisted: true)
        }
        h.start()
        ae.start()
        log.info("cluster", [("self", c.selfName), ("members", String(c.ring.members.count)), ("replicas", String(c.replicas)),
                             ("node_id", nodeID)])
        if let source = config.clusterSource, config.clusterRefresh > 0 {
            let r = MembershipRefresh(interval: config.clusterRefresh, log: log,
                                      read: { try NodeAddress.parseList(source, option: "--cluster") },
                                      apply: { [weak self] in self?.applyMembership($0) })
            membershipRefresh = r
            r.start()
        }
    }

    /// Makes `members` (a `dns:` or `file:` `--cluster` list read again) the cluster while
    /// running, as a restart with that list would: a new ring (`ClusterView.replace`), every
    /// peer unsynced until a round with it finishes (so this node's answers for keys it newly
    /// holds are flagged UNVERIFIED and anti-entropy copies them in), handoff threads for new
    /// peers, a removed peer's hints dropped, the change audited (`action=membership_change`,
    /// `peer=refresh`) and `DIR/cluster-members` rewritten. A list with the same members changes
    /// nothing; a list that no longer names this node (it is being removed, or the name did
    /// not resolve to it this time) is not applied: the node keeps its members and logs
    /// `cluster_refresh_ignored` (the operator stops a removed node).
    func applyMembership(_ members: [NodeAddress]) {
        guard let c = cluster else { return }
        guard members.contains(where: { $0.name == c.selfName }) else {
            if !membershipIgnored.exchange(true, ordering: .relaxed) {
                log.warn("cluster_refresh_ignored", [("self", c.selfName), ("members", members.map(\.name).joined(separator: ",")),
                                                     ("reason", "the list does not name this node; it keeps its members")])
            }
            return
        }
        membershipIgnored.store(false, ordering: .relaxed)
        let previous = c.ring.members.map(\.name)
        guard let change = c.replace(members: members) else { return }
        stats.membershipChanges.add()
        let (domain, digest) = c.currentDomain
        dispatcher.syncDigests?.rebuild(domain: domain, listDigest: digest, selfName: c.selfName)
        handoff?.update()
        recordMembership(source: "refresh", previous: previous)
        log.info("cluster_members_changed", [("members", String(c.ring.members.count)), ("added", change.added.joined(separator: ",")),
                                             ("removed", change.removed.joined(separator: ","))])
        antiEntropy?.wake()
    }

    /// The peers this node has not caught up with (none without `--cluster`): `/readyz`.
    var unsyncedPeers: [String] { cluster?.unsyncedPeers ?? [] }

    /// The cluster's rows of `Node.numbers()` (STATS, PROTOCOL.md §7.13, and /metrics); none
    /// without `--cluster`. STATS adds the strings `node_id` and `cluster_self`.
    func clusterNumbers() -> [NodeNumber] {
        guard let c = cluster else { return [] }
        return [
            NodeNumber("cluster_members", .gauge, "Members of the node's --cluster.", c.ring.members.count),
            NodeNumber("cluster_replicas", .gauge, "Copies of each key (--replicas).", c.replicas),
            NodeNumber("cluster_verified", .gauge, "1 when the node has caught up with every peer, else 0.", c.verified ? 1 : 0),
            NodeNumber("cluster_membership_changes", .counter, "Member lists applied while running (a dns: or file: --cluster read again).", stats.membershipChanges.load()),
            NodeNumber("flush_marks", .gauge, "Flush marks in force (at most 100,000: past that a FLUSH of a namespace without one is BUSY).", dispatcher.flushMarks?.count ?? 0),
            NodeNumber("cluster_unsynced_peers", .gauge, "Peers the node has not caught up with since it may have missed writes.", c.unsyncedPeers.count),
            NodeNumber("sync_rounds", .counter, "Anti-entropy rounds finished.", stats.syncRounds.load()),
            NodeNumber("sync_failures", .counter, "Anti-entropy rounds that failed after reaching the peer.", stats.syncFailures.load()),
            NodeNumber("sync_pulled", .counter, "Items and tombstones anti-entropy copied from peers.", stats.syncPulled.load()),
            NodeNumber("sync_pushed", .counter, "Items and tombstones copied to peers (anti-entropy and handoff).", stats.syncPushed.load()),
            NodeNumber("sync_invalid_images", .counter, "Copies of invalid images a node with --validate-images did not take (pulled here, or refused by the peer).", stats.syncInvalidImages.load()),
            NodeNumber("sync_too_large", .counter, "Copies not made because the value was over the receiving node's largest stored item (its disk budget; pulled here, or refused by the peer).", stats.syncTooLarge.load()),
            NodeNumber("sync_buckets_differing", .counter, "Buckets whose digests differed in rounds.", stats.syncBucketsDiffering.load()),
            NodeNumber("sync_us", .counter, "Microseconds spent in anti-entropy rounds.", stats.syncMicros.load()),
            NodeNumber("sync_digests_maintained", .counter, "Digests (a round's own, or a SYNC_DIGEST answer) taken from the maintained digests.", stats.syncDigestsMaintained.load()),
            NodeNumber("sync_digests_passed", .counter, "Digests made by a pass over every row (catching up, another member list, maintained digests not ready).", stats.syncDigestsPassed.load()),
            NodeNumber("peers_lost", .counter, "Times a peer went out of contact.", stats.peersLost.load()),
            NodeNumber("unverified_answers", .counter, "Answers flagged UNVERIFIED.", stats.unverifiedAnswers.load()),
            NodeNumber("read_repairs", .counter, "memcached reads of keys this node had not verified, brought up to date from the key's other replicas first.", stats.readRepairs.load()),
            NodeNumber("read_repair_failures", .counter, "memcached reads of keys this node had not verified that no other replica answered: answered as misses.", stats.readRepairFailures.load()),
            NodeNumber("unverified_refusals", .counter, "INCR/DECR/TOUCH/SET with VERIFIED_ONLY refused with UNVERIFIED: the node had not verified the key.", stats.unverifiedRefusals.load()),
            NodeNumber("handoff_hints", .counter, "Hints made: one per write applied to the disk tier and other replica of its key.", stats.handoffHints.load()),
            NodeNumber("handoff_checked", .counter, "Writes checked with peers (SYNC_CHECK).", stats.handoffChecked.load()),
            NodeNumber("handoff_copied", .counter, "Writes a peer lacked, copied to it by handoff.", stats.handoffCopied.load()),
            NodeNumber("handoff_dropped", .counter, "Hints dropped past the bound of 100,000 per peer (anti-entropy delivers them).", stats.handoffDropped.load()),
            NodeNumber("handoff_failures", .counter, "Handoff batches that failed (retried with backoff).", stats.handoffFailures.load()),
            NodeNumber("handoff_pending", .gauge, "Hints waiting to be sent.", handoff?.pending ?? 0),
            NodeNumber("foreign_writes", .counter, "Writes of keys this node is not a replica of under its --cluster list (a client on another member list).", stats.foreignWrites.load()),
        ]
    }
}
