import Foundation
import XCTest
import StrataClient
import StrataCore
@testable import StrataServer

/// Member lists that change while a node runs (`--cluster` with `dns:`/`file:` entries,
/// `--cluster-refresh`): the list syntax, `ClusterView.replace`, `Handoff.update` and
/// `MembershipRefresh`, without sockets or sleeping.
final class MembershipUnitTests: XCTestCase {
    private func a(_ i: Int) -> NodeAddress { NodeAddress(host: "10.0.0.\(i)", port: 7400) }

    func testAFileListHoldsEntriesByLineOrCommaWithComments() throws {
        let dir = TempDir()
        let path = dir.path + "/members"
        try "# the cache\r\n10.0.0.1:7400\n\n  10.0.0.2:7400 , 10.0.0.3:7400\n10.0.0.4:7400  # the new one, 10.0.0.5:7400\n# end\n"
            .write(toFile: path, atomically: true, encoding: .utf8)
        XCTAssertEqual(try NodeAddress.parseList("file:\(path)", option: "--cluster").map(\.name),
                       ["10.0.0.1:7400", "10.0.0.2:7400", "10.0.0.3:7400", "10.0.0.4:7400"], "a comment runs to the end of its line")
        XCTAssertEqual(try NodeAddress.parseList("10.0.0.9:7400,file:\(path)", option: "--nodes").count, 5)
        XCTAssertTrue(NodeAddress.listCanChange("10.0.0.9:7400, file:\(path)"))
        XCTAssertTrue(NodeAddress.listCanChange("dns:strata.local:7400"))
        XCTAssertFalse(NodeAddress.listCanChange("10.0.0.9:7400,10.0.0.8:7400"))

        func failure(_ list: String) -> ClientError? {
            do { _ = try NodeAddress.parseList(list, option: "--cluster"); return nil } catch { return error as? ClientError }
        }
        let missing = try XCTUnwrap(failure("file:\(dir.path)/nope"))
        XCTAssertEqual(missing.kind, .protocolViolation, "a missing list file is a usage error (exit 2)")
        XCTAssertTrue(missing.message.contains("cannot read \(dir.path)/nope"), missing.message)
        XCTAssertEqual(failure("file:")?.kind, .protocolViolation)
        try "file:\(path)\n".write(toFile: dir.path + "/nested", atomically: true, encoding: .utf8)
        XCTAssertTrue(try XCTUnwrap(failure("file:\(dir.path)/nested")).message.contains("cannot name another file"))
        try "10.0.0.1:7400\nnot-an-entry\n".write(toFile: dir.path + "/bad", atomically: true, encoding: .utf8)
        let bad = try XCTUnwrap(failure("file:\(dir.path)/bad"))
        XCTAssertEqual(bad.kind, .protocolViolation)
        XCTAssertTrue(bad.message.contains("'not-an-entry' (in \(dir.path)/bad)"), bad.message)
        // One member named twice (host names without case, as DNS compares them), and port 0,
        // are refused: an outside review's `vm:P,VM:P` made "two copies" that were one node.
        XCTAssertTrue(try XCTUnwrap(failure("vm:7400,VM:7400,10.0.0.1:7400")).message.contains("names one member twice"))
        XCTAssertTrue(try XCTUnwrap(failure("10.0.0.1:7400,file:\(path)")).message.contains("names one member twice"))
        // Other spellings of one address too (an outside review's "noticed, not fixed").
        for twice in ["[::1]:7400,[0:0::1]:7400", "[::1]:7400,[0:0:0:0:0:0:0:1]:7400", "vm.:7400,vm:7400", "localhost:7400,127.0.0.1:7400",
                      "LOCALHOST:7400,localhost:7400", "localhost.:7400,127.0.0.1:7400", "LocalHost:7400,127.0.0.1:7400",
                      "[2001:DB8::1]:7400,[2001:db8:0::1]:7400"] {
            XCTAssertTrue(failure(twice)?.message.contains("names one member twice") == true, twice)
        }
        XCTAssertEqual(try NodeAddress.parseList("127.0.0.1:7400,127.0.0.2:7400,[::1]:7400,vm:7400", option: "--nodes").count, 4)
        XCTAssertTrue(try XCTUnwrap(failure("vm:0")).message.contains("port 0"))
        XCTAssertEqual(try NodeAddress.parseList("vm:7400,VM:7401", option: "--nodes").count, 2, "other ports are other members")
    }

