import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataWire

/// A plain blocking TCP socket for the text protocol (receive timeout set).
final class TextSocket {
    let fd: Int32
    private var buffered: [UInt8] = []

    init(port: UInt16, timeout: Double = 5) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let r = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard r == 0 else { close(fd); throw NSError(domain: "TextSocket", code: Int(errno)) }
        var tv = timeval(tv_sec: Int(timeout), tv_usec: Int(timeout.truncatingRemainder(dividingBy: 1) * 1e6))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    func send(_ s: String) { send(Array(s.utf8)) }
    func send(_ b: [UInt8]) {
        var at = 0
        while at < b.count {
            let n = b.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + at, b.count - at, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            at += n
        }
    }

    /// Reads until the buffered bytes end with `suffix` (or the peer closes / times out).
    func read(until suffix: String) -> String {
        let want = Array(suffix.utf8)
        while !(buffered.count >= want.count && Array(buffered.suffix(want.count)) == want) {
            guard fill() else { break }
        }
        defer { buffered = [] }
        return String(decoding: buffered, as: UTF8.self)
    }

    func readBytes(until suffix: String) -> [UInt8] {
        let want = Array(suffix.utf8)
        while !(buffered.count >= want.count && Array(buffered.suffix(want.count)) == want) {
            guard fill() else { break }
        }
        defer { buffered = [] }
        return buffered
    }

    /// Everything until the peer closes (or the receive timeout).
    func readAll() -> String {
        while fill() {}
        defer { buffered = [] }
        return String(decoding: buffered, as: UTF8.self)
    }

    /// One line, without its CRLF.
    func line() -> String {
        while !buffered.contains(10) { guard fill() else { break } }
        guard let nl = buffered.firstIndex(of: 10) else { defer { buffered = [] }; return String(decoding: buffered, as: UTF8.self) }
        let l = Array(buffered[..<nl])
        buffered.removeFirst(nl + 1)
        return String(decoding: l.last == 13 ? l.dropLast() : l[...], as: UTF8.self)
    }

    private func fill() -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, 65536, 0) }
        if n <= 0 { return false }
        buffered += chunk[0..<n]
        return true
    }

    /// True when the peer closes within `seconds` (reading and dropping anything it sends).
    func peerCloses(within seconds: Double) -> Bool {
        let deadline = monotonicSeconds() + seconds
        var chunk = [UInt8](repeating: 0, count: 65536)
        while monotonicSeconds() < deadline {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, 65536, 0) }
            if n == 0 { return true }
            if n < 0 && errno != EAGAIN && errno != EWOULDBLOCK { return true }
        }
        return false
    }
}

/// The memcached listener end to end, over real sockets against a real node.
final class MemcachedNodeTests: XCTestCase {
    /// Keep the returned node alive for the test: its deinit stops the process.
    func startNode(_ dir: TempDir, _ extra: [String] = []) throws -> (NodeProcess, UInt16) {
        let node = try NodeProcess(dataDir: dir.path + "/data", extra: ["--memcached-port", "0"] + extra)
        return (node, try XCTUnwrap(node.memcachedPort, "no 'memcached on' line"))
    }

    func testAKeySetThroughOneProtocolReadsThroughTheOther() throws {
        let dir = TempDir()
        let (node, port) = try startNode(dir)
        defer { node.terminate() }
        let mc = try TextSocket(port: port)
        let c = try node.connect()
        mc.send("set fromtext 3735928559 0 5\r\nhello\r\n")
        XCTAssertEqual(mc.line(), "STORED")
        let item = try XCTUnwrap(c.get(b("fromtext")))
        XCTAssertEqual(item.value, b("hello"))
        XCTAssertEqual(item.flags, 3735928559)
        mc.send("gets fromtext\r\n")
        XCTAssertEqual(mc.read(until: "END\r\n"), "VALUE fromtext 3735928559 5 \(item.version)\r\nhello\r\nEND\r\n")
        // The binary side's version is the CAS unique: a cas with it stores.
        var s = SetRequest(key: b("frombinary"), value: [0, 1, 2, 13, 10, 255])
        s.flags = 7
        _ = try c.set(s)
        let v = try XCTUnwrap(c.get(b("frombinary"))).version
        mc.send("gets frombinary\r\n")
        XCTAssertEqual(mc.line(), "VALUE frombinary 7 6 \(v)")
        XCTAssertEqual(mc.readBytes(until: "END\r\n"), [0, 1, 2, 13, 10, 255] + b("\r\nEND\r\n"))
        mc.send("cas frombinary 9 0 1 \(v)\r\nx\r\ncas frombinary 9 0 1 \(v)\r\ny\r\n")
        XCTAssertEqual(mc.line(), "STORED")
        XCTAssertEqual(mc.line(), "EXISTS")
        XCTAssertEqual(try c.get(b("frombinary"))?.value, b("x"))
        // A namespace of its own keeps memcached keys apart.
        let dir2 = TempDir()
        let (node2, port2) = try startNode(dir2, ["--memcached-namespace", "mc", "--memcached-memory-only"])
        let mc2 = try TextSocket(port: port2)
        mc2.send("set k 0 0 1\r\nv\r\n")
        XCTAssertEqual(mc2.line(), "STORED")
        let c2 = try node2.connect()
        XCTAssertNil(try c2.get(b("k")))
        XCTAssertEqual(try c2.get(b("k"), namespace: b("mc"))?.value, b("v"))
    }

