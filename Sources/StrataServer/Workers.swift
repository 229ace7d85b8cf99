#if canImport(Glibc)
import Glibc
#endif
import StrataCore

/// A fixed pool of threads for work that may block on the disk tier, with a bounded queue:
/// `submit` returns false when the queue is full (the caller answers BUSY) instead of letting
/// the node's memory grow.
///
/// A worker takes queued jobs until the queue is empty before it sleeps, so `submit` wakes
/// another only while no awake worker is free to take the job (every awake one is inside a
/// job), fewer than `minAwake` are awake, or the queue is deeper than twice the awake workers:
/// jobs that find their page in the page cache are drained by a couple of threads without a
/// wake-up each, and jobs that block on the disk still gather workers. (An outside review,
/// dur6: the rule once counted workers blocked inside jobs as free — two writes waiting for log
/// room on a full disk left every later GET queued behind them, with 30 workers asleep.)
final class WorkerPool: @unchecked Sendable {
    private let cond = ConditionLock()
    private var queue: [() -> Void] = []
    private var head = 0
    private var stopping = false
    private var running = 0
    private let limit: Int
    private(set) var busy = 0
    /// Workers not asleep in `cond.wait` (running a job, or about to take one).
    private var awake = 0
    private let minAwake: Int

    private static let done: @Sendable () -> Void = {}

    init(threads: Int, queueLimit: Int) {
        limit = queueLimit
        minAwake = max(2, processorCount)
        for _ in 0..<max(1, threads) {
            if startThread(name: "strata-worker", { [self] in loop() }) { running += 1 }
        }
    }

    /// Queues `job`; false when the queue is full or the pool is stopping.
    func submit(_ job: @escaping () -> Void) -> Bool {
        cond.lock()
        guard !stopping, queue.count - head < limit, running > 0 else {
            cond.unlock()
            return false
        }
        queue.append(job)
        let wake = awake - busy == 0 || awake < minAwake || queue.count - head > 2 * awake
        cond.unlock()
        // After unlocking: a worker woken while this thread holds the lock would sleep on it again.
        if wake { cond.signal() }
        return true
    }

    /// Jobs queued or running.
    var outstanding: Int { cond.withLock { queue.count - head + busy } }

    /// Takes jobs until the pool stops; one lock round per job (finishing the last one and
    /// taking the next share it).
    private func loop() {
        cond.lock()
        awake += 1
        while true {
            while head == queue.count && !stopping {
                awake -= 1
                cond.wait()
                awake += 1
            }
            if head == queue.count && stopping { break }
            let job = queue[head]
            // The slot lets go of the job at once: a job holds its request (a SET's value).
            queue[head] = Self.done
            head += 1
            if head > 1024 && head * 2 > queue.count { queue.removeFirst(head); head = 0 }
            busy += 1
            cond.unlock()
            job()
            cond.lock()
            busy -= 1
        }
        cond.unlock()
    }

    /// Lets queued jobs finish, then ends the threads.
    func stop() {
        cond.withLock { stopping = true; cond.broadcast() }
    }
}
