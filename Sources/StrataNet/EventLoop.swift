#if canImport(Glibc)
import Glibc
#endif
import CLinux
import Synchronization
import StrataCore

// The one place that knows epoll and eventfd.

/// Something an event loop calls when its file descriptor is ready. Called on the loop's
/// thread only.
public protocol EventHandler: AnyObject {
    /// `readable`/`writable`/`hangup` from the epoll events.
    func handle(readable: Bool, writable: Bool, hangup: Bool)
}

/// One epoll event loop on one thread.
///
/// Handlers are registered, changed and removed only on the loop's thread. Other threads hand
/// work to the loop with `execute`, which wakes it through an eventfd. `tick` runs about every
/// `tickInterval` seconds (timeouts, idle checks); `schedule(after:)` runs one closure once,
/// no earlier than asked (a paused listener). Not thread-safe except `execute` and `stop`.
public final class EventLoop: @unchecked Sendable {
    private let epfd: Int32
    private let wakeFD: Int32
    private var handlers: [Int32: EventHandler] = [:]
    private let taskLock = Lock()
    private var tasks: [() -> Void] = []
    private var runningTasks: [() -> Void] = []
    private var stopping = false
    private var endOfIteration: [() -> Void] = []
    private var runningEndOfIteration: [() -> Void] = []
    private var beforeEndOfIteration: [() -> Void] = []
    private var runningBeforeEndOfIteration: [() -> Void] = []
    private var timers: [(due: Double, body: () -> Void)] = []
    public let index: Int
    /// The thread running `run` (set when it starts).
    private let runner = Atomic<UInt>(0)

    /// Counts the loop's units of work: each handled event, each task, each end-of-iteration
    /// body and each tick start a new one (`oncePerEvent`).
    private var event: UInt64 = 0
    private var stampEvent: UInt64 = .max
    private var stampValue: Int64 = 0

    /// A reading taken at most once per unit of work: `read` runs for the first caller while
    /// the loop handles one event (a connection's batch of requests), one task or one
    /// end-of-iteration body; later callers in the same unit get that value. So a clock
    /// is read once per batch of pipelined requests, not once per request (Redis caches its
    /// time per command batch the same way), and the value is never older than the unit
    /// being run. Loop thread only.
    @inline(__always)
    public func oncePerEvent(_ read: () -> Int64) -> Int64 {
        if stampEvent != event {
            stampValue = read()
            stampEvent = event
        }
        return stampValue
    }

    /// The monotonic clock (`monotonicSeconds`) as read when the loop's current iteration
    /// began (epoll_wait returned): at most one iteration old. For timestamps with a
    /// granularity of seconds — a connection's last activity and last write progress, which
    /// the idle and stall timeouts compare — without a clock read per request. Loop thread only.
    public private(set) var now: Double = monotonicSeconds()

    /// Whether the calling thread is this loop's (a completion produced on the loop itself can
    /// then run at once instead of being queued with `execute`).
    public var isCurrentThread: Bool { runner.load(ordering: .relaxed) == UInt(pthread_self()) }

    public init(index: Int) throws(SystemError) {
        self.index = index
        epfd = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard epfd >= 0 else { throw SystemError(errno: errno, call: "epoll_create1") }
        wakeFD = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard wakeFD >= 0 else { throw SystemError(errno: errno, call: "eventfd") }
        var ev = epoll_event()
        ev.events = EPOLLIN.rawValue
        ev.data.fd = wakeFD
        epoll_ctl(epfd, EPOLL_CTL_ADD, wakeFD, &ev)
    }

    deinit {
        Glibc.close(epfd)
        Glibc.close(wakeFD)
    }

