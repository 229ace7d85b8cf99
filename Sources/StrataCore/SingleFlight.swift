/// Runs one computation per key at a time: callers that ask for a key while it is being
/// computed wait and share the result (groupcache's singleflight). Thread-safe; blocking.
public final class SingleFlight<T>: @unchecked Sendable {
    private let lock = Lock()
    private var inFlight: [String: Completion<Result<T, Error>>] = [:]

    public init() {}

    /// The result of `body` for `key`, computed once however many ask at the same time.
    /// `shared` is true for callers that waited on someone else's computation.
    public func run(_ key: String, _ body: () throws -> T) throws -> (value: T, shared: Bool) {
        let (waitOn, mine): (Completion<Result<T, Error>>, Bool) = lock.withLock {
            if let c = inFlight[key] { return (c, false) }
            let c = Completion<Result<T, Error>>()
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
