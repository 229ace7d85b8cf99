import XCTest
import StrataClient
import StrataCore
@testable import StrataServer
import StrataStore

/// The anti-entropy thread's pacing (`AntiEntropy.wait`), without sleeping.
final class AntiEntropyUnitTests: XCTestCase {
    func testQuietPassesBackOffToTheCeilingAndUnsyncedPeersAreRetriedWithinASecond() {
        func w(_ interval: Double, spent: Double = 0, quiet: Int = 0, unsynced: Bool = false) -> Double {
            AntiEntropy.wait(interval: interval, spent: spent, quietPasses: quiet, unsynced: unsynced)
        }
        XCTAssertEqual(w(2), 2)
        XCTAssertEqual(w(2, quiet: 1), 4)
        XCTAssertEqual(w(2, quiet: 3), 16)
        XCTAssertEqual(w(2, quiet: 4), AntiEntropy.quietCeiling, "capped")
        XCTAssertEqual(w(2, quiet: 1_000), AntiEntropy.quietCeiling, "no overflow")
        XCTAssertEqual(w(120, quiet: 5), 120, "an interval above the ceiling is kept")
        XCTAssertEqual(w(2, quiet: 5, unsynced: true), 1, "an unsynced peer: again within a second")
        XCTAssertEqual(w(0.5, unsynced: true), 0.5)
        // Catching up after a long pass (a join's copying): again soon, at most ~25 % of a core.
        XCTAssertEqual(w(2, spent: 2, unsynced: true), 6)
        // A pass that took 1 s waits 19 s more (≤ 5 % of a core), even while quiet passes are few.
        XCTAssertEqual(w(2, spent: 1), 19)
        XCTAssertEqual(w(2, spent: 1, quiet: 10), 29)
    }

    /// The per-point masks a pass uses agree with the ring walk, for every member's view.
    func testTheFastSharedTestAgreesWithTheRingWalk() {
        for (n, r) in [(2, 2), (3, 2), (5, 3), (4, 1)] {
            let members = (0..<n).map { NodeAddress(host: "10.0.0.\($0 + 1)", port: 7400) }
            for me in members {
                let view = ClusterView(members: members, selfName: me.name, replicas: r)
                for peer in view.peers {
                    let fast = view.sharedTest(with: peer.name)
                    var rng = SplitMix(seed: UInt64(n * 10 + r))
                    for i in 0..<2_000 {
                        let ns: [UInt8] = i % 3 == 0 ? [] : Array("ns\(i % 7)".utf8)
                        let key = Array("k\(rng.next())".utf8)
                        XCTAssertEqual(fast(ns, key), view.shared(ns, key, with: peer.name), "\(n) nodes R=\(r) \(me.name)→\(peer.name) key \(i)")
                    }
                }
            }
        }
    }

    /// The digest is §7.19's bytes hashed, whatever buffer builds them.
    func testTheEntryDigestIsTheSpecifiedBytes() {
        for (ns, key, v, t) in [([UInt8](), Array("foo".utf8), UInt64(7), false), (Array("alice".utf8), Array("gone".utf8), UInt64.max - 3, true),
                                (Array(repeating: 0x61, count: 255), Array(repeating: 0x62, count: 1024), UInt64(1) << 40, false)] {
            var b: [UInt8] = [UInt8(ns.count)] + ns + [UInt8(key.count >> 8), UInt8(key.count & 0xFF)] + key
            for i in stride(from: 56, through: 0, by: -8) { b.append(UInt8(truncatingIfNeeded: v >> UInt64(i))) }
            b.append(t ? 1 : 0)
            XCTAssertEqual(ClusterView.digest(namespace: ns, key: key, version: v, tombstone: t), XXH64.hash(b))
        }
    }

    /// §7.19 "Member lists": the digest is the specified bytes, the same whatever the order or
    /// repeats of the list, and differs with a member or the replica count.
    func testTheMembersDigestIsTheSpecifiedBytes() {
        let names = ["10.0.0.2:7400", "10.0.0.1:7400", "10.0.0.3:7400"]
        let expected = XXH64.hash(Array("10.0.0.1:7400\n10.0.0.2:7400\n10.0.0.3:7400\nreplicas=2".utf8))
        XCTAssertEqual(ClusterView.membersDigest(names: names, replicas: 2), expected)
        XCTAssertEqual(ClusterView.membersDigest(names: names + ["10.0.0.1:7400"], replicas: 2), expected)
        XCTAssertNotEqual(ClusterView.membersDigest(names: Array(names.prefix(2)), replicas: 2), expected)
        XCTAssertNotEqual(ClusterView.membersDigest(names: names, replicas: 3), expected)
        let view = ClusterView(members: names.map { NodeAddress.parse($0)! }, selfName: names[0], replicas: 2)
        XCTAssertEqual(view.membersDigest, expected)
        // The vector sync_digest_members (make_vectors.py's own XXH64) agrees.
        XCTAssertEqual(ClusterView.membersDigest(names: ["10.0.0.4:7400", "10.0.0.2:7400", "10.0.0.1:7400"], replicas: 2), 0xAF5E_6C12_10AD_A5D5)
    }

