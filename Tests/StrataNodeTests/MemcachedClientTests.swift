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
}
