import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataWire
@_exported import TestSupport

/// A real `strata serve` process on 127.0.0.1 and a free port (port 0; the port is read from
/// its first line of output). Stopped with SIGTERM (or killed) at deinit.
final class NodeProcess: @unchecked Sendable {
    let process = Process()
    let dataDir: String
    private(set) var port: UInt16 = 0
    private let stdoutPipe = Pipe()
    private let stderrPipe = Pipe()
    private let errLock = NSLock()
    private var errText = ""

    /// `launcher` runs the node through another program that execs it (`["/usr/bin/prlimit",
    /// "--nofile=256:256"]`), so the process is still the node's. `env`: variables added to the
    /// test's environment for the node (STRATA_* settings).
    init(dataDir: String, port: UInt16 = 0, extra: [String] = [], env: [String: String] = [:], launcher: [String] = [],
         file: StaticString = #filePath, line: UInt = #line) throws {
        self.dataDir = dataDir
        let exe = try XCTUnwrap(builtExecutable("strata"), "strata is not built", file: file, line: line)
        let args = ["serve", "--port", String(port), "--data", dataDir, "--threads", "2", "--disk-workers", "8", "--log-level", "warn"] + extra
        if let first = launcher.first {
            process.executableURL = URL(fileURLWithPath: first)
            process.arguments = Array(launcher.dropFirst()) + [exe] + args
        } else {
            process.executableURL = URL(fileURLWithPath: exe)
            process.arguments = args
        }
        if !env.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(env) { $1 } }
        process.standardOutput = stdoutPipe
        process.standardError = stderrPipe
        stderrPipe.fileHandleForReading.readabilityHandler = { [weak self] h in
            let d = h.availableData
            guard let self, !d.isEmpty else { return }
            self.errLock.lock(); self.errText += String(decoding: d, as: UTF8.self); self.errLock.unlock()
        }
        NodeRegistry.reapOrphans
        try process.run()
        NodeRegistry.record(process.processIdentifier)
        // First stdout line: "strata X listening on HOST:PORT, data in DIR".
        // Waits on the pipe (poll, bounded by the deadline), never in a blocking read.
        var line = ""
        let deadline = monotonicSeconds() + 20
        let linesWanted = 1 + (extra.contains("--metrics-port") ? 1 : 0) + (extra.contains("--memcached-port") ? 1 : 0)
            + (extra.contains("--tls-port") ? 1 : 0) + (extra.contains("--memcached-tls-port") ? 1 : 0)
            - (extra.contains("--tls-only") && extra.contains("--memcached-tls-port") && extra.contains("--memcached-port") ? 1 : 0)
        let out = stdoutPipe.fileHandleForReading
        while line.filter({ $0 == "\n" }).count < linesWanted && process.isRunning {
            let left = deadline - monotonicSeconds()
            if left <= 0 { break }
            var ready = pollfd(fd: out.fileDescriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&ready, 1, Int32(min(left, 1) * 1000) + 1) > 0 else { continue }
            let d = out.availableData
            if d.isEmpty { break } // end of output: it exited
            line += String(decoding: d, as: UTF8.self)
        }
        // "listening on HOST:PORT," (any IPv4 host; clients still use 127.0.0.1).
        guard let r = line.range(of: "listening on "),
              let colon = line[r.upperBound...].firstIndex(of: ":"),
              let p = UInt16(line[line.index(after: colon)...].prefix { $0.isNumber }) else {
            process.waitUntilExit()
            throw NSError(domain: "NodeProcess", code: 1, userInfo: [NSLocalizedDescriptionKey: "node did not start: \(line) \(stderr)"])
        }
        self.port = p
        if let r = line.range(of: "metrics on http://") ?? line.range(of: "metrics on https://"),
           let colon = line[r.upperBound...].firstIndex(of: ":") {
            metricsHost = String(line[r.upperBound..<colon])
            metricsPort = UInt16(line[line.index(after: colon)...].prefix { $0.isNumber })
        }
        // Each from the line that starts with its label ("tls on" is also inside "memcached tls on").
        func portOfLine(_ label: String) -> UInt16? {
            guard let l = line.split(separator: "\n").first(where: { $0.hasPrefix(label) }),
                  let colon = l.dropFirst(label.count).firstIndex(of: ":") else { return nil }
            return UInt16(l[l.index(after: colon)...].prefix { $0.isNumber })
        }
        memcachedPort = portOfLine("memcached on ")
        tlsPort = portOfLine("tls on ")
        memcachedTLSPort = portOfLine("memcached tls on ")
        startupLines = line
    }

    /// What the node printed on stdout as it started ("listening on …" and the lines after).
    private(set) var startupLines = ""

    /// The memcached TLS listener's port, from "memcached tls on HOST:PORT".
    private(set) var memcachedTLSPort: UInt16?

    /// The TLS listener's port, from "tls on HOST:PORT".
    private(set) var tlsPort: UInt16?

    /// A connection to the TLS port, verified with `tls`.
    func connectTLS(_ tls: TLSClientConfiguration, host: String = "127.0.0.1", token: [UInt8]? = nil, timeout: Double = 10) throws -> NodeConnection {
        try NodeConnection(host: host, port: try XCTUnwrap(tlsPort), timeout: timeout, token: token, tls: tls)
    }

    private(set) var metricsPort: UInt16?
    /// The memcached listener's port, from "memcached on HOST:PORT".
    private(set) var memcachedPort: UInt16?
    /// The address the metrics endpoint printed (IPv4 only).
    private(set) var metricsHost: String?

    var stderr: String { errLock.lock(); defer { errLock.unlock() }; return errText }

    func connect(token: [UInt8]? = nil, timeout: Double = 10) throws -> NodeConnection {
        try NodeConnection(host: "127.0.0.1", port: port, timeout: timeout, token: token)
    }

    /// SIGTERM and wait; returns the exit status.
    @discardableResult
    func terminate(timeout: Double = 30) -> Int32 {
        defer { NodeRegistry.forget(process.processIdentifier) }
        guard process.isRunning else { return process.terminationStatus }
        kill(process.processIdentifier, SIGTERM)
        _ = eventually(timeout) { !process.isRunning }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        return process.terminationStatus
    }

    deinit { terminate() }
}

