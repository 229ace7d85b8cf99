import Foundation
import XCTest
import StrataCore
@testable import StrataStore

/// A fresh temporary directory, removed at deinit.
final class TempDir {
    let path: String
    init() {
        var template = Array((NSTemporaryDirectory() + "strata-test-XXXXXX").utf8CString)
        path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// Collects the store's log lines.
final class LogSink: @unchecked Sendable {
    private let lock = Lock()
    private var lines: [String] = []
    func append(_ l: String) { lock.withLock { lines.append(l) } }
    var all: [String] { lock.withLock { lines } }
}

func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

/// A store in a temp directory with a manual clock.
final class StoreFixture {
    let dir = TempDir()
    let clock = ManualClock()
    let log = LogSink()
    var store: TieredCache!
    var config: StoreConfiguration

    init(_ tweak: (inout StoreConfiguration) -> Void = { _ in }) throws {
        config = StoreConfiguration(directory: dir.path)
        config.maintenanceInterval = 0.02
        let sink = log
        config.log = { sink.append($0) }
        tweak(&config)
        store = try TieredCache(configuration: config, clock: clock)
    }

    func reopen(_ tweak: (inout StoreConfiguration) -> Void = { _ in }) throws {
        store.close()
        store = nil
        tweak(&config)
        store = try TieredCache(configuration: config, clock: clock)
    }

    deinit { store?.close() }
}

/// Polls `condition` for up to `seconds` (background work such as sweeps is asynchronous).
func eventually(_ seconds: Double = 5, _ condition: () throws -> Bool) rethrows -> Bool {
    let end = Date().addingTimeInterval(seconds)
    while Date() < end {
        if try condition() { return true }
        usleep(5_000)
    }
    return try condition()
}

/// A raw connection to a store's database file, for tests that damage or inspect it.
func openDatabase(_ dir: TempDir) throws -> SQLiteConnection {
    try SQLiteConnection(path: dir.path + "/" + DiskTier.fileName)
}

/// The path of an executable built beside the test bundle.
func builtExecutable(_ name: String) -> String? {
    var candidates: [String] = []
    for b in Bundle.allBundles { candidates.append(b.bundleURL.deletingLastPathComponent().appendingPathComponent(name).path) }
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    candidates.append(root.appendingPathComponent(".build/debug/\(name)").path)
    candidates.append(root.appendingPathComponent(".build/release/\(name)").path)
    return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
}
