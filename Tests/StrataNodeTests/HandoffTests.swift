import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataWire

/// Hinted handoff (issue 17, "Hints that outlive the client"; PROTOCOL.md §7.19 SYNC_CHECK):
/// the node that accepted a write makes sure the key's other replicas have it, whatever the
/// client did. These clusters run anti-entropy only at their start (`--sync-interval 300`), so
/// anything that reaches a replica later came by handoff.
final class HandoffTests: XCTestCase {
    /// A cluster whose anti-entropy rounds come only at the start (until every peer is synced).
    private func quietCluster(count: Int = 3, replicas: Int = 2) throws -> SyncCluster {
        let c = try SyncCluster(count: count, replicas: replicas, extra: ["--sync-interval", "300"])
        XCTAssertTrue(eventually(20, interval: 0.1) { (0..<count).allSatisfy(c.verified) }, "the nodes synced at start")
        return c
    }

    /// A key whose replica set (owner first) is `[first, second]` among nodes 0…count-1.
    private func key(_ cluster: SyncCluster, owner: Int, replica: Int, prefix: String) -> String {
        let all = Array(0..<cluster.ports.count)
        return (0..<10_000).lazy.map { "\(prefix)\($0)" }.first { cluster.replicaSet($0, all) == [owner, replica] }!
    }

    private func cli(_ args: [String]) throws -> (code: Int32, out: String, err: String) {
        let r = try runCLI(args)
        return (r.code, String(decoding: r.out, as: UTF8.self), r.err)
    }

    /// A client that writes one node only (as a client in another language might, or one that
    /// skipped a replica it thought dead): the other replica has the write within moments, so
    /// a fresh CLI reading that replica directly sees it — and a delete sent to one node only
    /// is not undone by the other's older copy.
    func testAWriteToOneReplicaReachesTheOtherAtOnce() throws {
        let cluster = try quietCluster()
        let k = key(cluster, owner: 0, replica: 1, prefix: "solo")
        let roundsAtStart = try nodeStats(try cluster.connect(0))["sync_rounds"] as? Int
        // To the replica only: the owner must learn it.
        XCTAssertEqual(try cluster.connect(1).set(SetRequest(key: b(k), value: b("v1"))).statusCode, .ok)
        XCTAssertTrue(eventually(3, interval: 0.05) { (try? cluster.connect(0).get(b(k), tiers: 2))?.value == b("v1") },
                      "the owner never received the replica's write")
        let read = try cli(["get", k, "--server", cluster.name(0)])
        XCTAssertEqual(read.code, 0, read.err)
        XCTAssertEqual(read.out, "v1")
        // A newer write to the owner only, then a delete at the replica only.
        XCTAssertEqual(try cluster.connect(0).set(SetRequest(key: b(k), value: b("v2"))).statusCode, .ok)
        XCTAssertTrue(eventually(3, interval: 0.05) { (try? cluster.connect(1).get(b(k), tiers: 2))?.value == b("v2") })
        XCTAssertEqual(try cluster.connect(1).call(.delete(namespace: [], key: b(k), tiers: 0, version: nil, writeBehind: false)).statusCode, .ok)
        XCTAssertTrue(eventually(3, interval: 0.05) { (try? cluster.connect(0).call(.get(GetRequest(key: b(k)))))?.statusCode == .notFound },
                      "the owner still serves the deleted value")
        let gone = try cli(["get", k, "--server", cluster.name(0)])
        XCTAssertEqual(gone.code, 1, "not found: \(gone.err) \(gone.out)")
        // The third node holds no replica of k: nothing was sent to it.
        XCTAssertEqual(try cluster.connect(2).call(.get(GetRequest(key: b(k), tiers: 2))).statusCode, .notFound)

        let owner = try nodeStats(try cluster.connect(0)), replica = try nodeStats(try cluster.connect(1))
        XCTAssertGreaterThanOrEqual(owner["handoff_copied"] as? Int ?? 0, 1, "\(owner)")
        XCTAssertGreaterThanOrEqual(replica["handoff_copied"] as? Int ?? 0, 2, "\(replica)")
        XCTAssertGreaterThan(owner["handoff_checked"] as? Int ?? 0, 0)
        XCTAssertEqual(owner["sync_rounds"] as? Int, roundsAtStart, "an anti-entropy round ran: the test proves nothing about handoff")
    }

