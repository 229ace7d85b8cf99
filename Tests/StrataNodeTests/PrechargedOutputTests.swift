import Foundation
import XCTest
@testable import StrataServer

/// `PrechargedOutput`: a large read counts as output from the moment it is read, on request
/// workers only, and the worker's own count replaces it.
final class PrechargedOutputTests: XCTestCase {
    func testOnlyAThreadThatBeganIsChargedAndEndHandsTheChargeBack() {
        XCTAssertFalse(PrechargedOutput.charge(100), "a thread that did not begin is never charged")
        XCTAssertEqual(PrechargedOutput.end(), 0)
        PrechargedOutput.begin()
        XCTAssertTrue(PrechargedOutput.charge(32 << 20))
        XCTAssertTrue(PrechargedOutput.charge(5))
        // Another thread's charges are its own.
        let other = Thread {
            XCTAssertFalse(PrechargedOutput.charge(7))
            PrechargedOutput.begin()
            XCTAssertTrue(PrechargedOutput.charge(9))
            XCTAssertEqual(PrechargedOutput.end(), 9)
        }
        other.start()
        while !other.isFinished { usleep(1000) }
        XCTAssertEqual(PrechargedOutput.end(), (32 << 20) + 5)
        XCTAssertEqual(PrechargedOutput.end(), 0, "end stops collecting")
        XCTAssertFalse(PrechargedOutput.charge(1))
    }

    /// The node's accounting over a worker job: the charge at the read plus the worker's
    /// count less the charge is the answer's size, and the loop's release brings it to zero.
    func testABudgetChargedAtTheReadEndsWhereItStarted() {
        let budget = OutputBudget(limit: 64)
        let largeReadDone: (Int) -> Void = { bytes in if PrechargedOutput.charge(bytes) { budget.add(bytes) } }
        PrechargedOutput.begin()
        largeReadDone(100)
        XCTAssertTrue(budget.over, "counted as soon as it is read: the gate's next read waits")
        let answer = 130
        budget.add(answer - PrechargedOutput.end())
        XCTAssertEqual(budget.bytes, answer)
        budget.add(-answer) // the loop took the answer over (`completed`)
        XCTAssertEqual(budget.bytes, 0)
        largeReadDone(100) // a read on a thread that is not a request worker
        XCTAssertEqual(budget.bytes, 0)
    }
}
