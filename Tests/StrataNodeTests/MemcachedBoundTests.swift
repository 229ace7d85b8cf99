import Foundation
import XCTest
import StrataClient
import StrataCore
import TestSupport
import StrataWire

/// The memcached listener under the binary listener's output rules (one OutputQueue and
/// OutputBudget for both): `--max-output-bytes` holds clients that do not read, and a stuck
/// one is cut off after 1 s without progress while the node is over it.
final class MemcachedBoundTests: XCTestCase {
    /// The binary `testNeverReadingConnectionsStayWithinTheOutputBound`, through memcached:
    /// 12 connections each send 40 `get` of a 1 MiB value and never read (480 MiB of answers,
    /// under their `--output-cap`). Unsent output stays near the 8 MiB bound (and anonymous
    /// memory with it), the bound holds commands back, a new client is answered and the stuck
    /// connections are cut off. (Before the memcached connection used OutputQueue its output
    /// was outside the bound: all 240 MiB were buffered, nothing was held.)
    func testNeverReadingMemcachedClientsAreHeldByTheNodeWideOutputBound() throws {
        let dir = TempDir()
        let bound = 8 << 20
        let node = try NodeProcess(dataDir: dir.path + "/data", extra: ["--memcached-port", "0", "--max-output-bytes", "8MiB"])
        defer { node.terminate() }
        let port = try XCTUnwrap(node.memcachedPort)
        let pid = node.process.processIdentifier
        let size = 1 << 20
        let writer = try TextSocket(port: port)
        writer.send(Array("set big 0 0 \(size)\r\n".utf8) + MemoryBoundTests.noise(size, seed: 7) + Array("\r\n".utf8))
        XCTAssertEqual(writer.line(), "STORED")
        writer.send("get big\r\n")
        XCTAssertEqual(writer.readBytes(until: "END\r\n").count, size + "VALUE big 0 \(size)\r\n\r\nEND\r\n".utf8.count)
        let baseline = MemoryBoundTests.procStatus(pid, "RssAnon")
        var stuck: [TextSocket] = []
        // 12: each connection stops at its share (1/16 of the bound, at least 1 MiB), so it
        // takes more than 8 of them to pass the node-wide bound.
        for _ in 0..<12 {
            let s = try TextSocket(port: port, timeout: 1)
            var small: Int32 = 4096
            setsockopt(s.fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
            s.send(String(repeating: "get big\r\n", count: 40))
            stuck.append(s)
        }
        let watch = try node.connect()
        var worstAnon = 0
        var worstOutput = 0
        let until = monotonicSeconds() + 2
        while monotonicSeconds() < until {
            worstAnon = max(worstAnon, MemoryBoundTests.procStatus(pid, "RssAnon"))
            worstOutput = max(worstOutput, try nodeStats(watch)["output_bytes"] as? Int ?? 0)
            usleep(50_000)
        }
        // A new memcached client is served meanwhile.
        let fresh = try TextSocket(port: port, timeout: 10)
        fresh.send("version\r\n")
        XCTAssertTrue(fresh.line().hasPrefix("VERSION"))
        let stats = try nodeStats(watch)
        XCTAssertGreaterThan(stats["output_held_requests"] as? Int ?? 0, 0, "the bound held commands back")
        // The bound + at most one value per connection that had nothing unsent when it was
        // crossed (and its header).
        let outputBound = bound + 12 * (size + 64)
        XCTAssertGreaterThan(worstOutput, 0, "memcached output is counted in output_bytes")
        XCTAssertLessThanOrEqual(stats["output_peak_bytes"] as? Int ?? .max, outputBound)
        XCTAssertLessThan(worstAnon - baseline, outputBound + 48 << 20, "anonymous memory grew by \((worstAnon - baseline) >> 20) MiB")
        // The stuck connections make no progress while the node is over its bound: cut off
        // after 1 s, then a new client's get of the value is answered.
        XCTAssertTrue(eventually(10) { ((try? nodeStats(watch))?["timeouts"] as? Int ?? 0) >= 1 })
        fresh.send("get big\r\n")
        XCTAssertEqual(fresh.readBytes(until: "END\r\n").count, size + "VALUE big 0 \(size)\r\n\r\nEND\r\n".utf8.count)
        withExtendedLifetime(stuck) {}
        reportFigure("memcached output bound", "12 memcached connections × 40 gets of a 1 MiB value, never reading, --max-output-bytes 8MiB: unsent output peaked at \((stats["output_peak_bytes"] as? Int ?? 0) >> 10) KiB (sampled max \(worstOutput >> 10) KiB), \(stats["output_held_requests"] ?? 0) commands held; anonymous memory +\((worstAnon - baseline) >> 20) MiB")
    }

    /// Past `--max-buffered-bytes` (a binary client holding half of a 3 MiB frame) the
    /// memcached listener answers `SERVER_ERROR busy` to everything that holds data — a `get`
    /// of a key in memory, a `set`, `mg` — as the binary listener answers BUSY, while
    /// `version`, `stats` and `mn` still run; once the bytes are gone it serves again.
    /// Outside review sec3 (the binary STATS; the same here): a client pipelining `stats`
    /// without reading gets no more answers built once 256 KiB of them wait unread.
    func testPipelinedStatsFromANeverReadingMemcachedClientAreHeld() throws {
        let node = try NodeProcess(dataDir: TempDir().path, extra: ["--memcached-port", "0"])
        let port = try XCTUnwrap(node.memcachedPort)
        nonisolated(unsafe) let flood = try TextSocket(port: port) // one thread uses it
        let burst = String(repeating: "stats\r\n", count: 50_000)
        Thread.detachNewThread { flood.send(burst) } // blocks once the node stops reading
        usleep(2_000_000)
        let admin = try node.connect()
        let built = try XCTUnwrap(nodeStats(admin)["memcached_cmd_stats"] as? Int)
        XCTAssertGreaterThan(built, 0)
        XCTAssertLessThan(built, 12_000, "held while its answers wait unread (\(built) built)")
        let other = try TextSocket(port: port)
        other.send("version\r\n")
        XCTAssertTrue(other.line().hasPrefix("VERSION "))
    }

    func testPastTheBufferedBytesBoundMemcachedCommandsAreBusy() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path + "/data", extra: ["--memcached-port", "0", "--max-buffered-bytes", "1MiB"])
        defer { node.terminate() }
        let mc = try TextSocket(port: try XCTUnwrap(node.memcachedPort), timeout: 10)
        mc.send("set k 0 0 1\r\nv\r\n")
        XCTAssertEqual(mc.line(), "STORED")
        let c = try node.connect()
        // Half of a 3 MiB SET: the node buffers it while it waits for the rest.
        let frame = Request.set(SetRequest(key: b("large"), value: [UInt8](repeating: 1, count: 3 << 20))).frame(id: 1).encoded()
        let holder = try node.connect()
        try holder.sendRaw(Array(frame[0..<(frame.count / 2)]))
        XCTAssertTrue(eventually(10, interval: 0.05) { ((try? nodeStats(c)["buffered_bytes"] as? Int) ?? 0) ?? 0 > 1 << 20 },
                      "the held frame is not counted")
        let busy = "SERVER_ERROR busy: the node is at its buffered-bytes limit; retry later"
        mc.send("get k\r\n")
        XCTAssertEqual(mc.line(), busy)
        mc.send("set z 0 0 1\r\nz\r\n")
        XCTAssertEqual(mc.line(), busy)
        mc.send("mg k v\r\n")
        XCTAssertEqual(mc.line(), busy)
        mc.send("version\r\nmn\r\n")
        XCTAssertTrue(mc.line().hasPrefix("VERSION "))
        XCTAssertEqual(mc.line(), "MN")
        XCTAssertEqual(try c.call(.get(GetRequest(key: b("k")))).statusCode, .busy, "the binary listener agrees")
        XCTAssertEqual(try c.call(.ping).statusCode, .ok)
        holder.close()
        XCTAssertTrue(eventually(10, interval: 0.05) { ((try? nodeStats(c)["buffered_bytes"] as? Int) ?? 0) ?? 0 < 1 << 20 })
        mc.send("get k z\r\n")
        XCTAssertEqual(mc.line(), "VALUE k 0 1")
        XCTAssertEqual(mc.line(), "v")
        XCTAssertEqual(mc.line(), "END", "the refused set stored nothing")
    }

    /// A write to the memory tier alone of an item the memory tier cannot hold (over 1/16 of
    /// `--memory-limit`) is refused — TOO_LARGE on the binary protocol, memcached's `SERVER_ERROR
    /// object too large for cache` on a memory-only listener (an outside review saw it
    /// acknowledged and lost). A `set` so refused removes the older copy, as memcached does (a
    /// later review: the value the client meant to replace was served on); a `replace` does not.
    func testAMemoryOnlyWriteTheMemoryTierCannotHoldIsRefused() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path + "/data", extra: ["--memcached-port", "0", "--memcached-memory-only", "--memory-limit", "1MiB"])
        defer { node.terminate() }
        let mc = try TextSocket(port: try XCTUnwrap(node.memcachedPort), timeout: 10)
        mc.send("set k 0 0 5\r\nsmall\r\n")
        XCTAssertEqual(mc.line(), "STORED")
        let big = String(repeating: "x", count: 100_000)
        mc.send("replace k 0 0 \(big.count)\r\n\(big)\r\n")
        XCTAssertEqual(mc.line(), "SERVER_ERROR object too large for cache")
        mc.send("get k\r\n")
        XCTAssertEqual(mc.line(), "VALUE k 0 5")
        XCTAssertEqual(mc.line(), "small")
        XCTAssertEqual(mc.line(), "END")
        mc.send("set k 0 0 \(big.count)\r\n\(big)\r\n")
        XCTAssertEqual(mc.line(), "SERVER_ERROR object too large for cache")
        mc.send("get k\r\n")
        XCTAssertEqual(mc.line(), "END", "the set failed: the value it meant to replace is gone")
        var s = SetRequest(key: b("m"), value: [UInt8](repeating: 1, count: 100_000)); s.tiers = 1
        let f = try node.connect().set(s)
        XCTAssertEqual(f.statusCode, .tooLarge, String(decoding: f.value, as: UTF8.self))
    }
}
