#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A mutual-exclusion lock over `pthread_mutex_t`.
///
/// Used instead of `Synchronization.Mutex` because it can be stored in classes that are shared
/// across threads without wrapping state, and because ThreadSanitizer understands it (it
/// reports false races inside `Mutex.withLock`). Not recursive. Cost: one uncontended
/// lock/unlock pair is ~20 ns.
public final class Lock: @unchecked Sendable {
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>

    public init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    @inlinable public func lock() { pthread_mutex_lock(mutex) }
    @inlinable public func unlock() { pthread_mutex_unlock(mutex) }

    @inlinable
    public func withLock<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}

/// A lock with a condition variable, for a thread that waits for work or for a result.
public final class ConditionLock: @unchecked Sendable {
    let mutex: UnsafeMutablePointer<pthread_mutex_t>
    let cond: UnsafeMutablePointer<pthread_cond_t>

    public init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        cond = .allocate(capacity: 1)
        cond.initialize(to: pthread_cond_t())
        pthread_cond_init(cond, nil)
    }

    deinit {
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        cond.deallocate()
        mutex.deallocate()
    }

    public func lock() { pthread_mutex_lock(mutex) }
    public func unlock() { pthread_mutex_unlock(mutex) }
    /// Waits (the lock must be held); returns with the lock held again.
    public func wait() { pthread_cond_wait(cond, mutex) }
    /// Waits at most `seconds` (the lock must be held).
    public func wait(seconds: Double) {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        let total = Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9 + seconds
        ts.tv_sec = Int(total)
        ts.tv_nsec = Int((total - Double(Int(total))) * 1e9)
        pthread_cond_timedwait(cond, mutex, &ts)
    }
    public func signal() { pthread_cond_signal(cond) }
    public func broadcast() { pthread_cond_broadcast(cond) }

    public func withLock<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}

/// A one-shot result slot that one thread fills and another waits on.
public final class Completion<T>: @unchecked Sendable {
    private let cond = ConditionLock()
    private var value: T?

    public init() {}

    /// Wakes the waiters after releasing the lock, so a woken waiter does not block at once on
    /// the lock this thread still holds (a second sleep and wake-up per completion). The
    /// caller's reference keeps `self` alive until this returns.
    public func fulfil(_ v: T) {
        cond.lock()
        value = v
        cond.unlock()
        cond.broadcast()
    }

    public func wait() -> T {
        cond.lock()
        defer { cond.unlock() }
        while value == nil { cond.wait() }
        return value!
    }

    /// Waits at most `seconds`; nil when nothing arrived in time.
    public func wait(seconds: Double) -> T? {
        let deadline = monotonicSeconds() + seconds
        cond.lock()
        defer { cond.unlock() }
        while value == nil {
            let left = deadline - monotonicSeconds()
            if left <= 0 { return nil }
            cond.wait(seconds: left)
        }
        return value
    }
}

/// A counting gate on bytes: `acquire(n)` waits while others hold more than `limit - n` (one
/// acquisition larger than the limit runs alone). For bounding the memory of work in flight.
public final class ByteGate: @unchecked Sendable {
    private let cond = ConditionLock()
    private var held = 0
    public let limit: Int
    public init(limit: Int) { self.limit = max(1, limit) }

    /// With `mayStart`, also waits (looking every 10 ms) while it says no — memory held
    /// elsewhere that this acquisition must not add to; it is told the bytes the gate would
    /// hold with this acquisition, and whether it would be the only one — for at most `maxWait`
    /// seconds: then it gives up and returns false, holding nothing (the bound is never passed
    /// by a wait that ran out). True once acquired.
    @discardableResult
    public func acquire(_ n: Int, mayStart: ((_ held: Int, _ alone: Bool) -> Bool)? = nil, maxWait: Double = 5) -> Bool {
        let deadline = monotonicSeconds() + maxWait
        cond.lock()
        defer { cond.unlock() }
        while true {
            let refused = mayStart.map { !$0(held + n, held == 0) } ?? false
            if !(held > 0 && held + n > limit) && !refused { break }
            if refused && monotonicSeconds() >= deadline { return false }
            cond.wait(seconds: 0.01)
        }
        held += n
        return true
    }

    public func release(_ n: Int) {
        cond.lock()
        held -= n
        cond.unlock()
        cond.broadcast()
    }

    /// Bytes held now.
    public var inUse: Int { cond.withLock { held } }
}
