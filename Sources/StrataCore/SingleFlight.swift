/// Runs one computation per key at a time: callers that ask for a key while it is being
/// computed wait and share the result (groupcache's singleflight). Thread-safe; blocking.
///
/// Keys are compared with `==` (use `ItemKey` for items: exact bytes, never a lossy string).
/// Cost: one dictionary entry per computation in flight; a waiter blocks its thread.
public final class SingleFlight<Key: Hashable, Value>: @unchecked Sendable {
    private let lock = Lock()
    private var inFlight: [Key: Completion<Result<Value, Error>>] = [:]

    public init() {}

    /// The result of `body` for `key`, computed once however many ask at the same time.
    /// `shared` is true for callers that waited on someone else's computation.
    public func run(_ key: Key, _ body: () throws -> Value) throws -> (value: Value, shared: Bool) {
        let (waitOn, mine): (Completion<Result<Value, Error>>, Bool) = lock.withLock {
            if let c = inFlight[key] { return (c, false) }
            let c = Completion<Result<Value, Error>>()
            inFlight[key] = c
            return (c, true)
        }
        if !mine { return (try waitOn.wait().get(), true) }
        let result = Result { try body() }
        lock.withLock { inFlight[key] = nil }
        waitOn.fulfil(result)
        return (try result.get(), false)
    }
}

/// Runs an expensive read for many callers at once: at most one `body` runs at a time, and
/// every caller gets the result of a run that started after it called (so it sees everything
/// done before its call), shared with the callers who waited beside it. N concurrent callers
/// cost at most two runs, not N. Thread-safe; a run that throws fails only the callers that
/// started it or waited for it.
public final class SharedRun<R>: @unchecked Sendable {
    private let cond = ConditionLock()
    private var running = false
    private var started: UInt64 = 0
    private var last: (run: UInt64, result: Result<R, Error>)?

    public init() {}

    public func run(_ body: () throws -> R) throws -> R {
        cond.lock()
        defer { cond.unlock() }
        let arrived = started
        while true {
            if let l = last, l.run > arrived { return try l.result.get() }
            if !running {
                running = true
                started += 1
                let mine = started
                cond.unlock()
                let r = Result { try body() }
                cond.lock()
                last = (mine, r)
                running = false
                cond.broadcast()
                return try r.get()
            }
            cond.wait()
        }
    }
}
