import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataWire

/// Versioned flushes on cluster nodes (PROTOCOL.md §7.12 "In a cluster", `FlushMarks`): a
/// FLUSH reaches the nodes that missed it, and nothing it removed comes back from a replica.
final class FlushMarkTests: XCTestCase {
    private func cli(_ args: [String]) throws -> (code: Int32, out: String, err: String) {
        let r = try runCLI(args)
        return (r.code, String(decoding: r.out, as: UTF8.self), r.err)
    }

    /// What node `i` holds on disk for `key` of `ns` (nil: nothing), read directly.
    private func onDisk(_ c: SyncCluster, _ i: Int, _ ns: String, _ key: String) -> String?? {
        guard let conn = try? c.connect(i), let f = try? conn.call(.get(GetRequest(key: b(key), namespace: b(ns), tiers: 2))) else { return nil }
        if f.statusCode == .notFound { return .some(nil) }
        guard f.statusCode == .ok else { return nil }
        return .some(String(decoding: f.value, as: UTF8.self))
    }

    /// Both replicas hold every key; node 1 is killed, namespace "app" flushed on node 0 and a
    /// key written after the flush; node 1 restarts with the old items. They never come back:
    /// node 1 removes them (anti-entropy brings the flush to it) instead of copying them to
    /// node 0, the key written after the flush survives on both, and "keep" is untouched.
    func testAFlushMissedByADownReplicaReachesItAndNothingComesBack() throws {
        let c = try SyncCluster(count: 2, replicas: 2)
        XCTAssertTrue(eventually(20, interval: 0.1) { c.verified(0) && c.verified(1) }, "the nodes synced at start")
        let w = try c.client([0, 1])
        let keys = (0..<60).map { "k\($0)" }
        for k in keys {
            _ = try w.set(b(k), b("old-\(k)"), namespace: b("app"))
            _ = try w.set(b(k), b("kept-\(k)"), namespace: b("keep"))
        }
        c.kill(1)
        let flushed = try cli(["flush", "--ns", "app", "--server", c.name(0)])
        XCTAssertEqual(flushed.code, 0, flushed.err)
        let after = try c.client([0]) { $0.ack = .one }
        _ = try after.set(b("after"), b("new"), namespace: b("app"))
        try c.start(1, members: [0, 1])
        XCTAssertTrue(eventually(20, interval: 0.1) { c.verified(0) && c.verified(1) }, "node 1 caught up")
        XCTAssertTrue(eventually(10, interval: 0.1) {
            keys.allSatisfy { k in (0...1).allSatisfy { onDisk(c, $0, "app", k) == .some(nil) } }
                && (0...1).allSatisfy { onDisk(c, $0, "app", "after") == .some("new") }
        }, "flushed items came back: node 0 \(keys.filter { onDisk(c, 0, "app", $0) != .some(nil) }.count), node 1 \(keys.filter { onDisk(c, 1, "app", $0) != .some(nil) }.count) of \(keys.count) keys still there")
        for k in keys.prefix(10) {
            let r = try cli(["get", k, "--ns", "app", "--nodes", c.list([0, 1])])
            XCTAssertEqual(r.code, 1, "a fresh CLI read a flushed key: \(r.out) \(r.err)")
            let kept = try cli(["get", k, "--ns", "keep", "--nodes", c.list([0, 1])])
            XCTAssertEqual(kept.out, "kept-\(k)", kept.err)
        }
        // Node 1 learnt the flush from node 0 (a pulled mark).
        let s1 = try nodeStats(try c.connect(1))
        XCTAssertGreaterThan(s1["sync_pulled"] as? Int ?? 0, 0, "\(s1)")
    }