    /// Gets answered from the memory tier in place (both listener kinds): hits in the order
    /// asked, misses and expired keys left out, nothing after flush_all, counters exact.
    func testGetsFromMemoryAnswerHitsInOrderAndCountEveryMiss() throws {
        for extra in [["--memcached-memory-only"], []] {
            let dir = TempDir()
            let (node, port) = try startNode(dir, extra)
            defer { node.terminate() }
            let mc = try TextSocket(port: port)
            mc.send("set a 1 0 2\r\naa\r\nset b 2 0 3\r\nbbb\r\nset gone 0 -1 1\r\nx\r\n")
            XCTAssertEqual([mc.line(), mc.line(), mc.line()], ["STORED", "STORED", "STORED"], "\(extra)")
            mc.send("get b nope a gone\r\n")
            XCTAssertEqual(mc.read(until: "END\r\n"), "VALUE b 2 3\r\nbbb\r\nVALUE a 1 2\r\naa\r\nEND\r\n", "\(extra)")
            mc.send("get a\r\nget a b\r\n")
            XCTAssertEqual(mc.read(until: "END\r\nVALUE a 1 2\r\naa\r\nVALUE b 2 3\r\nbbb\r\nEND\r\n"),
                           "VALUE a 1 2\r\naa\r\nEND\r\nVALUE a 1 2\r\naa\r\nVALUE b 2 3\r\nbbb\r\nEND\r\n", "\(extra)")
            let version = try XCTUnwrap(try node.connect().get(b("a"))).version
            mc.send("gets a\r\n")
            XCTAssertEqual(mc.read(until: "END\r\n"), "VALUE a 1 2 \(version)\r\naa\r\nEND\r\n", "\(extra)")
            // Single-key lines (answered in place from the input when they hit) pipelined with
            // misses, an expired key, a bare LF and a multi-key line: answers stay in order.
            let versionB = try XCTUnwrap(try node.connect().get(b("b"))).version
            mc.send("get a\nget nope\r\nget gone\r\ngets b\r\nget b a\r\n")
            let answers = "VALUE a 1 2\r\naa\r\nEND\r\nEND\r\nEND\r\nVALUE b 2 3 \(versionB)\r\nbbb\r\nEND\r\n"
                + "VALUE b 2 3\r\nbbb\r\nVALUE a 1 2\r\naa\r\nEND\r\n"
            XCTAssertEqual(mc.read(until: answers), answers, "\(extra)")
            mc.send("stats\r\n")
            let stats = mc.read(until: "END\r\n")
            // Hits: b, a (first get); a; a, b; a (gets); a; b (gets); b, a. Misses: nope, gone, twice.
            XCTAssertTrue(stats.contains("STAT get_hits 10\r\n"), "\(extra): \(stats)")
            XCTAssertTrue(stats.contains("STAT get_misses 4\r\n"), "\(extra): \(stats)")
            XCTAssertTrue(stats.contains("STAT cmd_get 14\r\n"), "\(extra): \(stats)")
            mc.send("flush_all\r\n")
            XCTAssertEqual(mc.line(), "OK")
            mc.send("get a b\r\n")
            XCTAssertEqual(mc.read(until: "END\r\n"), "END\r\n", "\(extra)")
        }
    }