    public struct Interest: OptionSet, Sendable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        public static let read = Interest(rawValue: EPOLLIN.rawValue | EPOLLRDHUP.rawValue)
        public static let write = Interest(rawValue: EPOLLOUT.rawValue)
        /// For a listening socket shared by several loops: readable, waking only one loop
        /// (EPOLLEXCLUSIVE allows no other flags but EPOLLIN).
        public static let accept = Interest(rawValue: EPOLLIN.rawValue | EPOLLEXCLUSIVE.rawValue)
    }

    public func register(_ fd: Int32, _ interest: Interest, _ handler: EventHandler) throws(SystemError) {
        var ev = epoll_event()
        ev.events = interest.rawValue
        ev.data.fd = fd
        guard epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0 else { throw SystemError(errno: errno, call: "epoll_ctl add") }
        handlers[fd] = handler
    }

    public func modify(_ fd: Int32, _ interest: Interest) {
        var ev = epoll_event()
        ev.events = interest.rawValue
        ev.data.fd = fd
        epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev)
    }

    /// Stops watching `fd` (call before closing it).
    public func unregister(_ fd: Int32) {
        epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nil)
        handlers[fd] = nil
    }

    /// Runs `task` on the loop's thread soon. Thread-safe. Only the task that finds the queue
    /// empty wakes the loop (one eventfd write per batch, not per task): the loop takes the
    /// whole queue at once, so later tasks ride on that wake-up.
    public func execute(_ task: @escaping () -> Void) {
        let wake = taskLock.withLock { () -> Bool in
            tasks.append(task)
            return tasks.count == 1
        }
        guard wake else { return }
        var one: UInt64 = 1
        _ = Glibc.write(wakeFD, &one, 8)
    }

    /// Runs `body` on the loop's thread once this iteration's events and tasks are handled
    /// (loop thread only). Connections use it to write every response produced by one batch of
    /// input or completions with one send instead of one send per response.
    public func atEndOfIteration(_ body: @escaping () -> Void) {
        endOfIteration.append(body)
    }

    /// Like `atEndOfIteration`, but runs before every body queued that way (loop thread only):
    /// for work whose results the end-of-iteration bodies send. The durability log's batch is
    /// written here, so the SET answers it completes join the same send as the GET answers of
    /// their batch (queued after the connections' flushes, they cost a second `send` per
    /// connection per iteration — the kernel's loopback delivery, ~40 % of the loop's CPU in
    /// workload 2, is paid per send).
    public func beforeEndOfIteration(_ body: @escaping () -> Void) {
        beforeEndOfIteration.append(body)
    }

    /// Runs `body` on the loop's thread once `seconds` have passed (loop thread only; never
    /// earlier, later by at most the time one iteration takes). Each iteration looks at every
    /// pending timer, so this is for a handful (a listener paused after an accept error), not
    /// one per connection: connections use the tick. Timers pending when the loop stops never run.
    public func schedule(after seconds: Double, _ body: @escaping () -> Void) {
        timers.append((monotonicSeconds() + max(0, seconds), body))
    }

    /// Makes `run` return after the current iteration. Thread-safe.
    public func stop() {
        taskLock.withLock { stopping = true }
        var one: UInt64 = 1
        _ = Glibc.write(wakeFD, &one, 8)
    }

    /// Runs until `stop()`. Blocks the calling thread.
    public func run(tickInterval: Double = 0.1, tick: () -> Void) {
        let maxEvents = 256
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: maxEvents)
        defer { events.deallocate() }
        var lastTick = monotonicSeconds()
        runner.store(UInt(pthread_self()), ordering: .relaxed)
        while true {
            var wait = tickInterval
            if !timers.isEmpty {
                let next = timers.map(\.due).min()! - monotonicSeconds()
                wait = max(0, min(wait, next))
            }
            let n = epoll_wait(epfd, events, Int32(maxEvents), Int32((wait * 1000).rounded(.up)))
            if n < 0 && errno != EINTR { break }
            now = monotonicSeconds()
            for i in 0..<max(0, Int(n)) {
                let ev = events[i]
                let fd = ev.data.fd
                if fd == wakeFD {
                    var v: UInt64 = 0
                    _ = Glibc.read(wakeFD, &v, 8)
                    continue
                }
                guard let h = handlers[fd] else { continue }
                let e = ev.events
                event &+= 1
                h.handle(readable: e & (EPOLLIN.rawValue | EPOLLRDHUP.rawValue) != 0,
                         writable: e & EPOLLOUT.rawValue != 0,
                         hangup: e & (EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0)
            }
            // The queue swapped with an empty one under the lock (no copy, no allocation).
            let stop: Bool = taskLock.withLock {
                swap(&tasks, &runningTasks)
                return stopping
            }
            for t in runningTasks { event &+= 1; t() }
            runningTasks.removeAll(keepingCapacity: true)
            if !timers.isEmpty {
                let now = monotonicSeconds()
                if timers.contains(where: { $0.due <= now }) {
                    let due = timers.filter { $0.due <= now }
                    timers.removeAll { $0.due <= now }
                    for t in due { event &+= 1; t.body() }
                }
            }
            // Two arrays swapped, so the bodies queued in each iteration reuse storage (a copy
            // and `removeAll(keepingCapacity:)` allocated a new array every iteration).
            // The early bodies first, each round: a flush that resumes a connection may queue
            // another log batch, which is written before that round's sends.
            while !beforeEndOfIteration.isEmpty || !endOfIteration.isEmpty {
                while !beforeEndOfIteration.isEmpty {
                    swap(&beforeEndOfIteration, &runningBeforeEndOfIteration)
                    for d in runningBeforeEndOfIteration { event &+= 1; d() }
                    runningBeforeEndOfIteration.removeAll(keepingCapacity: true)
                }
                swap(&endOfIteration, &runningEndOfIteration)
                for d in runningEndOfIteration { event &+= 1; d() }
                runningEndOfIteration.removeAll(keepingCapacity: true)
            }
            let now = monotonicSeconds()
            if now - lastTick >= tickInterval {
                lastTick = now
                event &+= 1
                tick()
            }
            if stop { break }
        }
    }
}
