import Foundation
import XCTest
import TestSupport
import StrataCore
@testable import StrataServer

/// The pause detector counts from `start()`: the time between opening the store and starting
/// the loops (a log replay, a wait for room on a full disk) is not a pause. An outside review
/// saw `paused gap_ms=13317` right at start, which made a freshly started node report a new
/// start version and unverify every key.
final class PauseAtStartTests: XCTestCase {
    func testTheTimeBeforeStartIsNotAPause() throws {
        let dir = try TempDir()
        var config = NodeConfiguration()
        config.host = "127.0.0.1"
        config.port = 0
        config.threads = 1
        config.dataDirectory = dir.path
        config.pauseThreshold = 0.2
        let node = try Node(config: config)
        defer { node.shutdown() }
        usleep(600_000) // three thresholds between the open and the start
        try node.start()
        usleep(400_000) // a few ticks
        node.checkPause()
        XCTAssertEqual(node.stats.pausesNoticed.load(ordering: .relaxed), 0, "the open-to-start gap counted as a pause")
        // The detector does work: a gap after the start is noticed.
        node.lastAlive.store(Int(monotonicSeconds() * 1000) - 1_000, ordering: .relaxed)
        node.checkPause()
        XCTAssertEqual(node.stats.pausesNoticed.load(ordering: .relaxed), 1)
    }
}
