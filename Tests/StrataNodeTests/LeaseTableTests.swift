import XCTest
import StrataCore
import StrataServer

/// The node's lease table with an injected clock: no sleeping.
final class LeaseTableTests: XCTestCase {
    func testOneHolderAtATimeUntilReleaseOrTimeout() throws {
        let clock = ManualClock()
        let t = LeaseTable(timeout: 10, clock: clock)
        guard case .granted(let first) = t.acquire(b("k")) else { return XCTFail("first caller gets the lease") }
        guard case .held(let remaining) = t.acquire(b("k")) else { return XCTFail("second caller is told it is held") }
        XCTAssertEqual(remaining, 10, accuracy: 0.001)
        XCTAssertTrue(t.holds(b("k"), token: first))
        XCTAssertFalse(t.holds(b("k"), token: first &+ 1))
        // Other keys are independent.
        guard case .granted = t.acquire(b("other")) else { return XCTFail("another key has its own lease") }
        // Released: the next caller gets a new token.
        XCTAssertTrue(t.release(b("k"), token: first))
        XCTAssertFalse(t.release(b("k"), token: first), "a token releases once")
        guard case .granted(let second) = t.acquire(b("k")) else { return XCTFail("free again after release") }
        XCTAssertNotEqual(second, first)
        // A holder that dies: after the timeout the lease goes to the next caller, and the old
        // token no longer holds anything.
        clock.advance(seconds: 9.9)
        if case .granted = t.acquire(b("k")) { XCTFail("still held before the timeout") }
        clock.advance(seconds: 0.2)
        XCTAssertFalse(t.holds(b("k"), token: second))
        guard case .granted(let third) = t.acquire(b("k")) else { return XCTFail("granted after the timeout") }
        XCTAssertFalse(t.release(b("k"), token: second))
        XCTAssertTrue(t.holds(b("k"), token: third))
    }

    func testRevokeDropsTheLease() {
        let t = LeaseTable(timeout: 10, clock: ManualClock())
        guard case .granted(let token) = t.acquire(b("k")) else { return XCTFail() }
        t.revoke(b("k"))
        XCTAssertFalse(t.holds(b("k"), token: token))
        XCTAssertEqual(t.count, 0)
    }

    func testTheTableIsBoundedAndSweepsExpiredLeasesWhenFull() {
        let clock = ManualClock()
        let t = LeaseTable(timeout: 1, capacity: 3, clock: clock)
        for i in 0..<3 { guard case .granted = t.acquire(b("k\(i)")) else { return XCTFail() } }
        XCTAssertEqual(t.acquire(b("k3")), .full, "no fourth lease while three are live")
        clock.advance(seconds: 2)
        guard case .granted = t.acquire(b("k3")) else { return XCTFail("expired leases make room") }
        XCTAssertEqual(t.count, 1)
    }
}