    /// A node that stops (SIGTERM) hands on the writes it took before it exits: a removed
    /// node never returns to deliver them (an outside review lost acknowledged writes when the
    /// removed node was stopped as soon as the others were ready). Node 0 takes a write while
    /// node 1, the key's other replica, is down; node 1 comes back on the list without node 0
    /// (a removal) and is paused at once — it cannot catch up with node 0 itself — and node 0
    /// is stopped: it must wait for the paused peer (a second review saw it give up after the
    /// 2 s connection timeout) and deliver the write before it exits.
    func testARemovedNodeHandsOnItsPendingWritesBeforeItExits() throws {
        let cluster = try quietCluster(count: 3)
        let k = key(cluster, owner: 0, replica: 1, prefix: "last")
        cluster.kill(1)
        XCTAssertEqual(try cluster.connect(0).set(SetRequest(key: b(k), value: b("v1"))).statusCode, .ok)
        usleep(1_500_000) // node 0's hint to node 1 fails and backs off
        try cluster.start(1, members: [1, 2])
        let peer = try XCTUnwrap(cluster.nodes[1]).process.processIdentifier
        kill(peer, SIGSTOP)
        var resumed = false
        defer { if !resumed { kill(peer, SIGCONT) } }
        let stopping = try XCTUnwrap(cluster.nodes[0])
        let exited = Completion<Int32>()
        let t0 = monotonicSeconds()
        Thread.detachNewThread { exited.fulfil(stopping.terminate()) }
        usleep(3_000_000)
        kill(peer, SIGCONT)
        resumed = true
        XCTAssertEqual(exited.wait(), 0, "the removed node exits cleanly")
        let took = monotonicSeconds() - t0
        print("FIGURE handoff at shutdown: the removed node exited \(String(format: "%.2f", took)) s after SIGTERM (its paused peer resumed at 3 s)")
        XCTAssertGreaterThan(took, 2.9, "it did not wait for the paused peer")
        XCTAssertFalse(stopping.stderr.contains("handoff_undelivered"), stopping.stderr)
        let f = try cluster.connect(1).call(.get(GetRequest(key: b(k), tiers: 2)))
        XCTAssertEqual(f.statusCode, .ok, "the removed node's write never reached the key's other replica")
        XCTAssertEqual(try Responses.parseGet(f).value, b("v1"))
    }

    /// The battery's window (issue 17 note): a writer that leaves a live node out (as a client
    /// that marked it dead does) keeps writing with ack one to the others only. The skipped
    /// node gets every write of its keys by handoff, deletes included.
    func testWritesThatSkipALiveReplicaReachItWithoutAntiEntropy() throws {
        let cluster = try quietCluster()
        let all = [0, 1, 2]
        // Node 1 is left out of the writer's list: a client that thinks it dead.
        let writer = try cluster.client([0, 2]) { $0.ack = .one }
        var model: [String: String?] = [:]
        for i in 0..<200 {
            let k = "skip\(i)"
            guard cluster.replicaSet(k, all).contains(1) else { continue }
            if i % 5 == 4 {
                _ = try writer.delete(b(k)); model[k] = .some(nil)
            } else {
                _ = try writer.set(b(k), b("v-\(k)")); model[k] = "v-\(k)"
            }
        }
        XCTAssertGreaterThan(model.count, 50)
        // Every write to node 0 or 2 of a key node 1 replicates reached node 1.
        let c1 = try cluster.connect(1)
        XCTAssertTrue(eventually(5, interval: 0.1) {
            model.allSatisfy { k, v in
                guard let f = try? c1.call(.get(GetRequest(key: b(k), tiers: 2))) else { return false }
                return v == nil ? f.statusCode == .notFound : (f.statusCode == .ok && (try? Responses.parseGet(f))?.value == b(v!))
            }
        }, "node 1 missed writes")
    }