    func testReplacingTheMembersMakesANewRingAndUnsyncsEveryPeer() {
        let view = ClusterView(members: [a(1), a(2)], selfName: a(1).name, replicas: 2)
        XCTAssertTrue(view.markSynced(a(2).name, epoch: view.epoch(of: a(2).name)))
        XCTAssertTrue(view.verified)
        XCTAssertNil(view.replace(members: [a(2), a(1), a(1)]), "the same members (any order, duplicates) change nothing")
        XCTAssertTrue(view.verified)

        let oldEpoch = view.epoch(of: a(2).name)
        let change = view.replace(members: [a(1), a(2), a(3)])
        XCTAssertEqual(change, ClusterView.Change(added: [a(3).name], removed: []))
        XCTAssertEqual(view.ring.members.map(\.name).sorted(), [a(1), a(2), a(3)].map(\.name))
        XCTAssertEqual(view.peers.map(\.name), [a(2).name, a(3).name])
        XCTAssertFalse(view.verified)
        XCTAssertEqual(Set(view.unsyncedPeers), [a(2).name, a(3).name])
        XCTAssertFalse(view.markSynced(a(2).name, epoch: oldEpoch), "a round begun before the change does not count")
        // Keys now owned with the new member are unverified until both peers are synced.
        let ring3 = HashRing(members: [a(1), a(2), a(3)].map { .init(name: $0.name) })
        let key = (0..<1000).map { Array("k\($0)".utf8) }.first { k in
            ring3.nodes(for: k, count: 2).map(\.name).contains(a(1).name) && ring3.nodes(for: k, count: 2).map(\.name).contains(a(3).name)
        }!
        XCTAssertEqual(view.replicaSet(namespace: [], key: key).sorted(), [a(1).name, a(3).name])
        XCTAssertTrue(view.sharedTest(with: a(3).name)([], key))
        XCTAssertFalse(view.isVerified(namespace: [], key: key))
        XCTAssertTrue(view.markSynced(a(3).name, epoch: view.epoch(of: a(3).name)))
        XCTAssertTrue(view.isVerified(namespace: [], key: key))
        XCTAssertFalse(view.verified, "a(2) still unsynced")
        XCTAssertTrue(view.markSynced(a(2).name, epoch: view.epoch(of: a(2).name)))
        XCTAssertTrue(view.verified)

        // A removed peer: no epoch, and a late round with it does not count; it is a former
        // member to catch up with once (it may have taken writes of shared keys), then no more.
        let e3 = view.epoch(of: a(3).name)
        XCTAssertEqual(view.replace(members: [a(1), a(2)]), ClusterView.Change(added: [], removed: [a(3).name]))
        XCTAssertFalse(view.verified)
        XCTAssertFalse(view.markSynced(a(3).name, epoch: e3))
        view.unverify(peer: a(3).name)
        XCTAssertEqual(view.unsyncedPeers, [a(2).name, a(3).name])
        XCTAssertEqual(view.formerMembersToSync, [a(3).name])
        XCTAssertTrue(view.markSynced(a(2).name, epoch: view.epoch(of: a(2).name)))
        XCTAssertFalse(view.verified, "the former member is still to catch up with")
        XCTAssertFalse(view.isVerified(namespace: [], key: key), "no key is verified meanwhile")
        view.formerMemberDone(a(3).name)
        XCTAssertEqual(view.unsyncedPeers, [])
        XCTAssertTrue(view.verified, "only the current peers count once the former member is done")
    }

