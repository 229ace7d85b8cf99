import Foundation
import XCTest
import StrataCore
@testable import StrataStore
@_exported import TestSupport

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

/// A raw connection to a store's database file, for tests that damage or inspect it.
func openDatabase(_ dir: TempDir) throws -> SQLiteConnection {
    try SQLiteConnection(path: dir.path + "/" + DiskTier.fileName)
}
