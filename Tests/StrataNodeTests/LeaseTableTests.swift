import Synchronization
import XCTest
import StrataCore
import StrataServer

/// The node's lease table with an injected clock: no sleeping.
final class LeaseTableTests: XCTestCase {
    func id(_ s: String, ns: String = "") -> ItemKey { ItemKey(namespace: Array(ns.utf8), key: Array(s.utf8)) }

    func testTokensComeFromTheInjectedSourceAndZeroIsNeverGranted() {
        let draws = Mutex<[UInt64]>([0, 77, 0, 0, 5])
        let t = LeaseTable(timeout: 10, clock: ManualClock(), tokens: { draws.withLock { $0.removeFirst() } })
        XCTAssertEqual(t.acquire(id("a")), .granted(token: 77))
        XCTAssertEqual(t.acquire(id("b")), .granted(token: 5))
    }

    func testDefaultTokensAreRandomNotConsecutive() {
        let t = LeaseTable(timeout: 10, capacity: 1000, clock: ManualClock())
        var tokens: [UInt64] = []
        for i in 0..<200 { if case .granted(let tok) = t.acquire(id("k\(i)")) { tokens.append(tok) } }
        XCTAssertEqual(tokens.count, 200)
        XCTAssertEqual(Set(tokens).count, 200, "no token repeats")
        // Consecutive grants a guesser could predict: a random source gives none.
        let predictable = zip(tokens, tokens.dropFirst()).filter { $1 &- $0 < 1000 || $0 &- $1 < 1000 }.count
        XCTAssertEqual(predictable, 0, "tokens must not follow one another")
        XCTAssertGreaterThan(tokens.filter { $0 > UInt64.max / 2 }.count, 50, "the high bit is used (full 64-bit range)")
    }

    func testRevokeAllDropsOneNamespaceOrEverything() {
        let t = LeaseTable(timeout: 10, clock: ManualClock())
        guard case .granted(let a) = t.acquire(id("k", ns: "alice")), case .granted(let b) = t.acquire(id("k", ns: "bob")),
              case .granted(let c) = t.acquire(id("k")) else { return XCTFail() }
        t.revokeAll(namespace: Array("alice".utf8))
        XCTAssertFalse(t.holds(id("k", ns: "alice"), token: a))
        XCTAssertTrue(t.holds(id("k", ns: "bob"), token: b))
        XCTAssertTrue(t.holds(id("k"), token: c))
        t.revokeAll(namespace: nil)
        XCTAssertEqual(t.count, 0)
    }

    func testOneHolderAtATimeUntilReleaseOrTimeout() throws {
        let clock = ManualClock()
        let t = LeaseTable(timeout: 10, clock: clock)
        guard case .granted(let first) = t.acquire(id("k")) else { return XCTFail("first caller gets the lease") }
        guard case .held(let remaining) = t.acquire(id("k")) else { return XCTFail("second caller is told it is held") }
        XCTAssertEqual(remaining, 10, accuracy: 0.001)
        XCTAssertTrue(t.holds(id("k"), token: first))
        XCTAssertFalse(t.holds(id("k"), token: first &+ 1))
        // Other keys are independent.
        guard case .granted = t.acquire(id("other")) else { return XCTFail("another key has its own lease") }
        // Released: the next caller gets a new token.
        XCTAssertTrue(t.release(id("k"), token: first))
        XCTAssertFalse(t.release(id("k"), token: first), "a token releases once")
        guard case .granted(let second) = t.acquire(id("k")) else { return XCTFail("free again after release") }
        XCTAssertNotEqual(second, first)
        // A holder that dies: after the timeout the lease goes to the next caller, and the old
        // token no longer holds anything.
        clock.advance(seconds: 9.9)
        if case .granted = t.acquire(id("k")) { XCTFail("still held before the timeout") }
        clock.advance(seconds: 0.2)
        XCTAssertFalse(t.holds(id("k"), token: second))
        guard case .granted(let third) = t.acquire(id("k")) else { return XCTFail("granted after the timeout") }
        XCTAssertFalse(t.release(id("k"), token: second))
        XCTAssertTrue(t.holds(id("k"), token: third))
    }

    func testRevokeDropsTheLease() {
        let t = LeaseTable(timeout: 10, clock: ManualClock())
        guard case .granted(let token) = t.acquire(id("k")) else { return XCTFail() }
        t.revoke(id("k"))
        XCTAssertFalse(t.holds(id("k"), token: token))
        XCTAssertEqual(t.count, 0)
    }

    func testTheTableIsBoundedAndSweepsExpiredLeasesWhenFull() {
        let clock = ManualClock()
        let t = LeaseTable(timeout: 1, capacity: 3, clock: clock)
        for i in 0..<3 { guard case .granted = t.acquire(id("k\(i)")) else { return XCTFail() } }
        XCTAssertEqual(t.acquire(id("k3")), .full, "no fourth lease while three are live")
        clock.advance(seconds: 2)
        guard case .granted = t.acquire(id("k3")) else { return XCTFail("expired leases make room") }
        XCTAssertEqual(t.count, 1)
    }
}
