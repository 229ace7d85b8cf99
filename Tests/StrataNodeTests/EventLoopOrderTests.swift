import Foundation
import XCTest
import StrataCore
import StrataNet

/// The order of a loop iteration's closing work: what `beforeEndOfIteration` queued runs before
/// everything `atEndOfIteration` queued, in every round — so the durability log's batch is
/// written before the connections' flushes that carry the answers it completes, one send each.
final class EventLoopOrderTests: XCTestCase {
    func testWorkQueuedBeforeTheEndOfAnIterationRunsBeforeTheFlushesInEveryRound() throws {
        let loop = try EventLoop(index: 0)
        final class Trace: @unchecked Sendable { var steps: [String] = [] }
        let trace = Trace()
        let done = DispatchSemaphore(value: 0)
        loop.execute {
            loop.atEndOfIteration {
                trace.steps.append("flush 1")
                // A flush that resumes a connection queues another log batch and its flush.
                loop.atEndOfIteration { trace.steps.append("flush 2"); done.signal() }
                loop.beforeEndOfIteration { trace.steps.append("log 2") }
            }
            loop.beforeEndOfIteration { trace.steps.append("log 1") }
        }
        let runner = Thread { loop.run(tickInterval: 10) {} }
        runner.start()
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        loop.stop()
        XCTAssertTrue(eventually(10) { runner.isFinished })
        XCTAssertEqual(trace.steps, ["log 1", "flush 1", "log 2", "flush 2"])
    }
}
