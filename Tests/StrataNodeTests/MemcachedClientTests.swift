import Foundation
import XCTest
import StrataCore
import StrataImage

/// Real memcached clients against a real node, installed by the tests themselves: pymemcache
/// from PyPI (into the project's .venv, or a venv of its own under .build) and Debian's
/// libmemcached-tools (memccapable). Each skips, saying why, when its client cannot be had.
final class MemcachedClientTests: XCTestCase {
    static let root = DeployFileTests.root

    /// A python3 that imports pymemcache: the Makefile's .venv, else `.build/mc-venv`, created
    /// and filled from PyPI on first use.
    static func pymemcachePython() throws -> String {
        let candidates = [root.appendingPathComponent(".venv/bin/python3").path,
                          root.appendingPathComponent(".build/mc-venv/bin/python3").path]
        for py in candidates where FileManager.default.isExecutableFile(atPath: py) {
            if (try? runProcess(py, ["-c", "import pymemcache"]))?.status == 0 { return py }
        }
        let venv = root.appendingPathComponent(".build/mc-venv").path
        guard let python = ["/usr/bin/python3", "/usr/local/bin/python3"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw XCTSkip("no python3 on this machine: cannot run pymemcache")
        }
        let made = try runProcess(python, ["-m", "venv", venv])
        guard made.status == 0 else { throw XCTSkip("python3 -m venv failed (python3-venv missing?): \(made.output.suffix(300))") }
        let pip = try runProcess(venv + "/bin/pip", ["install", "-q", "--disable-pip-version-check", "pymemcache"])
        guard pip.status == 0 else { throw XCTSkip("cannot install pymemcache (PyPI unreachable?): \(pip.output.suffix(300))") }
        return venv + "/bin/python3"
    }

