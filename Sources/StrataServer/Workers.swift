import StrataCore

/// A fixed pool of threads for work that may block on the disk tier, with a bounded queue:
/// `submit` returns false when the queue is full (the caller answers BUSY) instead of letting
/// the node's memory grow.
final class WorkerPool: @unchecked Sendable {
    private let cond = ConditionLock()
    private var queue: [() -> Void] = []
    private var head = 0
    private var stopping = false
    private var running = 0
    private let limit: Int
    private(set) var busy = 0

    init(threads: Int, queueLimit: Int) {
        limit = queueLimit
        for _ in 0..<max(1, threads) {
            if startThread(name: "strata-worker", { [self] in loop() }) { running += 1 }
        }
    }

    /// Queues `job`; false when the queue is full or the pool is stopping.
    func submit(_ job: @escaping () -> Void) -> Bool {
        cond.lock()
        defer { cond.unlock() }
        guard !stopping, queue.count - head < limit, running > 0 else { return false }
        queue.append(job)
        cond.signal()
        return true
    }

    /// Jobs queued or running.
    var outstanding: Int { cond.withLock { queue.count - head + busy } }

    private func loop() {
        while true {
            cond.lock()
            while head == queue.count && !stopping { cond.wait() }
            if head == queue.count && stopping { cond.unlock(); return }
            let job = queue[head]
            head += 1
            if head > 1024 && head * 2 > queue.count { queue.removeFirst(head); head = 0 }
            busy += 1
            cond.unlock()
            job()
            cond.withLock { busy -= 1 }
        }
    }

    /// Lets queued jobs finish, then ends the threads.
    func stop() {
        cond.withLock { stopping = true; cond.broadcast() }
    }
}