    /// The memcached listener of a cluster node (as behind twemproxy, which sends each key to
    /// one node): its writes reach the key's other replica by handoff, and its deletes leave
    /// a tombstone there, so the other replica's older copy does not come back.
    func testMemcachedWritesReachTheOtherReplicaAndDeletesStayDeleted() throws {
        let cluster = try SyncCluster(count: 2, members: [])
        let mports = [try MemcachedClientTests.freePort(), try MemcachedClientTests.freePort()]
        for i in 0..<2 {
            try cluster.start(i, members: [0, 1], more: ["--sync-interval", "300", "--memcached-port", String(mports[i]), "--metrics-port", "0"])
        }
        XCTAssertTrue(eventually(20, interval: 0.1) { cluster.verified(0) && cluster.verified(1) })
        let m0 = try TextSocket(port: mports[0])
        m0.send("set mk 0 0 2\r\nv1\r\n")
        XCTAssertEqual(m0.line(), "STORED")
        XCTAssertTrue(eventually(3, interval: 0.05) { (try? cluster.connect(1).get(b("mk"), tiers: 2))?.value == b("v1") },
                      "node 1 never received the memcached write")
        let m1 = try TextSocket(port: mports[1])
        m1.send("delete mk\r\n")
        XCTAssertEqual(m1.line(), "DELETED")
        XCTAssertTrue(eventually(3, interval: 0.05) { (try? cluster.connect(0).call(.get(GetRequest(key: b("mk")))))?.statusCode == .notFound },
                      "node 0 still serves the deleted value")
        // The delete is a tombstone on both nodes (a version in the NOT_FOUND answer, §9).
        for i in 0..<2 { XCTAssertGreaterThan(try cluster.connect(i).call(.get(GetRequest(key: b("mk"), tiers: 2))).cas, 0, "node \(i)") }
        XCTAssertEqual(MemcachedClientTests.getAll(m0, ["mk"]), [:])
        // Handoff's counters are in /metrics as in STATS (§7.13).
        let http = try TextSocket(port: try XCTUnwrap(cluster.nodes[0]!.metricsPort))
        http.send("GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        let metrics = http.readAll()
        let copied = try nodeStats(try cluster.connect(0))["handoff_copied"] as? Int
        XCTAssertEqual(copied, 1, "node 0 copied the memcached set to node 1")
        XCTAssertTrue(metrics.contains("strata_handoff_copied_total 1\n"), metrics)
        XCTAssertTrue(metrics.contains("# TYPE strata_handoff_pending gauge\nstrata_handoff_pending 0\n"), metrics)
        XCTAssertTrue(metrics.contains("strata_cluster_verified 1\n"), metrics)
    }

    /// Writes a node takes for keys it holds no replica of — a proxy's own hashing (twemproxy)
    /// sending them to the memcached listener — reach the keys' replicas by handoff, sets and
    /// deletes, so `--nodes` clients read them (an outside review, mc7: ~30 % of the writes
    /// through nutcracker stayed on the one node, and `get --nodes` missed or read old values).
    func testForeignWritesReachTheKeysReplicas() throws {
        let cluster = try SyncCluster(count: 3, members: [])
        let mports = try (0..<3).map { _ in try MemcachedClientTests.freePort() }
        for i in 0..<3 {
            try cluster.start(i, members: [0, 1, 2], more: ["--sync-interval", "300", "--memcached-port", String(mports[i])])
        }
        XCTAssertTrue(eventually(20, interval: 0.1) { (0..<3).allSatisfy(cluster.verified) })
        let all = [0, 1, 2]
        let foreign = (0..<200).map { "fw\($0)" }.filter { !cluster.replicaSet($0, all).contains(0) }.prefix(20)
        XCTAssertEqual(foreign.count, 20)
        let m0 = try TextSocket(port: mports[0])
        for k in foreign { m0.send("set \(k) 0 0 2\r\nv1\r\n"); XCTAssertEqual(m0.line(), "STORED") }
        let deleted = Array(foreign.prefix(5))
        for k in deleted { m0.send("delete \(k)\r\n"); XCTAssertEqual(m0.line(), "DELETED") }
        XCTAssertGreaterThanOrEqual(try nodeStats(try cluster.connect(0))["foreign_writes"] as? Int ?? 0, foreign.count + deleted.count)
        // Every replica of each key holds it (or its delete), with no read and no anti-entropy round.
        XCTAssertTrue(eventually(10, interval: 0.1) {
            foreign.allSatisfy { k in
                cluster.replicaSet(k, all).allSatisfy { i in
                    guard let f = try? cluster.connect(i).call(.get(GetRequest(key: b(k), tiers: 2))) else { return false }
                    return deleted.contains(k) ? f.statusCode == .notFound && f.cas > 0 : f.statusCode == .ok
                }
            }
        }, "a foreign write did not reach the key's replicas")
        let reader = try cluster.client(all)
        for k in foreign { XCTAssertEqual(try reader.get(b(k))?.value, deleted.contains(k) ? nil : b("v1"), k) }
    }

    /// A foreign write whose hints died with a SIGKILL of the node that took it (the key's
    /// replicas were stopped) is hinted again when that node starts (an outside review, cl21:
    /// 10 of 10 such writes never reached the replicas).
    func testForeignWritesOfAKilledNodeAreHintedAgainAtItsStart() throws {
        let cluster = try SyncCluster(count: 3, members: [])
        let mports = try (0..<3).map { _ in try MemcachedClientTests.freePort() }
        for i in 0..<3 { try cluster.start(i, members: [0, 1, 2], more: ["--memcached-port", String(mports[i])]) }
        XCTAssertTrue(eventually(20, interval: 0.1) { (0..<3).allSatisfy(cluster.verified) })
        let all = [0, 1, 2]
        let foreign = Array((0..<200).map { "fk\($0)" }.filter { !cluster.replicaSet($0, all).contains(0) }.prefix(10))
        let pids = [1, 2].map { cluster.nodes[$0]!.process.processIdentifier }
        pids.forEach { kill($0, SIGSTOP) }
        let m0 = try TextSocket(port: mports[0])
        for k in foreign { m0.send("set \(k) 0 0 2\r\nv9\r\n"); XCTAssertEqual(m0.line(), "STORED") }
        cluster.kill(0) // its hints were in memory
        pids.forEach { kill($0, SIGCONT) }
        try cluster.start(0, members: [0, 1, 2], more: ["--memcached-port", String(mports[0])])
        XCTAssertTrue(eventually(20, interval: 0.2) {
            foreign.allSatisfy { k in cluster.replicaSet(k, all).allSatisfy { i in (try? cluster.connect(i).get(b(k), tiers: 2))?.value == b("v9") } }
        }, "the killed node's foreign writes never reached their replicas: \(((try? nodeStats(try cluster.connect(0))) ?? [:]).filter { $0.key.hasPrefix("handoff") || $0.key.hasPrefix("disk_items") || $0.key.hasPrefix("sync_digests") })")
        XCTAssertEqual(try nodeStats(try cluster.connect(0))["foreign_writes"] as? Int, 0, "hinted again, not counted as new foreign writes")
    }

    /// The memcached listener cannot flag an answer UNVERIFIED, so a `--cluster` node that has
    /// not verified a key reads it from the key's other replicas before answering it — and,
    /// when none answers, answers a miss rather than its own possibly old copy (issue 17: no
    /// client reads stale data after a fault; a memcached client is a client written without
    /// Strata's cluster client).
    func testAnUnverifiedNodesMemcachedReadsAreRepairedOrMisses() throws {
        let cluster = try SyncCluster(count: 2, members: [])
        let mports = [try MemcachedClientTests.freePort(), try MemcachedClientTests.freePort()]
        for i in 0..<2 { try cluster.start(i, members: [0, 1], more: ["--memcached-port", String(mports[i])]) }
        XCTAssertTrue(eventually(20, interval: 0.1) { cluster.verified(0) && cluster.verified(1) })
        let writer = try cluster.client([0, 1]) { $0.ack = .all }
        for k in ["r1", "r2"] { _ = try writer.set(b(k), b("v1")) }
        _ = try writer.set(b("n"), b("10"))
        cluster.kill(1)
        let one = try cluster.client([0, 1]) { $0.ack = .one; $0.timeout = 0.5 }
        for k in ["r1", "r2"] { _ = try one.set(b(k), b("v2")) }
        _ = try one.set(b("n"), b("15"))
        // Node 0 stopped: node 1 comes back with v1 and can verify nothing.
        let pid0 = try XCTUnwrap(cluster.nodes[0]).process.processIdentifier
        kill(pid0, SIGSTOP)
        defer { kill(pid0, SIGCONT) }
        try cluster.start(1, members: [0, 1], more: ["--memcached-port", String(mports[1])])
        let m1 = try TextSocket(port: mports[1], timeout: 10)
        m1.send("get r1\r\n")
        XCTAssertEqual(m1.line(), "END", "an unverified node whose peers do not answer answers a miss, not its old v1")
        m1.send("mg r1 v\r\n")
        XCTAssertEqual(m1.line(), "EN")
        // Counters, touches and conditional writes are not decided from the old copy either:
        // with no replica answering they are refused and change nothing (cl24/cl25: increments
        // lost, add storing over a replica's value).
        for command in ["incr n 1\r\n", "touch n 100\r\n", "add fresh 0 0 1\r\nx\r\n", "ma n\r\n", "ms n 2 MR\r\n16\r\n"] {
            m1.send(command)
            XCTAssertTrue(m1.line().hasPrefix("SERVER_ERROR unverified"), command)
        }
        // The stopped replica is skipped for a while once it did not answer: a 40-key get does
        // not wait for it 40 times (mc8: 2 s per key, a 60-key get 121 s).
        let t0 = monotonicSeconds()
        m1.send("get " + (0..<40).map { "many\($0)" }.joined(separator: " ") + "\r\n")
        XCTAssertEqual(m1.line(), "END")
        XCTAssertLessThan(monotonicSeconds() - t0, 2.5, "one wait for the stopped replica, not one per key")
        let s1 = try nodeStats(try cluster.connect(1))
        XCTAssertGreaterThanOrEqual(s1["read_repair_failures"] as? Int ?? 0, 2, "\(s1)")
        kill(pid0, SIGCONT)
        // With node 0 back: a miss while it is still skipped (2 s after it did not answer), then
        // the new value, read from it or synced — never v1.
        var answers: [String] = []
        XCTAssertTrue(eventually(10, interval: 0.1) {
            m1.send("get r2\r\n")
            let first = m1.line()
            if first == "END" { answers.append("miss"); return false }
            let value = m1.line()
            _ = m1.line()
            answers.append(value)
            return value == "v2"
        }, "\(answers)")
        XCTAssertFalse(answers.contains("v1"), "\(answers)")
        // The counter goes on from the replica's 15, not the restarted node's 10.
        XCTAssertTrue(eventually(10, interval: 0.2) {
            m1.send("incr n 1\r\n")
            let line = m1.line()
            XCTAssertTrue(line == "16" || line.hasPrefix("SERVER_ERROR unverified"), line)
            return line == "16"
        })
    }

    /// SYNC_CHECK (§7.19): the answer names the entries the node lacks, to any requester.
    func testSyncCheckNamesWhatTheNodeLacks() throws {
        let cluster = try quietCluster(count: 2)
        let c = try cluster.connect(0)
        let stored = try c.set(SetRequest(key: b("have"), value: b("x")))
        XCTAssertEqual(stored.statusCode, .ok)
        let v = stored.cas
        let entries = [SyncKeyEntry(namespace: [], key: b("have"), version: v, tombstone: false),
                       SyncKeyEntry(namespace: [], key: b("missing"), version: 7, tombstone: false),
                       SyncKeyEntry(namespace: [], key: b("have"), version: v + 1, tombstone: false),
                       SyncKeyEntry(namespace: [], key: b("have"), version: v - 1, tombstone: true)]
        let f = try c.call(.syncCheck(SyncCheck(requester: b(cluster.name(1)), entries: entries)))
        XCTAssertEqual(f.statusCode, .ok)
        XCTAssertEqual(try Responses.parseSyncCheck(f, entries: entries.count), [1, 2])
        // A node this one does not list yet (a rolling change: its list names this node) is answered too.
        let newcomer = try c.call(.syncCheck(SyncCheck(requester: b("10.0.0.9:7400"), entries: entries)))
        XCTAssertEqual(newcomer.statusCode, .ok)
        XCTAssertEqual(try Responses.parseSyncCheck(newcomer, entries: entries.count), [1, 2])
        // No entries, or too many: refused as malformed requests, the connection kept.
        let none = try c.call(.syncCheck(SyncCheck(requester: b(cluster.name(1)), entries: [])))
        XCTAssertEqual(none.statusCode, .invalidArgument)
        XCTAssertEqual(try c.call(.ping).statusCode, .ok)
    }
}
