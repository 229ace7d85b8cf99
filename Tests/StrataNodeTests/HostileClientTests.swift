import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataWire

/// Issue 8 item 7 at its counts under `make soak` (smaller ones in `make test`): the connection
/// limit, many idle connections, slowloris, and a client that never reads. Timings are
/// reported (FIGURE lines), not asserted, except for generous sanity bounds.
final class HostileClientTests: XCTestCase {
    private func stats(_ c: NodeConnection) throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: Data(try c.stats().utf8)) as! [String: Any]
    }
    private func stats(_ node: NodeProcess) throws -> [String: Any] { try stats(try node.connect()) }

    private func pingP99(_ c: NodeConnection, count: Int = 300) throws -> Double {
        var lat: [Double] = []
        for _ in 0..<count {
            let t0 = monotonicSeconds()
            try c.ping()
            lat.append(monotonicSeconds() - t0)
        }
        lat.sort()
        return lat[Int(Double(lat.count - 1) * 0.99)]
    }

    func testOverTheConnectionLimitExactlyTheExtraConnectionsAreRefused() throws {
        let limit = soakCount(short: 100, long: 2_000)
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path, extra: ["--max-connections", String(limit)])
        let held = try (0..<limit).map { _ in try node.connect(timeout: 10) }
        for c in held { try c.ping() }
        var refused = 0
        for _ in 0..<76 {
            let extra = try node.connect(timeout: 10)
            if (try? extra.readFrame())?.statusCode == .tooManyConnections { refused += 1 }
            XCTAssertTrue(peerCloses(extra, within: 5))
        }
        XCTAssertEqual(refused, 76)
        for c in held { try c.ping() }
        for c in held.prefix(10) { c.close() }
        usleep(200_000)
        XCTAssertEqual(try stats(node)["connections_refused"] as? Int, 76, "each refusal counted")
        reportFigure("connection limit", "limit \(limit) held and served; \(refused) of 76 extra connections refused with TOO_MANY_CONNECTIONS and counted")
    }

    func testIdleConnectionsDoNotSlowANewClientAndAllCloseAtTheIdleTimeout() throws {
        let count = soakCount(short: 1_000, long: 10_000)
        let idleTimeout = 8.0
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path, extra: ["--idle-timeout", String(idleTimeout), "--max-connections", String(count + 100)])
        let probe = try node.connect()
        let baseline = try pingP99(probe)
        var idle: [NodeConnection] = []
        idle.reserveCapacity(count)
        for _ in 0..<count { idle.append(try node.connect(timeout: 10)) }
        let opened = monotonicSeconds()
        let fresh = try node.connect()
        let withIdle = try pingP99(fresh)
        XCTAssertLessThan(withIdle, 0.1, "a new client's PING p99 with \(count) idle connections")
        // Keep the probes busy so they are not idle; the idle ones must all go.
        var closedAfter: Double?
        while monotonicSeconds() - opened < idleTimeout + 10 {
            try fresh.ping()
            if let n = try stats(fresh)["connections_current"] as? Int, n <= 2 {
                closedAfter = monotonicSeconds() - opened
                break
            }
            usleep(250_000)
        }
        let within = try XCTUnwrap(closedAfter, "idle connections were not all closed")
        XCTAssertLessThan(within, idleTimeout + 3 + 1, "closed within the idle timeout + 3 s (from the last one's opening)")
        withExtendedLifetime(idle) {}
        reportFigure("idle connections", "\(count) idle: new client's PING p99 \(String(format: "%.2f", withIdle * 1000)) ms (\(String(format: "%.2f", baseline * 1000)) ms without them); all closed \(String(format: "%.1f", within)) s after the last opened (idle timeout \(Int(idleTimeout)) s)")
    }

    func testSlowlorisConnectionsAreAllClosedAtTheFrameTimeout() throws {
        let count = soakCount(short: 100, long: 1_000)
        let frameTimeout = 2.0
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path, extra: ["--frame-timeout", String(frameTimeout), "--max-connections", String(count + 100)])
        let conns = try (0..<count).map { _ in try node.connect(timeout: 10) }
        let header = Request.ping.frame(id: 1).encoded()
        let start = monotonicSeconds()
        var closedAfter: Double?
        // One byte a second on every connection, never a whole frame.
        for second in 0..<Int(frameTimeout) + 6 {
            for c in conns { try? c.sendRaw([header[second % header.count]]) }
            let s = try stats(node)
            if (s["connections_current"] as? Int ?? count) <= 1 {
                closedAfter = monotonicSeconds() - start
                break
            }
            usleep(1_000_000)
        }
        let within = try XCTUnwrap(closedAfter, "slowloris connections were not all closed")
        XCTAssertLessThan(within, frameTimeout + 3)
        XCTAssertGreaterThanOrEqual(try stats(node)["timeouts"] as? Int ?? 0, count)
        reportFigure("slowloris", "\(count) connections sending a byte a second: all closed \(String(format: "%.1f", within)) s after they started (frame timeout \(Int(frameTimeout)) s)")
    }

    func testAClientThatNeverReadsIsCutOffWhileOthersKeepTheirLatency() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path, extra: ["--output-cap", "4MiB"])
        let other = try node.connect()
        var s = SetRequest(key: b("big"), value: [UInt8](repeating: 7, count: 512 << 10)); s.tiers = 1
        XCTAssertEqual(try other.set(s).statusCode, .ok)
        _ = try other.set(SetRequest(key: b("small"), value: b("v")))
        func getP99() throws -> Double {
            var lat: [Double] = []
            for _ in 0..<300 {
                let t0 = monotonicSeconds()
                _ = try other.get(b("small"))
                lat.append(monotonicSeconds() - t0)
            }
            lat.sort()
            return lat[Int(Double(lat.count - 1) * 0.99)]
        }
        let baseline = try getP99()
        let greedy = try node.connect(timeout: 5)
        var batch: [UInt8] = []
        for i in 0..<200 { batch += Request.get(GetRequest(key: b("big"))).frame(id: UInt32(i + 1)).encoded() } // 100 MiB of answers
        try? greedy.sendRaw(batch)
        let during = try getP99()
        usleep(300_000)
        XCTAssertGreaterThanOrEqual(try stats(node)["output_cap_cutoffs"] as? Int ?? 0, 1)
        XCTAssertLessThan(during, max(0.05, baseline * 20), "other clients keep answering quickly")
        reportFigure("client that never reads", "cut off at the 4 MiB output cap; another client's GET p99 \(String(format: "%.3f", during * 1000)) ms during vs \(String(format: "%.3f", baseline * 1000)) ms before (\(String(format: "%.1f", during / baseline))×)")
    }

    /// Issue 8 item 9: with a token set, many wrong tokens never authenticate, and nothing but
    /// HELLO and PING is served before authentication.
    func testWrongTokensNeverAuthenticate() throws {
        let attempts = soakCount(short: 1_000, long: 10_000)
        let dir = TempDir()
        let tokenFile = dir.path + "/token"
        try "the-right-token\n".write(toFile: tokenFile, atomically: true, encoding: .utf8)
        let node = try NodeProcess(dataDir: dir.path + "/data", extra: ["--auth-token-file", tokenFile])
        var rng = SplitMix(seed: 3)
        var successes = 0, refused = 0
        for i in 0..<attempts {
            let c = try node.connect()
            // Wrong tokens of every length, including the right one's prefix and one byte off.
            var token = b("the-right-token")
            switch i % 3 {
            case 0: token = (0..<Int(rng.next() % 64)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            case 1: token.removeLast(1 + Int(rng.next() % 5))
            default: token[Int(rng.next() % UInt64(token.count))] ^= 1
            }
            let f = try c.call(.hello(minVersion: 1, maxVersion: 1, token: token))
            if f.statusCode == .ok { successes += 1 } else if f.statusCode == .authFailed { refused += 1 }
            c.close()
        }
        XCTAssertEqual(successes, 0)
        XCTAssertEqual(refused, attempts)
        // Before authentication only HELLO and PING are served.
        let anon = try node.connect()
        for r in [Request.get(GetRequest(key: b("k"))), .stats, .set(SetRequest(key: b("k"), value: b("v"))), .flush(namespace: [], all: true)] {
            XCTAssertEqual(try anon.call(r).statusCode, .authRequired)
        }
        try anon.ping()
        let stats = try JSONSerialization.jsonObject(with: Data(try node.connect(token: b("the-right-token")).stats().utf8)) as! [String: Any]
        XCTAssertEqual(stats["auth_failures"] as? Int, attempts)
        reportFigure("authentication", "\(attempts) wrong tokens: \(successes) successes, \(refused) AUTH_FAILED (counted); GET/STATS/SET/FLUSH before HELLO: AUTH_REQUIRED")
    }
}