    /// §7.19 "Member lists": a peer on another list (a rolling change) sends its list; this node
    /// compares by that list's ring, and refuses a list that does not match its digest, has no
    /// replica count, or repeats a member. A list sent once is known by its digest.
    func testAPeersOtherListIsReadCheckedAndRemembered() {
        let three = ["10.0.0.1:7400", "10.0.0.2:7400", "10.0.0.3:7400"], four = three + ["10.0.0.4:7400"]
        let view = ClusterView(members: three.map { NodeAddress.parse($0)! }, selfName: three[0], replicas: 2)
        let text = ClusterView.membersText(names: four, replicas: 2), digest = XXH64.hash(text)
        XCTAssertEqual(view.membersText, ClusterView.membersText(names: three, replicas: 2))
        XCTAssertEqual(XXH64.hash(view.membersText), view.membersDigest)

        func failure(_ r: Result<ClusterView.RingDomain, ClusterView.ListError>) -> String? {
            if case .failure(let e) = r { return e.message }
            return nil
        }
        XCTAssertTrue(failure(view.domain(forList: digest, text: []))?.hasPrefix("member lists differ") == true, "unknown and not sent")
        XCTAssertNotNil(failure(view.domain(forList: digest &+ 1, text: text)), "digest mismatch")
        let noReplicas = Array("10.0.0.1:7400\n10.0.0.4:7400\n".utf8)
        XCTAssertNotNil(failure(view.domain(forList: XXH64.hash(noReplicas), text: noReplicas)))
        let twice = Array("10.0.0.1:7400\n10.0.0.1:7400\nreplicas=2".utf8)
        XCTAssertNotNil(failure(view.domain(forList: XXH64.hash(twice), text: twice)))
        let zero = Array("10.0.0.1:7400\nreplicas=0".utf8)
        XCTAssertNotNil(failure(view.domain(forList: XXH64.hash(zero), text: zero)))
        // The members in another order are refused (§7.19: sorted bytewise), not kept as another list.
        let unsorted = Array("10.0.0.4:7400\n10.0.0.3:7400\n10.0.0.2:7400\n10.0.0.1:7400\nreplicas=2".utf8)
        XCTAssertEqual(failure(view.domain(forList: XXH64.hash(unsorted), text: unsorted)), "the member list sent must be sorted bytewise")

        guard case .success(let d) = view.domain(forList: digest, text: text) else { return XCTFail("a good list was refused") }
        XCTAssertTrue(d.names("10.0.0.4:7400") && d.names(three[0]))
        guard case .success = view.domain(forList: digest, text: []) else { return XCTFail("the list sent before is not remembered") }
        // The domain is the other list's ring: what node 4 and node 1 both hold by it.
        let other = ClusterView(members: four.map { NodeAddress.parse($0)! }, selfName: "10.0.0.4:7400", replicas: 2)
        let test = d.sharedTest(me: three[0], peer: "10.0.0.4:7400")
        var rng = SplitMix(seed: 7)
        var shared = 0
        for _ in 0..<2_000 {
            let key = Array("k\(rng.next())".utf8)
            XCTAssertEqual(test([], key), other.shared([], key, with: three[0]))
            if test([], key) { shared += 1 }
        }
        XCTAssertTrue(shared > 100, "R = 2 of 4: a sixth of the keys or so, got \(shared)")
    }
}

/// Outside review sec2: marks are never dropped before their lifetime. With the table full, a
/// mark of a new namespace is refused (the caller answers BUSY) and the others stay; once the
/// oldest has lived its lifetime it makes room.
final class FlushMarkBoundTests: XCTestCase {
    /// A store whose tombstones (and so flush marks) live an hour, on a manual clock.
    static func storeWithHourLongMarks() throws -> (TempDir, ManualClock, TieredCache) {
        let dir = TempDir()
        let clock = ManualClock()
        var config = StoreConfiguration(directory: dir.path + "/data")
        config.tombstoneTTL = 3_600
        return (dir, clock, try TieredCache(configuration: config, clock: clock))
    }

