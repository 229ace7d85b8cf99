import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataWire

/// Flag VERIFIED_ONLY on INCR/DECR/TOUCH (PROTOCOL.md §7.9): a `--cluster` node that has not
/// verified the key with its other replicas refuses to decide (UNVERIFIED, nothing done); the
/// same request without the flag is decided; a node without `--cluster` ignores the flag.
final class VerifiedOnlyTests: XCTestCase {
    func testAnUnverifiedNodeRefusesToDecideAFencedCounterOrTouch() throws {
        // Two members, the second never started: the first cannot verify any key it shares with it.
        let cluster = try SyncCluster(count: 2, members: [], replicas: 2)
        try cluster.start(0, members: [0, 1])
        let c = try cluster.connect(0)
        XCTAssertEqual(try c.set(SetRequest(key: b("n"), value: b("5"))).statusCode, .ok)
        var fenced = CounterRequest(key: b("n"), delta: 1); fenced.verifiedOnly = true
        let refused = try c.call(.counter(fenced))
        XCTAssertEqual(refused.statusCode, .unverified, String(decoding: refused.value, as: UTF8.self))
        XCTAssertTrue(String(decoding: refused.value, as: UTF8.self).contains("has not caught up"))
        let touch = try c.call(.touch(namespace: [], key: b("n"), tiers: 0, expiry: .seconds(600), verifiedOnly: true))
        XCTAssertEqual(touch.statusCode, .unverified)
        var add = SetRequest(key: b("n"), value: b("9")); add.mode = .replace; add.verifiedOnly = true
        XCTAssertEqual(try c.set(add).statusCode, .unverified, "a fenced SET (a cluster client's conditional write)")
        XCTAssertEqual(try c.get(b("n"))?.value, b("5"), "nothing was done")
        XCTAssertEqual(try nodeStats(c)["unverified_refusals"] as? Int, 3)
        let decided = try c.call(.counter(CounterRequest(key: b("n"), delta: 1)))
        XCTAssertEqual(decided.statusCode, .ok)
        XCTAssertEqual(try Responses.parseCounter(decided), 6, "without the flag the node decides")

        // The cluster client, with the other node down: every node it reached said UNVERIFIED,
        // so it decides there without the flag (as a single node would) and warns.
        var config = ClusterConfiguration(nodes: cluster.ports.map { NodeAddress(host: "127.0.0.1", port: $0) })
        config.ack = .one
        config.timeout = 1
        let client = try ClusterClient(configuration: config)
        XCTAssertEqual(try client.counter(b("n"), delta: 1), 7)
    }

    /// A QUIET GET or EXISTS on a node that has not verified the key is answered all the same,
    /// flagged UNVERIFIED (an outside review, px2: the miss got no answer, so the client could not
    /// learn it may be old); a verified miss stays silent.
    func testAQuietReadOfAnUnverifiedKeyIsAnswered() throws {
        let cluster = try SyncCluster(count: 2, members: [], replicas: 2)
        try cluster.start(0, members: [0, 1])
        let c = try cluster.connect(0)
        try c.sendRaw(Request.get(GetRequest(key: b("absent"))).frame(id: 1, quiet: true).encoded()
                      + Request.exists(namespace: [], key: b("absent"), tiers: 0).frame(id: 2, quiet: true).encoded()
                      + Request.ping.frame(id: 3).encoded())
        let frames = [try c.readFrame(), try c.readFrame(), try c.readFrame()]
        XCTAssertEqual(frames.map(\.requestID), [1, 2, 3])
        XCTAssertEqual(frames.map(\.statusCode), [.notFound, .notFound, .ok])
        for f in frames.prefix(2) { XCTAssertNotEqual(f.responseFlags & ResponseFlags.unverified.rawValue, 0) }
    }

    func testANodeWithoutAClusterIgnoresTheFlag() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let c = try node.connect()
        XCTAssertEqual(try c.set(SetRequest(key: b("n"), value: b("5"))).statusCode, .ok)
        var fenced = CounterRequest(key: b("n"), delta: 2); fenced.verifiedOnly = true
        let f = try c.call(.counter(fenced))
        XCTAssertEqual(f.statusCode, .ok)
        XCTAssertEqual(try Responses.parseCounter(f), 7)
        XCTAssertEqual(try c.call(.touch(namespace: [], key: b("n"), tiers: 0, expiry: .seconds(60), verifiedOnly: true)).statusCode, .ok)
    }

    /// Outside review cl17: a conditional write decided on one node was copied to the others
    /// with the decider's VERIFIED_ONLY, so a live node that had not verified the key refused
    /// the copy and a stored `add` reported failure (`--ack majority`, one node down). Here:
    /// five nodes, R = 3, the key's third node down, its owner restarted (so not verified for
    /// the key, which it shares with the down node); the second node decides; the copy is plain,
    /// so the restarted owner takes it too.
    func testTheCopyOfADecidedConditionalWriteIsNotFenced() throws {
        let cluster = try SyncCluster(count: 5, replicas: 3)
        let all = [0, 1, 2, 3, 4]
        XCTAssertTrue(eventually(20) { all.allSatisfy { cluster.verified($0) } }, "the cluster settles")
        let key = try XCTUnwrap((0..<5000).map { "fc\($0)" }.first { _ in true })
        let set = cluster.replicaSet(key, all)
        let (owner, decider, down) = (set[0], set[1], set[2])
        cluster.kill(down)
        cluster.kill(owner)
        try cluster.start(owner, members: all)
        XCTAssertTrue(eventually(20) { cluster.verified(decider) }, "the second node is verified (a minority of its peers is down)")
        XCTAssertFalse(cluster.verified(owner), "the restarted owner cannot verify keys it shares with the down node")
        var config = ClusterConfiguration(nodes: cluster.ports.map { NodeAddress(host: "127.0.0.1", port: $0) })
        config.replicas = 3
        config.ack = .majority
        config.timeout = 1
        let client = try ClusterClient(configuration: config)
        let report = try client.setReporting(b(key), b("v"), mode: .add)
        guard case .stored = report.outcome else { return XCTFail("\(report.outcome)") }
        XCTAssertEqual(Set(report.acknowledged.map(\.port)), Set([cluster.ports[owner], cluster.ports[decider]]), "\(report.failures)")
        XCTAssertEqual(try cluster.connect(owner).get(b(key), tiers: 3)?.value, b("v"), "the restarted owner took the copy")
    }
}
