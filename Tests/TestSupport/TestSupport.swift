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