    /// A multi-key get whose later key misses memory: the whole get goes the full way (its
    /// answer is bounded whole), each key counted once in the store's counters — the memory
    /// probe that found the leading keys counts nothing.
    func testAPartlyMissingMultiGetCountsEveryKeyOnce() throws {
        for extra in [["--memcached-memory-only"], []] {
            let dir = TempDir()
            let (node, port) = try startNode(dir, extra)
            defer { node.terminate() }
            let mc = try TextSocket(port: port)
            mc.send("set a 1 0 2\r\naa\r\nset b 2 0 3\r\nbbb\r\n")
            XCTAssertEqual([mc.line(), mc.line()], ["STORED", "STORED"], "\(extra)")
            let c = try node.connect()
            let version = try XCTUnwrap(try c.get(b("a"))).version
            let before = try nodeStats(c)
            mc.send("get a b nope\r\ngets nope a\r\n")
            let want = "VALUE a 1 2\r\naa\r\nVALUE b 2 3\r\nbbb\r\nEND\r\nVALUE a 1 2 \(version)\r\naa\r\nEND\r\n"
            XCTAssertEqual(mc.read(until: want), want, "\(extra)")
            let after = try nodeStats(c)
            func grew(_ k: String) -> Int { (after[k] as? Int ?? 0) - (before[k] as? Int ?? 0) }
            XCTAssertEqual(grew("memory_hits"), 3, "\(extra): a, b, then a (the binary get of a came before)")
            XCTAssertEqual(grew("memory_misses"), 2, "\(extra): nope twice")
            mc.send("stats\r\n")
            let stats = mc.read(until: "END\r\n")
            XCTAssertTrue(stats.contains("STAT get_hits 3\r\n") && stats.contains("STAT get_misses 2\r\n")
                          && stats.contains("STAT cmd_get 5\r\n"), "\(extra): \(stats)")
        }
    }

    func testLeasesAreSharedAcrossProtocols() throws {
        let dir = TempDir()
        let (node, port) = try startNode(dir)
        defer { node.terminate() }
        let mc = try TextSocket(port: port)
        let c = try node.connect()
        // A binary client's lease: the meta client is told someone is filling (Z)…
        let r1 = try c.call(.get(GetRequest(key: b("lk"), lease: true)))
        guard case .granted(let token) = Responses.leaseState(r1) else { return XCTFail("no lease granted") }
        mc.send("mg lk N30 v\r\n")
        XCTAssertEqual(mc.read(until: "\r\n\r\n"), "VA 0 Z\r\n\r\n")
        // …and a memcached write revokes it: the binary fill loaded before it must not land.
        mc.send("set lk 0 0 3\r\nnew\r\n")
        XCTAssertEqual(mc.line(), "STORED")
        var fill = SetRequest(key: b("lk"), value: b("old"))
        fill.mode = .lease
        fill.casVersion = token
        XCTAssertEqual(try c.set(fill).statusCode, .leaseLost)
        XCTAssertEqual(try c.get(b("lk"))?.value, b("new"))
        // The meta client wins a miss (W); a binary lease GET then waits for it (FILLING).
        mc.send("mg lk2 N30\r\n")
        XCTAssertEqual(mc.line(), "HD W")
        XCTAssertEqual(Responses.leaseState(try c.call(.get(GetRequest(key: b("lk2"), lease: true)))), .filling)
        // An invalidated item is served stale (X) and one client wins its refill.
        mc.send("md lk I\r\nmg lk v\r\n")
        XCTAssertEqual(mc.line(), "HD")
        XCTAssertEqual(mc.line(), "VA 3 W X")
        XCTAssertEqual(mc.line(), "new")
        mc.send("mg lk v\r\n")
        XCTAssertEqual(mc.line(), "VA 3 Z X")
    }

    func testAnOverLongLineIsAnsweredAndCloses() throws {
        let dir = TempDir()
        let (node, port) = try startNode(dir)
        defer { node.terminate() }
        let mc = try TextSocket(port: port)
        mc.send("set " + String(repeating: "k", count: 5000))
        XCTAssertEqual(mc.line(), "CLIENT_ERROR line too long")
        XCTAssertTrue(mc.peerCloses(within: 5))
    }

