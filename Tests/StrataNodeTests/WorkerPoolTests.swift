import Foundation
import XCTest
import StrataCore
@testable import StrataServer

final class WorkerPoolTests: XCTestCase {
    /// Jobs blocked inside the pool do not leave a new job queued while other workers sleep (an
    /// outside review, dur6: two writes waiting for log room on a full disk held every later GET
    /// for minutes, with 30 of 32 workers asleep — the wake rule counted the blocked ones as free).
    func testAJobIsTakenWhileOthersBlock() {
        let pool = WorkerPool(threads: 4, queueLimit: 16)
        defer { pool.stop() }
        let release = DispatchSemaphore(value: 0)
        let started = Counter()
        for _ in 0..<2 {
            XCTAssertTrue(pool.submit { started.add(); release.wait() })
        }
        XCTAssertTrue(eventually { started.load() == 2 && pool.busy == 2 }, "both blocking jobs run")
        let ran = DispatchSemaphore(value: 0)
        XCTAssertTrue(pool.submit { ran.signal() })
        XCTAssertEqual(ran.wait(timeout: .now() + 2), .success, "a sleeping worker took the third job")
        release.signal(); release.signal()
    }
}
