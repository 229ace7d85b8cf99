/// Lets one log line of a kind through per `interval` seconds and counts the rest, so a
/// failure repeated thousands of times a second costs one line a second. Thread-safe (one lock
/// per call); the time comes from the caller (monotonic seconds), so tests need no sleeping.
public final class LogRateLimiter: @unchecked Sendable {
    private let interval: Double
    private let lock = Lock()
    private var last = -Double.infinity
    private var suppressed = 0

    public init(interval: Double) { self.interval = interval }

    /// nil: leave the line out (it is counted). Otherwise write it, with the returned number of
    /// lines left out since the last one written.
    public func admit(now: Double) -> Int? {
        lock.withLock {
            guard now - last >= interval else {
                suppressed += 1
                return nil
            }
            last = now
            defer { suppressed = 0 }
            return suppressed
        }
    }
}
