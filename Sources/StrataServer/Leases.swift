import StrataCore

/// The node's read-through leases (PROTOCOL.md §7.4.1): at most one holder per key, so one
/// client fills a missing or stale key while the others are told it is being filled.
///
/// Guarantees: a lease lasts `timeout` seconds from its grant (a loader that dies blocks the
/// key no longer than that); a token is never reused by this table (a random 64-bit start,
/// then +1 per grant, so a token from before a restart is not mistaken for a new one);
/// DELETE and INVALIDATE revoke, so a fill computed before them is refused (LEASE_LOST).
/// Leases live in memory only: not persisted, not replicated.
///
/// Cost: one dictionary entry (key identity + 16 bytes) per held lease; at most `capacity`
/// entries — past that, expired ones are swept (O(n), only when full) and if none expired no
/// lease is granted (the caller loads without one). Thread-safe (one lock, O(1) per call).
public final class LeaseTable: @unchecked Sendable {
    public enum Grant: Equatable, Sendable {
        case granted(token: UInt64)
        /// Another client holds it; `remaining` seconds until it expires.
        case held(remaining: Double)
        /// The table is full of live leases.
        case full
    }

    private struct Entry { var token: UInt64; var expires: Int64 }

    private let lock = Lock()
    private var entries: [[UInt8]: Entry] = [:]
    private var nextToken: UInt64
    private let timeoutMicros: Int64
    private let capacity: Int
    private let clock: any Clock

    public init(timeout: Double, capacity: Int = 100_000, clock: any Clock = SystemClock()) {
        timeoutMicros = max(1, Int64(timeout * 1_000_000))
        self.capacity = max(1, capacity)
        self.clock = clock
        nextToken = UInt64.random(in: 1...(UInt64.max >> 1))
    }

    /// Grants the lease on `id` unless a live one is held.
    public func acquire(_ id: [UInt8]) -> Grant {
        let now = clock.nowMicros()
        return lock.withLock {
            if let e = entries[id], e.expires > now { return .held(remaining: Double(e.expires - now) / 1e6) }
            if entries[id] == nil && entries.count >= capacity {
                entries = entries.filter { $0.value.expires > now }
                if entries.count >= capacity { return .full }
            }
            nextToken &+= 1
            if nextToken == 0 { nextToken = 1 }
            entries[id] = Entry(token: nextToken, expires: now + timeoutMicros)
            return .granted(token: nextToken)
        }
    }

    /// Whether `token` holds the live lease on `id`.
    public func holds(_ id: [UInt8], token: UInt64) -> Bool {
        let now = clock.nowMicros()
        return lock.withLock {
            guard let e = entries[id] else { return false }
            return e.token == token && e.expires > now
        }
    }

    /// Gives the lease back; false when `token` did not hold it (expired, revoked, someone else's).
    @discardableResult
    public func release(_ id: [UInt8], token: UInt64) -> Bool {
        let now = clock.nowMicros()
        return lock.withLock {
            guard let e = entries[id], e.token == token else { return false }
            entries[id] = nil
            return e.expires > now
        }
    }

    /// Drops any lease on `id` (the key was deleted or invalidated: a fill in progress is stale).
    public func revoke(_ id: [UInt8]) {
        _ = lock.withLock { entries.removeValue(forKey: id) }
    }

    /// Live leases.
    public var count: Int {
        let now = clock.nowMicros()
        return lock.withLock { entries.values.reduce(0) { $0 + ($1.expires > now ? 1 : 0) } }
    }
}