    func testADataBlockLongerThanDeclaredIsABadDataChunkAndNothingIsStored() throws {
        let dir = TempDir()
        let (node, port) = try startNode(dir)
        defer { node.terminate() }
        let mc = try TextSocket(port: port)
        mc.send("set k 0 0 3\r\nabcdef\r\nget k\r\n")
        XCTAssertEqual(mc.line(), "CLIENT_ERROR bad data chunk")
        XCTAssertEqual(mc.line(), "ERROR") // the rest of the block, "ef", read as a command
        XCTAssertEqual(mc.line(), "END")
    }

    func testAValueOverTheMaxItemIsRefusedFromItsLengthAndTheConnectionGoesOn() throws {
        let dir = TempDir()
        let (node, port) = try startNode(dir, ["--max-item", "1KiB"])
        defer { node.terminate() }
        let mc = try TextSocket(port: port)
        mc.send("set big 0 0 2000\r\n")
        XCTAssertEqual(mc.line(), "SERVER_ERROR object too large for cache")
        mc.send([UInt8](repeating: 0x61, count: 2000) + [13, 10] + Array("version\r\n".utf8))
        XCTAssertTrue(mc.line().hasPrefix("VERSION 1.6"))
        // An absurd length is refused the same way, before anything is allocated.
        mc.send("set big 0 0 9223372036854775807\r\n")
        XCTAssertEqual(mc.line(), "SERVER_ERROR object too large for cache")
        XCTAssertTrue(node.process.isRunning)
    }

    func testAbsurdLengthsAndNoNewlineNeverCrashTheNode() throws {
        let dir = TempDir()
        let (node, port) = try startNode(dir)
        defer { node.terminate() }
        for attack in ["set k 0 0 99999999999999999999\r\n", "set k 0 0 -9223372036854775808\r\n", "set k 4294967296 0 1\r\n",
                       "get " + String(repeating: "k ", count: 40_000), "cas k 0 0 1 -1\r\n", "incr k -1\r\n", "touch k x\r\n"] {
            let mc = try TextSocket(port: port, timeout: 2)
            mc.send(attack)
            XCTAssertTrue(mc.line().contains("ERROR"), attack.prefix(40) + "")
        }
        let mc = try TextSocket(port: port)
        mc.send("version\r\n")
        XCTAssertTrue(mc.line().hasPrefix("VERSION"))
        XCTAssertTrue(node.process.isRunning)
    }