/// The nodes a test process started and has not stopped, one empty file each
/// (`/tmp/strata-test-nodes/<test pid>-<node pid>`), so that a test run that crashed — its
/// deinits never ran — does not leave nodes listening: the first node the next test process
/// starts kills the recorded nodes of test processes that are gone (after checking the PID is
/// still a `strata serve`, not a reused one).
enum NodeRegistry {
    static let directory = "/tmp/strata-test-nodes"

    static func entry(_ node: Int32) -> String { "\(directory)/\(getpid())-\(node)" }

    static func record(_ node: Int32) {
        mkdir(directory, 0o777)
        let fd = open(entry(node), O_WRONLY | O_CREAT, 0o644)
        if fd >= 0 { close(fd) }
    }

    static func forget(_ node: Int32) { unlink(entry(node)) }

    /// Runs once per test process, before its first node starts.
    static let reapOrphans: Void = {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
        for name in names {
            let parts = name.split(separator: "-")
            guard parts.count == 2, let owner = Int32(parts[0]), let node = Int32(parts[1]) else { continue }
            guard owner != getpid(), kill(owner, 0) != 0 && errno == ESRCH else { continue } // its test run is alive
            let cmdline = (try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(node)/cmdline"))) ?? Data()
            let args = cmdline.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
            if args.contains(where: { $0.hasSuffix("/strata") || $0 == "strata" }) && args.contains("serve") {
                kill(node, SIGKILL)
            }
            unlink("\(directory)/\(name)")
        }
    }()
}

/// Runs the CLI once; returns exit code, stdout and stderr.
func runCLI(_ args: [String], stdin: [UInt8]? = nil, env: [String: String] = [:]) throws -> (code: Int32, out: [UInt8], err: String) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: try XCTUnwrap(builtExecutable("strata")))
    p.arguments = args
    var environment = ProcessInfo.processInfo.environment
    for (k, v) in env { environment[k] = v }
    p.environment = environment
    let out = Pipe(), err = Pipe(), inp = Pipe()
    p.standardOutput = out
    p.standardError = err
    p.standardInput = inp
    try p.run()
    // The CLI may stop reading its input early (a value over the node's limit): the write then
    // fails with EPIPE instead of killing the test process, and runs on its own thread so a
    // large input cannot block the reads below.
    signal(SIGPIPE, SIG_IGN)
    let writer = inp.fileHandleForWriting
    let written = DispatchSemaphore(value: 0)
    DispatchQueue.global().async {
        if let s = stdin { try? writer.write(contentsOf: Data(s)) }
        try? writer.close()
        written.signal()
    }
    let o = out.fileHandleForReading.readDataToEndOfFile()
    let e = err.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    written.wait()
    return (p.terminationStatus, [UInt8](o), String(decoding: e, as: UTF8.self))
}

func b(_ s: String) -> [UInt8] { Array(s.utf8) }

/// Reads until the peer closes; true when it did within `seconds`.
func peerCloses(_ c: NodeConnection, within seconds: Double) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        do { _ = try c.readFrame() } catch let e as ClientError {
            return e.message.contains("closed") || e.message.contains("reset")
        } catch { return false }
    }
    return false
}

/// A node's STATS as a JSON object.
func nodeStats(_ c: NodeConnection) throws -> [String: Any] {
    try XCTUnwrap(JSONSerialization.jsonObject(with: Data(try c.stats().utf8)) as? [String: Any])
}

/// A list shared by threads.
final class SharedList<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [T] = []
    func append(_ x: T) { lock.lock(); items.append(x); lock.unlock() }
    var all: [T] { lock.lock(); defer { lock.unlock() }; return items }
}