    func runPymemcache(_ extra: [String]) throws {
        let python = try Self.pymemcachePython()
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path + "/data", extra: ["--memcached-port", "0"] + extra)
        defer { node.terminate() }
        let port = try XCTUnwrap(node.memcachedPort)
        let script = Self.root.appendingPathComponent("Tests/clients/pymemcache_e2e.py").path
        let r = try runProcess(python, [script, String(port)])
        XCTAssertEqual(r.status, 0, r.output)
        XCTAssertTrue(r.output.contains(", 0 failed"), r.output)
        XCTAssertTrue(node.process.isRunning, node.stderr)
    }

    func testPymemcacheEveryCommandAgainstTheNodesTiers() throws { try runPymemcache([]) }

    func testPymemcacheEveryCommandAgainstAMemoryOnlyListener() throws { try runPymemcache(["--memcached-memory-only"]) }

    /// memccapable, installed from Debian's libmemcached-tools when missing (as root).
    static func memccapable() throws -> String {
        for p in ["/usr/bin/memccapable", "/usr/bin/memcapable"] where FileManager.default.isExecutableFile(atPath: p) { return p }
        guard getuid() == 0 else { throw XCTSkip("memccapable is missing and installing libmemcached-tools needs root") }
        let env = "/usr/bin/env"
        let r = try runProcess(env, ["DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq", "libmemcached-tools"])
        if r.status != 0 {
            _ = try runProcess(env, ["apt-get", "update", "-qq"])
            let again = try runProcess(env, ["DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq", "libmemcached-tools"])
            guard again.status == 0 else { throw XCTSkip("cannot install libmemcached-tools: \(again.output.suffix(300))") }
        }
        for p in ["/usr/bin/memccapable", "/usr/bin/memcapable"] where FileManager.default.isExecutableFile(atPath: p) { return p }
        throw XCTSkip("libmemcached-tools installed no memccapable")
    }

    func testMemccapableAsciiTestsAllPass() throws {
        let tool = try Self.memccapable()
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path + "/data", extra: ["--memcached-port", "0"])
        defer { node.terminate() }
        let port = try XCTUnwrap(node.memcachedPort)
        let r = try runProcess(tool, ["-a", "-h", "127.0.0.1", "-p", String(port)])
        XCTAssertEqual(r.status, 0, r.output)
        XCTAssertTrue(r.output.contains("All tests passed"), r.output)
        XCTAssertFalse(r.output.contains("[FAIL]"), r.output)
        XCTAssertTrue(node.process.isRunning, node.stderr)
    }

    /// memccp / memccat / memcrm round-trip files (a PNG and random bytes), memcstat parses the
    /// stats, memcslap runs a load without errors.
    func testLibmemcachedToolsRoundTripFilesStatsAndLoad() throws {
        let capable = try Self.memccapable()
        let bin = (capable as NSString).deletingLastPathComponent
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path + "/data", extra: ["--memcached-port", "0"])
        defer { node.terminate() }
        let servers = "--servers=127.0.0.1:\(try XCTUnwrap(node.memcachedPort))"
        var rgba: [UInt8] = []
        for i in 0..<(64 * 64) { rgba += [UInt8(i % 256), UInt8(i / 64 * 4 % 256), 128, 255] }
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: rgba, width: 64, height: 64))
        var rng = SplitMix(seed: 7)
        let random = (0..<200_000).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        for (name, bytes) in [("image.png", png), ("random.bin", random)] {
            let path = dir.path + "/" + name
            FileManager.default.createFile(atPath: path, contents: Data(bytes))
            let cp = try runProcess(bin + "/memccp", [servers, name], in: dir.path)
            XCTAssertEqual(cp.status, 0, cp.output)
            let out = dir.path + "/back-" + name
            let cat = try runProcess(bin + "/memccat", [servers, "--file=" + out, name], in: dir.path)
            XCTAssertEqual(cat.status, 0, cat.output)
            XCTAssertEqual([UInt8](try Data(contentsOf: URL(fileURLWithPath: out))), bytes, name)
            XCTAssertEqual(try runProcess(bin + "/memcrm", [servers, name]).status, 0)
            XCTAssertNotEqual(try runProcess(bin + "/memccat", [servers, "--file=" + out + ".2", name]).status, 0, "\(name) was removed")
        }
        let stat = try runProcess(bin + "/memcstat", [servers])
        XCTAssertEqual(stat.status, 0, stat.output)
        for field in ["pid:", "uptime:", "version: 1.6.21-strata-", "curr_items:", "cmd_get:"] {
            XCTAssertTrue(stat.output.contains(field), "memcstat lacks \(field): \(stat.output)")
        }
        let slap = try runProcess(bin + "/memcslap", [servers, "--concurrency=4", "--execute-number=2000"])
        XCTAssertEqual(slap.status, 0, slap.output)
        XCTAssertTrue(slap.output.contains("Time to set"), slap.output)
        XCTAssertFalse(slap.output.lowercased().contains("error"), slap.output)
        XCTAssertTrue(node.process.isRunning, node.stderr)
    }

    /// A port free at the moment of asking (bound to 0, read, released).
    static func freePort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return UInt16(bigEndian: addr.sin_port)
    }

    /// Pipelined `get`s of `keys` on one connection: the value of each key found.
    static func getAll(_ s: TextSocket, _ keys: [String]) -> [String: String] {
        s.send(keys.map { "get \($0)\r\n" }.joined())
        var found: [String: String] = [:]
        var ends = 0
        while ends < keys.count {
            let line = s.line()
            if line == "END" { ends += 1 } else if line.hasPrefix("VALUE ") {
                found[String(line.split(separator: " ")[1])] = s.line()
            } else if line.isEmpty { break }
        }
        return found
    }

    /// twemproxy (Debian's nutcracker, installed when missing) with the shipped
    /// deploy/twemproxy/nutcracker.yml in front of three nodes: 10,000 keys written through the
    /// proxy read back through it, and each is on exactly one node, read there directly.
    func testTwemproxyInFrontOfThreeNodes() throws {
        if !FileManager.default.isExecutableFile(atPath: "/usr/sbin/nutcracker") {
            guard getuid() == 0 else { throw XCTSkip("nutcracker is missing and installing it needs root") }
            var r = try runProcess("/usr/bin/env", ["DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq", "nutcracker"])
            if r.status != 0 {
                _ = try runProcess("/usr/bin/env", ["apt-get", "update", "-qq"])
                r = try runProcess("/usr/bin/env", ["DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq", "nutcracker"])
            }
            guard r.status == 0, FileManager.default.isExecutableFile(atPath: "/usr/sbin/nutcracker") else {
                throw XCTSkip("cannot install nutcracker: \(r.output.suffix(300))")
            }
        }
        let dir = TempDir()
        let nodes = try (0..<3).map { i in try NodeProcess(dataDir: dir.path + "/n\(i)", extra: ["--memcached-port", "0"]) }
        defer { nodes.forEach { $0.terminate() } }
        let ports = try nodes.map { try XCTUnwrap($0.memcachedPort) }
        let proxyPort = try Self.freePort(), statsPort = try Self.freePort()
        var conf = try String(contentsOf: DeployFileTests.root.appendingPathComponent("deploy/twemproxy/nutcracker.yml"), encoding: .utf8)
        conf = conf.replacingOccurrences(of: "127.0.0.1:22121", with: "127.0.0.1:\(proxyPort)")
        for (i, p) in ports.enumerated() { conf = conf.replacingOccurrences(of: "127.0.0.1:1121\(i + 1):1", with: "127.0.0.1:\(p):1") }
        try conf.write(toFile: dir.path + "/nutcracker.yml", atomically: true, encoding: .utf8)
        let check = try runProcess("/usr/sbin/nutcracker", ["-t", "-c", dir.path + "/nutcracker.yml"])
        XCTAssertEqual(check.status, 0, check.output)
        let proxy = Process()
        proxy.executableURL = URL(fileURLWithPath: "/usr/sbin/nutcracker")
        proxy.arguments = ["-c", dir.path + "/nutcracker.yml", "-s", String(statsPort), "-o", dir.path + "/nutcracker.log"]
        try proxy.run()
        defer { proxy.terminate(); proxy.waitUntilExit() }
        var viaProxy: TextSocket?
        XCTAssertTrue(eventually(10, interval: 0.1) { viaProxy = try? TextSocket(port: proxyPort); return viaProxy != nil })
        let p = try XCTUnwrap(viaProxy)
        let keys = (0..<10_000).map { "key-\($0)" }
        for chunk in stride(from: 0, to: keys.count, by: 500) {
            let part = keys[chunk..<min(chunk + 500, keys.count)]
            p.send(part.map { "set \($0) 0 0 \($0.utf8.count + 2)\r\nv-\($0)\r\n" }.joined())
            for k in part { XCTAssertEqual(p.line(), "STORED", k) }
        }
        var back: [String: String] = [:]
        for chunk in stride(from: 0, to: keys.count, by: 500) {
            back.merge(Self.getAll(p, Array(keys[chunk..<min(chunk + 500, keys.count)]))) { $1 }
        }
        XCTAssertEqual(back.count, keys.count, "read back through the proxy")
        XCTAssertTrue(keys.allSatisfy { back[$0] == "v-" + $0 })
        // Directly from the nodes: every key on exactly one, with its value.
        var owners: [String: Int] = [:]
        for (i, port) in ports.enumerated() {
            let direct = try TextSocket(port: port)
            var found: [String: String] = [:]
            for chunk in stride(from: 0, to: keys.count, by: 1000) {
                found.merge(Self.getAll(direct, Array(keys[chunk..<min(chunk + 1000, keys.count)]))) { $1 }
            }
            for (k, v) in found {
                XCTAssertEqual(v, "v-" + k)
                XCTAssertNil(owners[k], "\(k) is on two nodes")
                owners[k] = i
            }
            XCTAssertGreaterThan(found.count, 1500, "ketama gives node \(i) a share")
        }
        XCTAssertEqual(owners.count, keys.count, "every key is on one node")
        // Refused noreply commands send nothing, so no other client behind the proxy gets their
        // errors as its answers (an outside review, mc6: a reader got SERVER_ERROR for its own
        // get, then another reader's value). Over-size and bad-flag sets on keys of every node.
        let writer = try TextSocket(port: proxyPort), reader = try TextSocket(port: proxyPort)
        let big = [UInt8](repeating: 0x61, count: (1 << 20) + 10)
        for k in keys.prefix(12) {
            writer.send(Array("set \(k) 0 0 \(big.count) noreply\r\n".utf8) + big + Array("\r\n".utf8))
            writer.send("set \(k) 99999999999 0 1 noreply\r\nx\r\n")
        }
        writer.send("get \(keys[100])\r\n")
        XCTAssertEqual(writer.line(), "VALUE \(keys[100]) 0 \(keys[100].utf8.count + 2)", "the writer's own get, after its refused sets")
        XCTAssertEqual(writer.line(), "v-" + keys[100])
        XCTAssertEqual(writer.line(), "END")
        let later = Self.getAll(reader, Array(keys.suffix(300)))
        XCTAssertEqual(later.count, 300)
        XCTAssertTrue(keys.suffix(300).allSatisfy { later[$0] == "v-" + $0 }, "every reader's answer is its own")
        reportFigure("twemproxy", "10,000 keys through nutcracker (ketama) over 3 nodes: \((0..<3).map { i in owners.values.filter { $0 == i }.count })")
    }
}