    /// A versioned write older than a flush of its namespace is refused (SUPERSEDED, CAS = the
    /// flush's version), also after a restart; a FLUSH with a version removes exactly the
    /// items older than it; the wire's refusals.
    func testWritesOlderThanAFlushAreRefusedAndAVersionedFlushRemovesOnlyOlderItems() throws {
        let c = try SyncCluster(count: 2, replicas: 2)
        XCTAssertTrue(eventually(20, interval: 0.1) { c.verified(0) && c.verified(1) })
        let conn = try c.connect(0)
        let old = try conn.set(SetRequest(key: b("a"), value: b("1"), namespace: b("app")))
        XCTAssertEqual(old.statusCode, .ok)
        let flushed = try conn.call(.flush(namespace: b("app"), all: false))
        XCTAssertEqual(flushed.statusCode, .ok)
        XCTAssertGreaterThan(flushed.cas, old.cas, "a cluster node's FLUSH answers its mark's version")
        var late = SetRequest(key: b("a"), value: b("late copy"), namespace: b("app"))
        late.version = old.cas + 1
        let refused = try conn.set(late)
        XCTAssertEqual(refused.statusCode, .superseded, String(decoding: refused.value, as: UTF8.self))
        XCTAssertGreaterThan(refused.cas, old.cas, "CAS carries the flush's version")
        let delete = try conn.call(.delete(namespace: b("app"), key: b("a"), tiers: 0, version: old.cas + 2, writeBehind: false))
        XCTAssertEqual(delete.statusCode, .superseded)
        XCTAssertEqual(try conn.set(SetRequest(key: b("a"), value: b("2"), namespace: b("app"))).statusCode, .ok, "a write without a version is newer")
        XCTAssertEqual(try conn.get(b("a"), namespace: b("app"))?.value, b("2"))

        // A mark older than the tombstone lifetime would be dropped at once: refused, not
        // acknowledged and forgotten (a namespace without a mark; "app" answers its own).
        let ancient = try conn.call(.flush(namespace: b("other"), all: false, tiers: 0, version: 900))
        XCTAssertEqual(ancient.statusCode, .invalidArgument)
        XCTAssertTrue(String(decoding: ancient.value, as: UTF8.self).contains("tombstone lifetime"), String(decoding: ancient.value, as: UTF8.self))
        // Also where a mark is held (§7.12: version 0 and versions that old are INVALID_ARGUMENT,
        // whatever the node holds — an outside review got SUPERSEDED here).
        XCTAssertEqual(try conn.call(.flush(namespace: b("app"), all: false, tiers: 0, version: 900)).statusCode, .invalidArgument)
        XCTAssertEqual(try conn.call(.flush(namespace: b("app"), all: false, tiers: 0, version: 0)).statusCode, .invalidArgument)
        XCTAssertEqual(try conn.call(.flush(namespace: b("app"), all: false, tiers: 0, version: old.cas)).statusCode, .superseded, "not newer than the mark held")

        // FLUSH with a version: older items go, the rest stay.
        let v1 = try conn.set(SetRequest(key: b("n1"), value: b("x"), namespace: b("app"))).cas
        let v2 = try conn.set(SetRequest(key: b("n2"), value: b("y"), namespace: b("app"))).cas
        XCTAssertLessThan(v1, v2)
        XCTAssertEqual(try conn.call(.flush(namespace: b("app"), all: false, tiers: 0, version: v2)).statusCode, .ok)
        XCTAssertTrue(eventually(5, interval: 0.05) { (try? conn.get(b("n1"), namespace: b("app"))) == .some(nil) },
                      "older than the mark: removed (by the background sweep)")
        XCTAssertEqual(try conn.get(b("n2"), namespace: b("app"))?.value, b("y"), "as new as the mark: kept")
        XCTAssertEqual(try conn.call(.flush(namespace: b("app"), all: false, tiers: 0, version: v2)).statusCode, .superseded, "not newer than the mark held")
        // FLUSH ALL with a version: a floor for every namespace, one it never held included.
        let all = try conn.call(.flush(namespace: [], all: true, tiers: 0, version: v2 + 1))
        XCTAssertEqual(all.statusCode, .ok)
        XCTAssertEqual(all.cas, v2 + 1)
        XCTAssertTrue(eventually(5, interval: 0.05) { (try? conn.get(b("n2"), namespace: b("app"))) == .some(nil) },
                      "older than FLUSH ALL's mark")
        var elsewhere = SetRequest(key: b("z"), value: b("old"), namespace: b("fresh"))
        elsewhere.version = v2
        XCTAssertEqual(try conn.set(elsewhere).statusCode, .superseded)
        let ahead = try conn.call(.flush(namespace: b("app"), all: false, tiers: 0, version: UInt64(Date().timeIntervalSince1970 * 1e6) + 2 * 86_400_000_000))
        XCTAssertEqual(ahead.statusCode, .invalidArgument, "a version two days ahead")

        // The marks are kept in the data directory.
        c.nodes[0]!.terminate()
        try c.start(0, members: [0, 1])
        var again = SetRequest(key: b("n1"), value: b("stale"), namespace: b("app"))
        again.version = v1
        XCTAssertEqual(try c.connect(0).set(again).statusCode, .superseded, "the mark was lost with the restart")

        // A node without --cluster takes no versioned FLUSH.
        let dir = TempDir()
        let plain = try NodeProcess(dataDir: dir.path)
        let pc = try NodeConnection(host: "127.0.0.1", port: plain.port, timeout: 5)
        let r = try pc.call(.flush(namespace: b("app"), all: false, tiers: 0, version: v2))
        XCTAssertEqual(r.statusCode, .invalidArgument)
        XCTAssertTrue(String(decoding: r.value, as: UTF8.self).contains("--cluster"))
        XCTAssertEqual(try pc.call(.flush(namespace: b("app"), all: false)).cas, 0, "no mark without --cluster")
    }