    func testAFullTableRefusesANewMarkAndKeepsEveryLiveOne() throws {
        let (dir, clock, store) = try Self.storeWithHourLongMarks()
        defer { store.close() }
        let marks = FlushMarks(store: store, directory: dir.path, log: Logger(level: .error), maxMarks: 3)
        let t0 = UInt64(clock.nowMicros())
        for i in 0..<3 { XCTAssertTrue(marks.record(Array("victim\(i)".utf8), t0 + UInt64(i))) }
        XCTAssertFalse(marks.hasRoom(for: Array("attacker".utf8)))
        XCTAssertFalse(marks.record(Array("attacker".utf8), t0 + 10), "no room: refused, nothing dropped")
        for i in 0..<3 { XCTAssertEqual(marks.floor(Array("victim\(i)".utf8)), t0 + UInt64(i), "victim\(i) kept") }
        XCTAssertTrue(marks.hasRoom(for: Array("victim1".utf8)), "a namespace that has a mark can always take a newer one")
        XCTAssertTrue(marks.record(Array("victim1".utf8), t0 + 20))
        // FLUSH ALL: its floor covers every namespace, even past the room.
        XCTAssertTrue(marks.record(nil, t0 + 30, known: [Array("attacker".utf8)]))
        XCTAssertEqual(marks.floor(Array("attacker".utf8)), t0 + 30)
        // Past the lifetime the old marks make room.
        clock.advance(seconds: 3_601)
        XCTAssertTrue(marks.hasRoom(for: Array("attacker".utf8)))
        XCTAssertTrue(marks.record(Array("attacker".utf8), UInt64(clock.nowMicros())))
        // After a restart the file gives the same marks.
        let again = FlushMarks(store: store, directory: dir.path, log: Logger(level: .error), maxMarks: 3)
        XCTAssertEqual(again.floor(Array("attacker".utf8)), UInt64(clock.nowMicros()) - 0)
    }

    /// One user (other than admin) makes at most `maxMarksPerUser` marks in force: a tenant
    /// cannot fill the table for the others. Peers' and admins' marks are not counted against
    /// anyone; the owners survive a restart; expired marks give the user its room back.
    func testOneUserMakesAtMostItsShareOfTheMarks() throws {
        let (dir, clock, store) = try Self.storeWithHourLongMarks()
        defer { store.close() }
        let marks = FlushMarks(store: store, directory: dir.path, log: Logger(level: .error), maxMarks: 10, maxMarksPerUser: 2)
        let t0 = UInt64(clock.nowMicros())
        XCTAssertTrue(marks.record(Array("a0".utf8), t0, owner: "mallory"))
        XCTAssertTrue(marks.record(Array("a1".utf8), t0 + 1, owner: "mallory"))
        XCTAssertEqual(marks.count(by: "mallory"), 2)
        let why = try XCTUnwrap(marks.refusal(for: Array("a2".utf8), owner: "mallory"))
        XCTAssertTrue(why.contains("user 'mallory'") && why.contains("--max-flush-marks-per-user"), why)
        XCTAssertFalse(marks.record(Array("a2".utf8), t0 + 2, owner: "mallory"), "past its share: refused")
        XCTAssertEqual(marks.floor(Array("a2".utf8)), 0)
        XCTAssertTrue(marks.record(Array("a0".utf8), t0 + 3, owner: "mallory"), "a namespace it has a mark of takes a newer one")
        XCTAssertEqual(marks.count(by: "mallory"), 2)
        // Others still have room: another user, an admin (nil), a peer's copy (nil).
        XCTAssertNil(marks.refusal(for: Array("b0".utf8), owner: "alice"))
        XCTAssertTrue(marks.record(Array("b0".utf8), t0 + 4, owner: "alice"))
        for i in 0..<3 { XCTAssertTrue(marks.record(Array("admin\(i)".utf8), t0 + 5 + UInt64(i))) }
        XCTAssertEqual(marks.count, 6)
        XCTAssertEqual(marks.count(by: "alice"), 1)
        // A mark made by another keeps its maker: alice's newer flush of mallory's namespace
        // does not move it.
        XCTAssertTrue(marks.record(Array("a1".utf8), t0 + 9, owner: "alice"))
        XCTAssertEqual(marks.count(by: "mallory"), 2)
        XCTAssertEqual(marks.count(by: "alice"), 1)
        // After a restart the file gives the same owners.
        let again = FlushMarks(store: store, directory: dir.path, log: Logger(level: .error), maxMarks: 10, maxMarksPerUser: 2)
        XCTAssertEqual(again.count(by: "mallory"), 2)
        XCTAssertEqual(again.count(by: "alice"), 1)
        XCTAssertFalse(again.hasRoom(for: Array("a2".utf8), owner: "mallory"))
        XCTAssertEqual(again.floor(Array("a1".utf8)), t0 + 9)
        // Past the lifetime the user's marks are dropped and its room is back.
        clock.advance(seconds: 3_601)
        XCTAssertTrue(again.record(Array("a2".utf8), UInt64(clock.nowMicros()), owner: "mallory"))
        XCTAssertEqual(again.count(by: "mallory"), 1)
        XCTAssertEqual(again.count, 1)
    }
}
