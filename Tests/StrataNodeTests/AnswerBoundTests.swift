import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataWire

/// Answers that many keys make large (an outside attacker's review): a memcached `get` naming
/// one value many times, a binary MGET of one large key 1,024 times, a SCAN of long keys. Each
/// stays within the frame limit (`--max-item` + 64 KiB) and holds no more than that in memory.
final class AnswerBoundTests: XCTestCase {
    func testAMemcachedGetOverTheFrameLimitIsAnErrorAndOneUnderItIsWhole() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path + "/data", extra: ["--memcached-port", "0", "--max-item", "1MiB"])
        defer { node.terminate() }
        let mc = try TextSocket(port: try XCTUnwrap(node.memcachedPort), timeout: 20)
        let value = String(repeating: "x", count: 100_000)
        mc.send("set b 0 0 \(value.count)\r\n\(value)\r\n")
        XCTAssertEqual(mc.line(), "STORED")
        // 10 × 100 KB fits in 1 MiB + 64 KiB; 20 × does not. Both from memory, then from disk
        // (memory-only listeners and the worker path build the answer the same way).
        for _ in 0..<2 {
            mc.send("get" + String(repeating: " b", count: 10) + "\r\n")
            let whole = mc.read(until: "END\r\n")
            XCTAssertEqual(whole.components(separatedBy: "VALUE b 0 100000\r\n").count - 1, 10)
            mc.send("get" + String(repeating: " b", count: 2000) + "\r\n")
            let refused = mc.line()
            XCTAssertTrue(refused.hasPrefix("SERVER_ERROR the answer would be over 1114112 bytes"), refused)
            mc.send("gets b\r\n")
            XCTAssertTrue(mc.read(until: "END\r\n").hasPrefix("VALUE b 0 100000 "), "the connection goes on")
            let c = try node.connect()
            XCTAssertEqual(try c.call(.ping).statusCode, .ok)
            // The second round reads from disk: the memory copy goes.
            XCTAssertEqual(try c.call(.delete(namespace: [], key: b("b"), tiers: 1, version: 0, writeBehind: false)).statusCode, .ok)
        }
    }

    /// An answer whose values come from memory and disk together is bounded whole (an outside
    /// review saw 1.2 MB sent over a 1.1 MB bound when each part was under it).
    func testAMemcachedGetSplitBetweenMemoryAndDiskIsBoundedWhole() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path + "/data", extra: ["--memcached-port", "0", "--max-item", "1MiB"])
        defer { node.terminate() }
        let c = try node.connect()
        var inMemory = SetRequest(key: b("c"), value: [UInt8](repeating: 0x63, count: 600_000)); inMemory.tiers = 3
        var onDisk = SetRequest(key: b("d"), value: [UInt8](repeating: 0x64, count: 600_000)); onDisk.tiers = 2
        XCTAssertEqual(try c.set(inMemory).statusCode, .ok)
        XCTAssertEqual(try c.set(onDisk).statusCode, .ok)
        let mc = try TextSocket(port: try XCTUnwrap(node.memcachedPort), timeout: 20)
        for line in ["get c d\r\n", "get d c\r\n", "gets c d\r\n"] {
            mc.send(line)
            let answer = mc.line()
            XCTAssertTrue(answer.hasPrefix("SERVER_ERROR the answer would be over 1114112 bytes"), "\(line): \(answer.prefix(80))")
        }
        mc.send("get c\r\n")
        XCTAssertEqual(mc.line(), "VALUE c 0 600000")
        XCTAssertEqual(mc.line().count, 600_000)
        XCTAssertEqual(mc.line(), "END")
    }

    func testAnMGetOfOneLargeValueManyTimesStopsReadingAtTheLimit() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path, extra: ["--max-item", "1MiB"])
        defer { node.terminate() }
        let c = try node.connect()
        XCTAssertEqual(try c.set(SetRequest(key: b("big"), value: [UInt8](repeating: 7, count: 1 << 20))).statusCode, .ok)
        let pid = node.process.processIdentifier
        let before = MemoryBoundTests.procStatus(pid, "VmHWM")
        let f = try c.call(.mget(namespace: [], keys: Array(repeating: b("big"), count: 1024), tiers: 0))
        XCTAssertEqual(f.statusCode, .tooLarge)
        XCTAssertTrue(String(decoding: f.value, as: UTF8.self).contains("frame limit"), String(decoding: f.value, as: UTF8.self))
        let after = MemoryBoundTests.procStatus(pid, "VmHWM")
        // The old code read all 1,024 copies first: the peak grew by about 1 GiB.
        XCTAssertLessThan(after - before, 64 << 20, "peak RSS grew by \(after - before) bytes")
        let fits = try c.call(.mget(namespace: [], keys: [b("big"), b("none")], tiers: 0))
        XCTAssertEqual(fits.statusCode, .ok)
    }

    func testAScanPageEndsAtTheFrameLimitAndTheCursorGoesOn() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path, extra: ["--max-item", "64KiB"])
        defer { node.terminate() }
        let c = try node.connect()
        let keys = (0..<300).map { String(format: "%04d", $0) + String(repeating: "k", count: 996) }
        for k in keys { XCTAssertEqual(try c.set(SetRequest(key: b(k), value: b("v"))).statusCode, .ok) }
        var seen: [String] = []
        var cursor: [UInt8] = []
        var pages = 0
        repeat {
            let f = try c.call(.scan(namespace: [], cursor: cursor, limit: 10_000))
            XCTAssertEqual(f.statusCode, .ok)
            XCTAssertLessThanOrEqual(f.encodedSize, (64 << 10) + (64 << 10), "a page within the frame limit")
            var v = f.value[...]
            while v.count >= 2 {
                let n = Int(v[v.startIndex]) << 8 | Int(v[v.startIndex + 1])
                seen.append(String(decoding: v.dropFirst(2).prefix(n), as: UTF8.self))
                v = v.dropFirst(2 + n)
            }
            cursor = f.key
            pages += 1
        } while !cursor.isEmpty && pages < 100
        XCTAssertGreaterThan(pages, 2, "300 KB of keys take several 128 KiB pages")
        XCTAssertEqual(seen, keys, "every key once, in order")
    }
}