    /// `ClusterClient.flushEverywhere` (the CLI's `flush --nodes`, the facade's namespace
    /// flush) leaves the same mark on every node, and every node's clock past it.
    func testAClusterFlushLeavesOneMarkOnEveryNode() throws {
        // Anti-entropy only at the start: the marks must agree without it.
        let c = try SyncCluster(count: 3, replicas: 2, extra: ["--sync-interval", "300"])
        XCTAssertTrue(eventually(20, interval: 0.1) { (0..<3).allSatisfy(c.verified) })
        let w = try c.client([0, 1, 2])
        for i in 0..<30 { _ = try w.set(b("k\(i)"), b("v"), namespace: b("app")) }
        XCTAssertTrue(w.flushEverywhere(namespace: b("app"), all: false).isEmpty)
        // An older mark (an hour old: within the tombstone lifetime, so not INVALID_ARGUMENT)
        // is refused with the mark held: the same on all three.
        let hourAgo = UInt64(Date().timeIntervalSince1970 * 1e6) - 3_600_000_000
        let held = try (0..<3).map { i -> UInt64 in
            let f = try c.connect(i).call(.flush(namespace: b("app"), all: false, tiers: 0, version: hourAgo))
            XCTAssertEqual(f.statusCode, .superseded)
            return f.cas
        }
        XCTAssertGreaterThan(held[0], 0)
        XCTAssertEqual(Set(held).count, 1, "marks differ: \(held)")
        // Writes after the flush are newer than it everywhere, and nothing flushed is left.
        for i in 0..<3 {
            let v = try c.connect(i).set(SetRequest(key: b("after\(i)"), value: b("x"), namespace: b("app"))).cas
            XCTAssertGreaterThan(v, held[0])
        }
        for i in 0..<30 { XCTAssertNil(try w.get(b("k\(i)"), namespace: b("app"))) }
        let cli = try cli(["flush", "--ns", "app", "--nodes", c.list([0, 1, 2])])
        XCTAssertEqual(cli.code, 0, cli.err)
        XCTAssertEqual(cli.out, "flushed namespace 'app' on every node\n")
    }

    /// FLUSH ALL on node 0 while node 1 is down, with a namespace only node 1 holds (written
    /// while node 0 was down, its hints lost with node 1's process): node 0 refuses node 1's
    /// copies of it, marks that namespace, and node 1 removes it.
    func testFlushAllReachesANamespaceOnlyTheMissingNodeHeld() throws {
        let c = try SyncCluster(count: 2, replicas: 2)
        XCTAssertTrue(eventually(20, interval: 0.1) { c.verified(0) && c.verified(1) })
        let w = try c.client([0, 1])
        for i in 0..<20 { _ = try w.set(b("s\(i)"), b("shared"), namespace: b("both")) }
        c.kill(0)
        let onlyB = try c.client([1]) { $0.ack = .one }
        for i in 0..<20 { _ = try onlyB.set(b("o\(i)"), b("orphan"), namespace: b("solo")) }
        c.kill(1)
        try c.start(0, members: [0, 1])
        let flushed = try cli(["flush", "--all", "--server", c.name(0)])
        XCTAssertEqual(flushed.code, 0, flushed.err)
        try c.start(1, members: [0, 1])
        XCTAssertTrue(eventually(20, interval: 0.1) { c.verified(0) && c.verified(1) })
        XCTAssertTrue(eventually(10, interval: 0.1) {
            (0..<20).allSatisfy { i in (0...1).allSatisfy { onDisk(c, $0, "solo", "o\(i)") == .some(nil) && onDisk(c, $0, "both", "s\(i)") == .some(nil) } }
        }, "node 1 kept items FLUSH ALL covered: solo \((0..<20).filter { onDisk(c, 1, "solo", "o\($0)") != .some(nil) }.count), both \((0..<20).filter { onDisk(c, 1, "both", "s\($0)") != .some(nil) }.count); node 0 solo \((0..<20).filter { onDisk(c, 0, "solo", "o\($0)") != .some(nil) }.count)")
    }
}
