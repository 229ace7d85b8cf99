/// Threads for blocking calls made on behalf of `async` code: a job never waits for a thread
/// (an idle one takes it, or a new one is started), so blocking work never queues behind other
/// blocked work. Idle threads exit after `idleSeconds`.
///
/// Why not Dispatch: on Linux the Swift concurrency executor runs on Dispatch's global queues,
/// so a blocking call parked on a Dispatch thread can starve the very task it waits for
/// (Dispatch adds threads only slowly when its workers block). Cost: one OS thread per
/// concurrently blocked call; a thread start (~tens of µs) only when none is idle.
public final class BlockingPool: @unchecked Sendable {
    public static let shared = BlockingPool(name: "strata-blocking")

    private let cond = ConditionLock()
    private var jobs: [@Sendable () -> Void] = []
    private var idle = 0
    private let name: String
    private let idleSeconds: Double

    public init(name: String, idleSeconds: Double = 10) {
        self.name = name
        self.idleSeconds = idleSeconds
    }

    /// Runs `job` on a pool thread, starting one when none is idle.
    public func run(_ job: @escaping @Sendable () -> Void) {
        cond.lock()
        jobs.append(job)
        if idle > jobs.count - 1 {
            cond.unlock()
            cond.signal() // after unlocking, so the woken thread does not wait for the lock
            return
        }
        cond.unlock()
        if !startThread(name: name, { [self] in loop() }) {
            // No thread could be started: run it here rather than lose it.
            cond.lock()
            if let i = jobs.indices.last { let j = jobs.remove(at: i); cond.unlock(); j() } else { cond.unlock() }
        }
    }

    private func loop() {
        cond.lock()
        while true {
            if !jobs.isEmpty {
                let job = jobs.removeFirst()
                cond.unlock()
                job()
                cond.lock()
                continue
            }
            idle += 1
            cond.wait(seconds: idleSeconds)
            idle -= 1
            if jobs.isEmpty { cond.unlock(); return }
        }
    }
}
