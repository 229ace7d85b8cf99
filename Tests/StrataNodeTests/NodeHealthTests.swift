import XCTest
import StrataCore
import TestSupport
@testable import StrataClient

/// A node's health in the cluster client (mcrouter's TKO) with an injected clock: dead after 3
/// consecutive failures, probed again after 1 s, then 2 s, 4 s … up to 30 s — no sleeping.
final class NodeHealthTests: XCTestCase {
    /// A port on 127.0.0.1 where nothing listens: every connect is refused at once.
    func closedPort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return UInt16(bigEndian: addr.sin_port) // bound, never listening: connects are refused
    }

    func testDeadAfterThreeFailuresThenProbedWithDoublingBackoff() throws {
        let clock = ManualClock(micros: 1_000_000_000)
        let h = NodeHandle(address: NodeAddress(host: "127.0.0.1", port: try closedPort()), timeout: 1, token: nil, clock: clock)
        func attempt() -> String {
            do { _ = try h.run { _ in 0 }; return "ok" } catch let e as ClientError { return e.message } catch { return "\(error)" }
        }
        for i in 0..<3 {
            XCTAssertFalse(h.isDead, "alive before failure \(i + 1)")
            XCTAssertFalse(attempt().contains("marked dead"), "a real connect is tried")
        }
        XCTAssertTrue(h.isDead, "dead after 3 consecutive failures")
        XCTAssertTrue(attempt().contains("marked dead"), "a dead node fails fast, without connecting")
        var backoff = 1.0
        for _ in 0..<7 {
            clock.advance(seconds: backoff - 0.01)
            XCTAssertTrue(h.isDead, "still dead just before the \(backoff) s probe")
            clock.advance(seconds: 0.02)
            XCTAssertFalse(h.isDead, "probed after \(backoff) s")
            XCTAssertFalse(attempt().contains("marked dead"), "the probe connects for real")
            XCTAssertTrue(h.isDead, "a failed probe marks it dead again")
            backoff = min(30, backoff * 2)
        }
        XCTAssertEqual(backoff, 30, "the backoff stops doubling at 30 s")
    }

    /// A request that failed only after its whole timeout (a paused node) makes the next ones
    /// fail fast for one timeout, without connecting; a quick failure does not; a success ends
    /// it. (A fresh CLI's increment with a paused replica waited three timeouts before.)
    func testAFailureAfterTheWholeTimeoutMakesTheNextRequestsFailFastForOneTimeout() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let clock = ManualClock(micros: 1_000_000_000)
        let h = NodeHandle(address: NodeAddress(host: "127.0.0.1", port: node.port), timeout: 1, token: nil, clock: clock, helloInterval: 0)
        func attempt(_ body: (NodeConnection) throws -> Int = { _ in 0 }) -> String {
            do { _ = try h.run(body); return "ok" } catch let e as ClientError { return e.message } catch { return "\(error)" }
        }
        XCTAssertEqual(attempt(), "ok")
        XCTAssertEqual(attempt { _ in throw ClientError(.connection, "cut at once") }, "cut at once")
        XCTAssertEqual(attempt(), "ok", "a quick failure: the next request is tried")
        XCTAssertEqual(attempt { _ in clock.advance(seconds: 1); throw ClientError(.connection, "no answer") }, "no answer")
        XCTAssertTrue(attempt().contains("did not answer within 1.0 s just now"), "fails fast for one timeout")
        clock.advance(seconds: 0.9)
        XCTAssertTrue(attempt().contains("did not answer"))
        clock.advance(seconds: 0.2)
        XCTAssertEqual(attempt(), "ok", "tried again after one timeout")
        XCTAssertFalse(h.isDead)
    }
}