    func testAClientThatDoesNotReadItsAnswersIsCutOffAtTheOutputCap() throws {
        let dir = TempDir()
        let (node, port) = try startNode(dir, ["--output-cap", "1MiB", "--max-item", "768KiB", "--memcached-memory-only"])
        defer { node.terminate() }
        let writer = try TextSocket(port: port)
        writer.send("set big 0 0 524288\r\n" + String(repeating: "v", count: 524_288) + "\r\n")
        XCTAssertEqual(writer.line(), "STORED")
        let hog = try TextSocket(port: port, timeout: 1)
        var small: Int32 = 4096
        setsockopt(hog.fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        hog.send(String(repeating: "get big\r\n", count: 64)) // 32 MiB of answers, never read
        let c = try node.connect()
        XCTAssertTrue(eventually(10) { ((try? nodeStats(c))?["output_cap_cutoffs"] as? Int ?? 0) >= 1 })
        writer.send("version\r\n")
        XCTAssertTrue(writer.line().hasPrefix("VERSION"))
    }

    func testACommandThatStopsArrivingIsClosedByTheFrameTimeout() throws {
        let dir = TempDir()
        let (node, port) = try startNode(dir, ["--frame-timeout", "1"])
        defer { node.terminate() }
        let slow = try TextSocket(port: port, timeout: 1)
        slow.send("set k 0 0 10\r\nabc")
        let started = monotonicSeconds()
        XCTAssertTrue(slow.peerCloses(within: 5))
        XCTAssertLessThan(monotonicSeconds() - started, 4)
        let again = try TextSocket(port: port)
        again.send("version\r\n")
        XCTAssertTrue(again.line().hasPrefix("VERSION"))
    }

    func testWithATokenTheFirstCommandMustBeTheAuthenticationSet() throws {
        let dir = TempDir()
        try "s3cret\n".write(toFile: dir.path + "/token", atomically: true, encoding: .utf8)
        let (node, port) = try startNode(dir, ["--auth-token-file", dir.path + "/token"])
        defer { node.terminate() }
        let mc = try TextSocket(port: port)
        mc.send("get k\r\nversion\r\n")
        XCTAssertEqual(mc.line(), "CLIENT_ERROR unauthenticated")
        XCTAssertEqual(mc.line(), "CLIENT_ERROR unauthenticated")
        mc.send("set auth 0 0 11\r\nuser s3cret\r\nset k 0 0 1\r\nv\r\nget k\r\n")
        XCTAssertEqual(mc.line(), "STORED")
        XCTAssertEqual(mc.line(), "STORED")
        XCTAssertEqual(mc.read(until: "END\r\n"), "VALUE k 0 1\r\nv\r\nEND\r\n")
        let wrong = try TextSocket(port: port)
        wrong.send("set auth 0 0 10\r\nuser wrong\r\n")
        XCTAssertEqual(wrong.line(), "CLIENT_ERROR authentication failure")
        XCTAssertTrue(wrong.peerCloses(within: 5))
    }

    func testListenerCountersShowInStatsAndMetrics() throws {
        let dir = TempDir()
        let (node, port) = try startNode(dir, ["--metrics-port", "0"])
        let mc = try TextSocket(port: port)
        mc.send("get a\r\nget b\r\nbogus\r\nincr a x\r\n")
        XCTAssertEqual(mc.read(until: "argument\r\n"), "END\r\nEND\r\nERROR\r\nCLIENT_ERROR invalid numeric delta argument\r\n")
        mc.send("stats\r\n")
        let stats = mc.read(until: "END\r\n")
        XCTAssertTrue(stats.contains("STAT get_misses 2\r\n"), stats)
        XCTAssertTrue(stats.contains("STAT curr_connections 1\r\n"), stats)
        XCTAssertTrue(stats.contains("STAT version 1.6.21-strata-"), stats)
        // ms counts as a storage command and mg as a lookup, as memcached counts them.
        mc.send("set a 0 0 1\r\n1\r\nms b 1\r\n2\r\nmg b v\r\nmg\r\nstats\r\n")
        let after = mc.read(until: "END\r\n")
        XCTAssertTrue(after.hasPrefix("STORED\r\nHD\r\nVA 1\r\n2\r\nERROR\r\n"), after)
        XCTAssertTrue(after.contains("STAT cmd_set 2\r\n"), after)
        XCTAssertTrue(after.contains("STAT cmd_get 3\r\n"), after)
        for name in ["pid", "uptime", "time", "curr_items", "total_items", "bytes", "get_hits", "cmd_get", "cmd_set", "cmd_flush",
                     "cmd_touch", "total_connections", "evictions", "limit_maxbytes", "threads"] {
            XCTAssertTrue(stats.contains("STAT \(name) "), name)
        }
        let json = try nodeStats(try node.connect())
        XCTAssertEqual(json["memcached_cmd_get"] as? Int, 2)
        XCTAssertEqual(json["memcached_errors_unknown_command"] as? Int, 2, "bogus, and mg without a key")
        XCTAssertEqual(json["memcached_errors_client"] as? Int, 1)
        let mp = try XCTUnwrap(node.metricsPort)
        let http = try TextSocket(port: mp)
        http.send("GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        let metrics = http.readAll()
        XCTAssertTrue(metrics.contains("strata_memcached_commands_total{cmd=\"get\"} 2"), metrics)
        XCTAssertTrue(metrics.contains("strata_memcached_errors_total{kind=\"unknown_command\"} 2"))
    }
}

/// A node with a memcached listener on a free port, and a text socket to it.
func startMemcachedNode(_ dir: TempDir, _ extra: [String] = []) throws -> (NodeProcess, TextSocket) {
    let node = try NodeProcess(dataDir: dir.path + "/data", extra: ["--memcached-port", "0"] + extra)
    return (node, try TextSocket(port: try XCTUnwrap(node.memcachedPort)))
}

/// The CAS (version) `mg <key> c` reports.
func metaCAS(_ mc: TextSocket, _ key: String) throws -> UInt64 {
    mc.send("mg \(key) c\r\n")
    let line = mc.line()
    return try XCTUnwrap(line.split(separator: " ").first { $0.hasPrefix("c") }.flatMap { UInt64($0.dropFirst()) }, line)
}
