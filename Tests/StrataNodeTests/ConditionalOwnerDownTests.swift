import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataWire

/// A conditional write (add, replace, cas) is decided by one node — the owner, or, when it does
/// not answer, the next node of the key — and copied to the others only once stored. Before,
/// with the owner down the others were written unconditionally: an `add` of a key that existed
/// overwrote it and reported stored (`--ack one`), a `replace` of an absent key stored it.
final class ConditionalOwnerDownTests: XCTestCase {
    func testConditionalWritesAreDecidedByTheNextNodeWhenTheOwnerIsDown() throws {
        let cluster = try Cluster()
        let ring = HashRing(members: cluster.addresses.map { .init(name: $0.name) })
        let keys = Array((0..<600).map { "c\($0)" }.filter { ring.owner(for: b($0))!.name == cluster.addresses[1].name }.prefix(3))
        let (existing, absent, versioned) = (keys[0], keys[1], keys[2])
        let setup = try cluster.client()
        guard case .stored = try setup.set(b(existing), b("v0")), case .stored(let v) = try setup.set(b(versioned), b("v0")) else {
            return XCTFail("setup")
        }
        cluster.kill(1)
        let c = try cluster.client { $0.ack = .one; $0.timeout = 1 }
        XCTAssertEqual(try c.set(b(existing), b("new"), mode: .add), .exists, "add of a present key")
        XCTAssertEqual(try c.set(b(absent), b("new"), mode: .replace), .notFound, "replace of an absent key")
        guard case .casMismatch = try c.set(b(versioned), b("new"), mode: .cas, casVersion: v &- 1) else { return XCTFail("cas with an old version") }
        XCTAssertEqual(try c.get(b(existing))?.value, b("v0"))
        XCTAssertNil(try c.get(b(absent)))
        XCTAssertEqual(try c.get(b(versioned))?.value, b("v0"))
        // And the ones whose condition holds are stored on the live nodes.
        guard case .stored = try c.set(b(absent), b("added"), mode: .add),
              case .stored = try c.set(b(versioned), b("swapped"), mode: .cas, casVersion: v) else { return XCTFail("conditions that hold") }
        XCTAssertEqual(try c.get(b(absent))?.value, b("added"))
        XCTAssertEqual(try c.get(b(versioned))?.value, b("swapped"))
    }
}
