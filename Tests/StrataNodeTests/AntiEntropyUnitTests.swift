import XCTest
import StrataClient
import StrataCore
@testable import StrataServer

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
    }
}
