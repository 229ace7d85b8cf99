#if canImport(Glibc)
import Glibc
#endif
import StrataCore

/// A fixed pool of threads for work that may block on the disk tier, with a bounded queue:
/// `submit` returns false when the queue is full (the caller answers BUSY) instead of letting
/// the node's memory grow.
///
/// Waking: a worker takes queued jobs until the queue is empty before it sleeps, and another
/// is woken only when it can help — while fewer than `minAwake` workers are running (awake and
/// not waiting), or when the oldest queued job has waited `stallSeconds` (the running workers
/// are stuck: a read faulting to the device, a busy SQLite). Jobs that find their pages in the
/// page cache are then drained by a couple of threads without a wake-up each (on 2 cores,
/// waking ~20 of 32 workers cost 10–19 % more CPU per 10 KiB disk get: bench/RESULTS.md).
/// A worker about to wait for something other than the CPU — a `Completion` (a log fsync, an
/// applier, a disk-tier job), a `ByteGate` (large reads held back by the output bound) —
/// reports it (`WaitObserver`) and no longer counts as running, so work that blocks still
/// gathers as many workers as it needs, at once. `nudge()` (from the loops' tick) catches a
/// stall when no submit comes to notice it.
final class WorkerPool: WaitObserver, @unchecked Sendable {
    private struct Job {
        let run: () -> Void
        let queuedAt: Double
    }

    private let cond = ConditionLock()
    private var queue: [Job] = []
    private var head = 0
    private var stopping = false
    private var running = 0
    private let limit: Int
    private(set) var busy = 0
    /// Workers not asleep in `cond.wait` (running a job, or about to take one).
    private var awake = 0
    /// Awake workers inside a reported wait (`willWait` … `didWait`).
    private var waiting = 0
    /// Sleeping workers signalled that have not woken yet.
    private var signalled = 0
    private let minAwake: Int
    /// How long the oldest queued job may wait before another worker is woken for it.
    let stallSeconds: Double
    private let clock: () -> Double
    /// Wake-ups, for tests and STATS-style inspection.
    private(set) var wakeUps = 0

    private static let noop: @Sendable () -> Void = {}

    init(threads: Int, queueLimit: Int, minAwake: Int = max(2, processorCount), stallSeconds: Double = 0.002,
         clock: @escaping () -> Double = monotonicSeconds) {
        limit = queueLimit
        self.minAwake = minAwake
        self.stallSeconds = stallSeconds
        self.clock = clock
        // A thread counts as awake from its start until it first sleeps (it may find jobs
        // queued meanwhile and take them unasked).
        cond.lock()
        for _ in 0..<max(1, threads) {
            if startThread(name: "strata-worker", { [self] in
                Waits.observe(self)
                loop()
            }) { running += 1; awake += 1 }
        }
        cond.unlock()
    }

    /// Queues `job`; false when the queue is full or the pool is stopping.
    func submit(_ job: @escaping () -> Void) -> Bool {
        let now = clock()
        cond.lock()
        guard !stopping, queue.count - head < limit, running > 0 else {
            cond.unlock()
            return false
        }
        queue.append(Job(run: job, queuedAt: now))
        let wake = shouldWake(now: now)
        cond.unlock()
        // After unlocking: a worker woken while this thread holds the lock would sleep on it again.
        if wake { cond.signal() }
        return true
    }

    /// Whether a sleeping worker should take the queue's front (lock held, queue not empty);
    /// when true, the caller signals one after unlocking, and it counts as awake from now (a
    /// woken thread needs the lock before it can say so itself: without this, a burst of
    /// submits would each wake another).
    private func shouldWake(now: Double) -> Bool {
        let up = awake + signalled
        guard up < running else { return false } // none asleep
        guard up - waiting < minAwake || now - queue[head].queuedAt >= stallSeconds else { return false }
        signalled += 1
        return true
    }

    /// Wakes a worker if the oldest queued job has waited `stallSeconds` (every awake worker
    /// is stuck in something unreported). Any thread; cheap when the queue is empty.
    func nudge() {
        cond.lock()
        let wake = head < queue.count && shouldWake(now: clock())
        cond.unlock()
        if wake { cond.signal() }
    }

    func willWait() {
        cond.lock()
        waiting += 1
        let wake = head < queue.count && shouldWake(now: clock())
        cond.unlock()
        if wake { cond.signal() }
    }

    func didWait() {
        cond.lock()
        waiting -= 1
        cond.unlock()
    }

    /// Workers asleep, waiting for a job.
    var sleeping: Int { cond.withLock { running - awake } }

    /// Jobs queued or running.
    var outstanding: Int { cond.withLock { queue.count - head + busy } }

    /// Takes jobs until the pool stops; one lock round per job (finishing the last one and
    /// taking the next share it).
    private func loop() {
        cond.lock()
        while true {
            while head == queue.count && !stopping {
                awake -= 1
                cond.wait()
                awake += 1
                wakeUps += 1
                if signalled > 0 { signalled -= 1 }
            }
            if head == queue.count && stopping { break }
            let job = queue[head]
            // The slot lets go of the job at once: a job holds its request (a SET's value).
            queue[head] = Job(run: Self.noop, queuedAt: 0)
            head += 1
            if head > 1024 && head * 2 > queue.count { queue.removeFirst(head); head = 0 }
            // The next job has waited long already: another worker for it.
            let wakeAnother = head < queue.count && shouldWake(now: clock())
            busy += 1
            cond.unlock()
            if wakeAnother { cond.signal() }
            job.run()
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
