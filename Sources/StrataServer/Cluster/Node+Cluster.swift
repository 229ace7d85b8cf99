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
            let mine = config.cluster.filter {
                $0.port == config.port && ($0.host == config.host || (loopback.contains(config.host) && loopback.contains($0.host)))
            }
            guard mine.count == 1 else {
                throw NodeError(exitCode: 2, "cannot tell which --cluster member this node is (\(mine.count) match \(config.host):\(config.port)): pass --advertise NAME, one of \(names.joined(separator: ","))")
            }
            me = mine[0].name
        }
        guard config.replicas >= 1 else { throw NodeError(exitCode: 2, "--replicas must be at least 1") }
        return ClusterView(members: config.cluster, selfName: me, replicas: config.replicas)
    }

    /// The node's identity: a random 128-bit id kept in `DIR/node-id`, made on the first start
    /// in a directory (so a wiped directory is a new identity).
    static func loadIdentity(directory: String) throws -> String {
        let path = directory + "/node-id"
        if let f = fopen(path, "r") {
            defer { fclose(f) }
            var buf = [CChar](repeating: 0, count: 64)
            if fgets(&buf, 64, f) != nil {
                let s = String(decoding: buf.prefix { $0 != 0 && $0 != 10 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                if s.count == 32 && s.allSatisfy({ $0.isHexDigit }) { return s }
            }
        }
        var rng = SystemRandomNumberGenerator()
        let id = (0..<2).map { _ in
            let h = String(rng.next() as UInt64, radix: 16)
            return String(repeating: "0", count: 16 - h.count) + h
        }.joined()
        let tmp = path + ".tmp"
        guard let f = fopen(tmp, "w") else { throw NodeError(exitCode: 3, "cannot write \(tmp): \(String(cString: strerror(errno)))") }
        fputs(id + "\n", f)
        fflush(f); fsync(fileno(f)); fclose(f)
        guard rename(tmp, path) == 0 else { throw NodeError(exitCode: 3, "cannot write \(path): \(String(cString: strerror(errno)))") }
        return id
    }

    /// Starts anti-entropy with the peers (after the listeners are up).
    func startCluster() {
        guard let c = cluster else { return }
        dispatcher.pauseCheck = { [weak self] in self?.checkPause() }
        let ae = AntiEntropy(view: c, store: store, dispatcher: dispatcher, log: log, stats: stats,
                             token: config.authToken, interval: config.syncInterval)
        antiEntropy = ae
        ae.start()
        log.info("cluster", [("self", c.selfName), ("members", String(c.ring.members.count)), ("replicas", String(c.replicas)),
                             ("node_id", nodeID)])
    }

    /// STATS fields of the cluster (PROTOCOL.md §7.13).
    func clusterStatsFields() -> [(String, String)] {
        var f: [(String, String)] = [("node_id", "\"\(nodeID)\"")]
        guard let c = cluster else { return f }
        f += [
            ("cluster_self", "\"\(c.selfName)\""), ("cluster_members", String(c.ring.members.count)),
            ("cluster_replicas", String(c.replicas)), ("cluster_verified", c.verified ? "1" : "0"),
            ("cluster_unsynced_peers", String(c.unsyncedPeers.count)),
            ("sync_rounds", String(stats.syncRounds.load())), ("sync_failures", String(stats.syncFailures.load())),
            ("sync_pulled", String(stats.syncPulled.load())), ("sync_pushed", String(stats.syncPushed.load())),
            ("sync_buckets_differing", String(stats.syncBucketsDiffering.load())),
            ("sync_us", String(stats.syncMicros.load())), ("peers_lost", String(stats.peersLost.load())),
            ("unverified_answers", String(stats.unverifiedAnswers.load())),
        ]
        return f
    }
}
