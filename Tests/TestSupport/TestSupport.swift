import Foundation

/// A fresh temporary directory, removed at deinit.
public final class TempDir: @unchecked Sendable {
    public let path: String
    public init() {
        var template = Array((NSTemporaryDirectory() + "strata-test-XXXXXX").utf8CString)
        path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// The path of an executable built beside the test bundle (debug or release).
public func builtExecutable(_ name: String) -> String? {
    var candidates: [String] = []
    for b in Bundle.allBundles { candidates.append(b.bundleURL.deletingLastPathComponent().appendingPathComponent(name).path) }
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    candidates.append(root.appendingPathComponent(".build/debug/\(name)").path)
    candidates.append(root.appendingPathComponent(".build/release/\(name)").path)
    return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
}

/// Runs a program to completion; returns its exit status and its stdout and stderr together.
/// `environment` adds to (or replaces entries of) this process's environment.
public func runProcess(_ executable: String, _ arguments: [String], in directory: String? = nil,
                       environment: [String: String] = [:]) throws -> (status: Int32, output: String) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: executable)
    if !environment.isEmpty { p.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
    p.arguments = arguments
    if let d = directory { p.currentDirectoryURL = URL(fileURLWithPath: d) }
    let out = Pipe()
    p.standardOutput = out
    p.standardError = out
    try p.run()
    let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    p.waitUntilExit()
    return (p.terminationStatus, text)
}

/// Polls `condition` every `interval` seconds until it holds or `seconds` pass, then checks it
/// once more. The one way tests wait for something that happens asynchronously (a process to
/// start or stop, a background job, a node to notice a closed connection): on the condition
/// itself, bounded, never a fixed pause. Measured on the monotonic clock.
public func eventually(_ seconds: Double = 10, interval: Double = 0.01, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = ProcessInfo.processInfo.systemUptime + seconds
    while ProcessInfo.processInfo.systemUptime < deadline {
        if try condition() { return true }
        usleep(UInt32(interval * 1_000_000))
    }
    return try condition()
}

/// Calls `body` until it stops throwing, for up to `seconds` (every `interval`); after that
/// rethrows its last error. For connecting to something that is still coming up.
public func retrying<T>(for seconds: Double, interval: Double = 0.05, _ body: () throws -> T) throws -> T {
    var result: T?
    var lastError: Error?
    _ = eventually(seconds, interval: interval) {
        do { result = try body(); return true } catch { lastError = error; return false }
    }
    if let result { return result }
    throw lastError!
}

/// XORs the byte at `offset` of the file at `path` with `mask` (damage for corruption tests).
public func flipByte(_ path: String, at offset: UInt64, mask: UInt8) throws {
    guard let h = FileHandle(forUpdatingAtPath: path) else {
        throw NSError(domain: "flipByte", code: 1, userInfo: [NSLocalizedDescriptionKey: "cannot open \(path)"])
    }
    defer { try? h.close() }
    try h.seek(toOffset: offset)
    guard let byte = try h.read(upToCount: 1)?.first else {
        throw NSError(domain: "flipByte", code: 2, userInfo: [NSLocalizedDescriptionKey: "\(path) has no byte at \(offset)"])
    }
    try h.seek(toOffset: offset)
    try h.write(contentsOf: Data([byte ^ mask]))
}

/// The last segment file of a data directory's durability log.
public func lastLogSegment(_ dataDirectory: String) throws -> String {
    let logDir = dataDirectory + "/log"
    guard let name = try FileManager.default.contentsOfDirectory(atPath: logDir).filter({ $0.hasSuffix(".seg") }).sorted().last else {
        throw NSError(domain: "lastLogSegment", code: 1, userInfo: [NSLocalizedDescriptionKey: "no segment in \(logDir)"])
    }
    return logDir + "/" + name
}

/// A figure for RELIABILITY.md, printed on its own line (`make soak` collects them).
public func reportFigure(_ name: String, _ value: String) {
    print("FIGURE \(name): \(value)")
}
