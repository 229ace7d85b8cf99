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
public func runProcess(_ executable: String, _ arguments: [String], in directory: String? = nil) throws -> (status: Int32, output: String) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: executable)
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