    func testHandoffFollowsTheMembers() {
        let view = ClusterView(members: [a(1), a(2)], selfName: a(1).name, replicas: 2)
        struct Down: Error {}
        let h = Handoff(view: view, stats: NodeStats(), log: Logger(level: .error),
                        connect: { _ in throw Down() }, copy: { _, _, _ in 0 }, localVersion: { _ in 1 })
        h.start()
        defer { h.stop() }
        func hint(_ i: Int) { h.accepted(namespace: [], key: Array("k\(i)".utf8), version: 1) }
        for i in 0..<50 { hint(i) }
        // Two members, two replicas: every key's other node is a(2), which is down.
        XCTAssertTrue(eventually { h.pending == 50 }, "\(h.pending)")
        _ = view.replace(members: [a(1), a(2), a(3)])
        h.update()
        for i in 50..<150 { hint(i) }
        // Keys whose replica set holds this node get one hint for its other node; the others
        // (foreign writes: a client or proxy placed them here) one for each of their replicas.
        let ring = view.ring
        let expected = 50 + (50..<150).reduce(0) { n, i in
            n + ring.nodes(for: Array("k\(i)".utf8), count: 2).filter { $0.name != a(1).name }.count
        }
        XCTAssertTrue(eventually { h.pending == expected }, "\(h.pending) vs \(expected)")
        // a(2) leaves: its hints are dropped, a(3)'s stay.
        let forA3 = (50..<150).filter { ring.nodes(for: Array("k\($0)".utf8), count: 2).map(\.name).contains(a(3).name) }.count
        _ = view.replace(members: [a(1), a(3)])
        h.update()
        XCTAssertTrue(eventually { h.pending == forA3 }, "\(h.pending) vs \(forA3)")
        // And it may come back.
        _ = view.replace(members: [a(1), a(2), a(3)])
        h.update()
        for i in 0..<20 { hint(i) }
        XCTAssertTrue(eventually { h.pending > forA3 })
    }

    /// Past `maxHints` a peer's oldest hint is dropped, one for one (an outside review, cl18:
    /// an eighth of the bound went at once — 12,500 of 100,000).
    func testHintsPastTheBoundDropExactlyTheOldest() {
        let view = ClusterView(members: [a(1), a(2)], selfName: a(1).name, replicas: 2)
        struct Down: Error {}
        let stats = NodeStats()
        let h = Handoff(view: view, stats: stats, log: Logger(level: .error), maxHints: 100,
                        connect: { _ in throw Down() }, copy: { _, _, _ in 0 }, localVersion: { _ in 1 }, dropped: {})
        h.start()
        defer { h.stop() }
        for i in 0..<101 { h.accepted(namespace: [], key: Array("k\(i)".utf8), version: 1) }
        XCTAssertTrue(eventually { h.pending == 100 && stats.handoffDropped.load() == 1 }, "\(h.pending), \(stats.handoffDropped.load())")
        for i in 101..<150 { h.accepted(namespace: [], key: Array("k\(i)".utf8), version: 1) }
        XCTAssertTrue(eventually { h.pending == 100 && stats.handoffDropped.load() == 50 }, "\(h.pending), \(stats.handoffDropped.load())")
    }

    func testHintQueueIsAFIFO() {
        var q = HintQueue()
        func hint(_ i: Int) -> Handoff.Hint { Handoff.Hint(id: ItemKey(namespace: [], key: Array("k\(i)".utf8)), version: UInt64(i), tombstone: false) }
        for i in 0..<10_000 { q.append(hint(i)) }
        q.dropOldest(1)
        XCTAssertEqual(q.count, 9_999)
        XCTAssertEqual(q.takeOldest(3).map(\.version), [1, 2, 3])
        q.dropOldest(5_000) // past the compaction point
        XCTAssertEqual(q.takeOldest(1).map(\.version), [5_004])
        q.putBack([hint(7), hint(8)])
        XCTAssertEqual(q.takeOldest(3).map(\.version), [7, 8, 5_005])
        XCTAssertEqual(q.count, 10_000 - 5_006)
        q.dropOldest(q.count + 5)
        XCTAssertTrue(q.isEmpty)
        XCTAssertEqual(q.takeOldest(4).count, 0)
    }

    func testARefreshAppliesWhatItReadsAndKeepsTheMembersWhenAReadFails() {
        final class Box: @unchecked Sendable {
            var next: Result<[NodeAddress], ClientError> = .success([])
            var applied: [[String]] = []
        }
        let box = Box()
        let r = MembershipRefresh(interval: 3600, log: Logger(level: .error),
                                  read: { try box.next.get() }, apply: { box.applied.append($0.map(\.name)) })
        box.next = .success([a(1), a(2)])
        r.refreshOnce()
        box.next = .failure(ClientError(.connection, "cannot resolve strata.local"))
        r.refreshOnce()
        r.refreshOnce()
        box.next = .success([a(1)])
        r.refreshOnce()
        XCTAssertEqual(box.applied, [[a(1).name, a(2).name], [a(1).name]])
    }
}
