import XCTest
@testable import StrataServer

/// The anti-entropy thread's pacing (`AntiEntropy.wait`), without sleeping.
final class AntiEntropyUnitTests: XCTestCase {
    func testQuietPassesBackOffToTheCeilingAndUnsyncedPeersAreRetriedWithinASecond() {
        func w(_ interval: Double, spent: Double = 0, quiet: Int = 0, unsynced: Bool = false) -> Double {
            AntiEntropy.wait(interval: interval, spent: spent, quietPasses: quiet, unsynced: unsynced)
        }
        XCTAssertEqual(w(2), 2)
        XCTAssertEqual(w(2, quiet: 1), 4)
        XCTAssertEqual(w(2, quiet: 3), 16)
        XCTAssertEqual(w(2, quiet: 4), AntiEntropy.quietCeiling, "capped")
        XCTAssertEqual(w(2, quiet: 1_000), AntiEntropy.quietCeiling, "no overflow")
        XCTAssertEqual(w(120, quiet: 5), 120, "an interval above the ceiling is kept")
        XCTAssertEqual(w(2, quiet: 5, unsynced: true), 1, "an unsynced peer: again within a second")
        XCTAssertEqual(w(0.5, unsynced: true), 0.5)
        // A pass that took 1 s waits 19 s more (≤ 5 % of a core), even while quiet passes are few.
        XCTAssertEqual(w(2, spent: 1), 19)
        XCTAssertEqual(w(2, spent: 1, quiet: 10), 29)
    }
}
