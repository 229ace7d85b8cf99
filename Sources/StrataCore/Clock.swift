#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A source of wall-clock time in microseconds since the Unix epoch.
///
/// Injected everywhere time matters (expiry, trimming, backoff) so tests can move time
/// forward without sleeping. Implementations must be safe to call from any thread.
public protocol Clock: Sendable {
    func nowMicros() -> Int64
}

extension Clock {
    public func nowSeconds() -> Int64 { nowMicros() / 1_000_000 }
}

/// The real clock: `clock_gettime(CLOCK_REALTIME)`.
public struct SystemClock: Clock {
    public init() {}
    public func nowMicros() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1_000_000 + Int64(ts.tv_nsec) / 1000
    }
}

/// A clock that moves only when told to. For tests.
public final class ManualClock: Clock, @unchecked Sendable {
    private let lock = Lock()
    private var now: Int64

    public init(micros: Int64 = 1_700_000_000_000_000) { now = micros }

    public func nowMicros() -> Int64 { lock.withLock { now } }
    public func advance(seconds: Double) { lock.withLock { now += Int64(seconds * 1_000_000) } }
    public func advance(micros: Int64) { lock.withLock { now += micros } }
    public func set(micros: Int64) { lock.withLock { now = micros } }
}

/// Monotonic seconds, for measuring durations (never for expiry).
public func monotonicSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// A hybrid logical clock: each call returns `max(now in µs, last + 1)`.
///
/// Versions from one node strictly increase, and versions from different nodes and cluster
/// clients order by wall time. `observe(_:)` moves the clock past a version seen from
/// elsewhere so later local versions are newer than it. Thread-safe; one lock per call.
public final class HybridLogicalClock: @unchecked Sendable {
    private let clock: any Clock
    private let lock = Lock()
    private var last: UInt64 = 0

    public init(clock: any Clock) { self.clock = clock }

    public func next() -> UInt64 {
        let now = UInt64(max(0, clock.nowMicros()))
        return lock.withLock {
            last = max(now, last &+ 1)
            return last
        }
    }

    public func observe(_ version: UInt64) {
        lock.withLock { if version > last { last = version } }
    }
}
