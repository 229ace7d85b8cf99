#if canImport(Glibc)
import Glibc
#endif
import StrataCore
@testable import StrataServer
import Synchronization
import XCTest

/// The disk workers' waking rules (`WorkerPool`), with an injected clock.
final class WorkerPoolTests: XCTestCase {
    /// A clock the test moves.
    final class Clock: @unchecked Sendable {
        private let lock = Lock()
        private var t = 100.0
        var now: Double { lock.withLock { t } }
        func advance(_ s: Double) { lock.withLock { t += s } }
    }

    /// Waits up to 5 s for `condition`.
    func eventually(_ condition: () -> Bool) -> Bool {
        let deadline = monotonicSeconds() + 5
        while !condition() && monotonicSeconds() < deadline { usleep(1000) }
        return condition()
    }

    func testQuickJobsAreRunByFewWorkersWhileNoneIsStuck() {
        let clock = Clock()
        let pool = WorkerPool(threads: 16, queueLimit: 10_000, minAwake: 2, clock: { clock.now })
        defer { pool.stop() }
        // A thread still starting takes a job it finds queued without being woken.
        XCTAssertTrue(eventually { pool.sleeping == 16 })
        let lock = Lock()
        var running = 0, most = 0
        let done = Atomic<Int>(0)
        for _ in 0..<400 {
            XCTAssertTrue(pool.submit {
                lock.withLock { running += 1; most = max(most, running) }
                let start = monotonicSeconds()
                while monotonicSeconds() - start < 0.00005 {} // 50 µs of CPU
                lock.withLock { running -= 1 }
                done.add(1, ordering: .relaxed)
            })
        }
        XCTAssertTrue(eventually { done.load(ordering: .relaxed) == 400 })
        // The clock never moved, so no job counted as stalled: never more than two at once
        // (the old depth rule woke one more for every two queued jobs).
        XCTAssertLessThanOrEqual(lock.withLock { most }, 2)
        XCTAssertGreaterThanOrEqual(lock.withLock { most }, 1)
    }

    func testJobsThatWaitOnACompletionGatherWorkersAtOnce() {
        let clock = Clock()
        let pool = WorkerPool(threads: 8, queueLimit: 100, minAwake: 2, clock: { clock.now })
        defer { pool.stop() }
        let gate = Completion<Void>()
        let started = Atomic<Int>(0), finished = Atomic<Int>(0)
        for _ in 0..<6 {
            XCTAssertTrue(pool.submit {
                started.add(1, ordering: .relaxed)
                gate.wait() // reported: this worker stops counting as running
                finished.add(1, ordering: .relaxed)
            })
        }
        // Without the report only two (minAwake) would have started, the clock being frozen.
        XCTAssertTrue(eventually { started.load(ordering: .relaxed) == 6 }, "started \(started.load(ordering: .relaxed))")
        XCTAssertEqual(finished.load(ordering: .relaxed), 0)
        gate.fulfil(())
        XCTAssertTrue(eventually { finished.load(ordering: .relaxed) == 6 })
    }

    func testAJobBehindStuckWorkersGetsAnotherOnceItHasWaitedTheStallTime() {
        let clock = Clock()
        let pool = WorkerPool(threads: 4, queueLimit: 100, minAwake: 2, stallSeconds: 0.002, clock: { clock.now })
        defer { pool.stop() }
        let release = Atomic<Bool>(false)
        let stuck = Atomic<Int>(0)
        // Two jobs stuck in something the pool is not told of (a read faulting to the device).
        for _ in 0..<2 {
            XCTAssertTrue(pool.submit {
                stuck.add(1, ordering: .relaxed)
                while !release.load(ordering: .relaxed) { usleep(1000) }
            })
        }
        XCTAssertTrue(eventually { stuck.load(ordering: .relaxed) == 2 })
        let third = Atomic<Bool>(false)
        XCTAssertTrue(pool.submit { third.store(true, ordering: .relaxed) })
        usleep(100_000)
        XCTAssertFalse(third.load(ordering: .relaxed), "two workers run: the third job waits its turn")
        clock.advance(0.003)
        pool.nudge() // the loops' tick
        XCTAssertTrue(eventually { third.load(ordering: .relaxed) }, "a stalled queue wakes another worker")
        release.store(true, ordering: .relaxed)
    }

    func testAByteGateWaitIsReportedToo() {
        let clock = Clock()
        let pool = WorkerPool(threads: 6, queueLimit: 100, minAwake: 1, clock: { clock.now })
        defer { pool.stop() }
        let gate = ByteGate(limit: 10)
        gate.acquire(10) // full: every acquire below waits
        let started = Atomic<Int>(0)
        for _ in 0..<4 {
            XCTAssertTrue(pool.submit {
                started.add(1, ordering: .relaxed)
                gate.acquire(5)
                gate.release(5)
            })
        }
        XCTAssertTrue(eventually { started.load(ordering: .relaxed) == 4 }, "started \(started.load(ordering: .relaxed))")
        gate.release(10)
        XCTAssertTrue(eventually { gate.inUse == 0 })
    }
}
