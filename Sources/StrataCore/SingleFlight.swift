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
