import Foundation
import XCTest
@testable import StrataCore

final class HashRingTests: XCTestCase {
    static let vectors = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("proto-spec/vectors/ring")

    func testPlacementVectorsFromRingMd() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.vectors.path).filter { $0.hasSuffix(".txt") }
        XCTAssertGreaterThanOrEqual(files.count, 3)
        var checked = 0
        for file in files {
            let text = try String(contentsOf: Self.vectors.appendingPathComponent(file), encoding: .utf8)
            var members: [HashRing.Member] = []
            var ring: HashRing?
            for line in text.split(separator: "\n") where !line.hasPrefix("#") {
                let parts = line.split(separator: " ").map(String.init)
                if parts[0] == "member" {
                    members.append(HashRing.Member(name: parts[1], weight: Double(parts[2])!))
                    continue
                }
                if ring == nil { ring = HashRing(members: members) }
                let ns = parts[1] == "-" ? [] : try XCTUnwrap([UInt8](hex: parts[1]))
                let key = try XCTUnwrap([UInt8](hex: parts[2]))
                XCTAssertEqual(String(HashRing.position(key: key, namespace: ns), radix: 16).leftPad(16), parts[3], "\(file): \(line)")
                XCTAssertEqual(ring!.nodes(for: key, namespace: ns, count: 3).map(\.name), Array(parts[4...]), "\(file): \(line)")
                checked += 1
            }
        }
        XCTAssertGreaterThan(checked, 20)
    }

    func testNodeOrderDoesNotMatter() {
        let names = (1...7).map { "node\($0):7400" }
        let a = HashRing(members: names.map { .init(name: $0) })
        let b = HashRing(members: names.reversed().map { .init(name: $0) })
        let c = HashRing(members: (names + names).shuffled().map { .init(name: $0) })
        for i in 0..<2000 {
            let k = Array("key\(i)".utf8)
            XCTAssertEqual(a.nodes(for: k, count: 3), b.nodes(for: k, count: 3))
            XCTAssertEqual(a.nodes(for: k, count: 3), c.nodes(for: k, count: 3))
        }
    }

    func testReplicasAreDistinctAndCappedByMembers() {
        let ring = HashRing(members: ["a", "b", "c"].map { .init(name: $0) })
        for i in 0..<500 {
            let nodes = ring.nodes(for: Array("k\(i)".utf8), count: 5).map(\.name)
            XCTAssertEqual(nodes.count, 3)
            XCTAssertEqual(Set(nodes).count, 3)
        }
        XCTAssertTrue(HashRing(members: []).nodes(for: [1], count: 2).isEmpty)
        XCTAssertNil(HashRing(members: [.init(name: "z", weight: 0)]).owner(for: [1]))
    }

    func testBalanceWithTenNodesIsWithinFifteenPercentOfMean() {
        // Seeded, so the test is repeatable: with 512 points per node a random 10-node set lands
        // above 1.15 × mean now and then (measured once: 1.155 for one unseeded set).
        var rng = SplitMix(seed: 20261129)
        for _ in 0..<4 {
            let names = (0..<10).map { _ in "10.\(UInt8.random(in: 0...255, using: &rng)).\(UInt8.random(in: 0...255, using: &rng)).\(UInt8.random(in: 1...254, using: &rng)):\(UInt16.random(in: 1024...65000, using: &rng))" }
            let ring = HashRing(members: names.map { .init(name: $0) })
            var counts: [String: Int] = [:]
            for i in 0..<100_000 { counts[ring.owner(for: Array("key-\(i)".utf8))!.name, default: 0] += 1 }
            let mean = 100_000.0 / Double(ring.members.count)
            let busiest = Double(counts.values.max()!)
            XCTAssertLessThanOrEqual(busiest, 1.15 * mean, "\(names): \(counts)")
        }
    }

    func testAddingATenthNodeMovesAboutATenthOfKeysAndOnlyToIt() {
        let nine = (1...9).map { HashRing.Member(name: "127.0.0.1:74\($0)0") }
        let before = HashRing(members: nine)
        let after = HashRing(members: nine + [HashRing.Member(name: "127.0.0.1:7499")])
        var moved = 0
        let n = 100_000
        for i in 0..<n {
            let k = Array("key-\(i)".utf8)
            let a = before.owner(for: k)!.name, b = after.owner(for: k)!.name
            if a != b {
                moved += 1
                XCTAssertEqual(b, "127.0.0.1:7499", "a key moved between old nodes")
            }
        }
        let fraction = Double(moved) / Double(n)
        XCTAssertGreaterThanOrEqual(fraction, 0.08)
        XCTAssertLessThanOrEqual(fraction, 0.12)
    }

    func testWeightsScaleShares() {
        let ring = HashRing(members: [.init(name: "small", weight: 1), .init(name: "big", weight: 3)])
        var big = 0
        for i in 0..<40_000 where ring.owner(for: Array("k\(i)".utf8))!.name == "big" { big += 1 }
        XCTAssertEqual(Double(big) / 40_000, 0.75, accuracy: 0.05)
    }
}

extension String {
    func leftPad(_ n: Int) -> String { String(repeating: "0", count: max(0, n - count)) + self }
}
