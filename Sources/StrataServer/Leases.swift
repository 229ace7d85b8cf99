import Synchronization
import StrataCore

/// The node's read-through leases (PROTOCOL.md §7.4.1): at most one holder per key, so one
/// client fills a missing or stale key while the others are told it is being filled.
///
/// Guarantees: a lease lasts `timeout` seconds from its grant (a loader that dies blocks the
/// key no longer than that); every token is drawn at random (64 bits, never 0) from the
/// injected source — the system's cryptographic generator by default — so another client
/// cannot guess a token to fill or release a lease it does not hold, and a token from before a
/// restart is not mistaken for a new one (a repeat has a chance of about n²/2⁶⁴). Any write
/// that changes the key (SET, INCR/DECR, DELETE, INVALIDATE, FLUSH) revokes, so a fill
/// computed before it is refused (LEASE_LOST). Leases live in memory only: not persisted,
/// not replicated.
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
    private var entries: [ItemKey: Entry] = [:] { didSet { entryCount.store(entries.count, ordering: .relaxed) } }
    /// `entries.count`, readable without the lock: a write to a key when no lease is held (the
    /// common case) costs one atomic load.
    private let entryCount = Atomic<Int>(0)
    private let timeoutMicros: Int64
    private let capacity: Int
    private let clock: any Clock
    private let tokens: @Sendable () -> UInt64

    /// `tokens` draws a lease token (a 0 is drawn again); tests inject a fixed sequence.
    public init(timeout: Double, capacity: Int = 100_000, clock: any Clock = SystemClock(),
                tokens: @escaping @Sendable () -> UInt64 = { UInt64.random(in: 1...UInt64.max) }) {
        timeoutMicros = max(1, Int64(min(max(timeout, 0), 1e9) * 1_000_000))
        self.capacity = max(1, capacity)
        self.clock = clock
        self.tokens = tokens
    }

    /// Grants the lease on `id` unless a live one is held.
    public func acquire(_ id: ItemKey) -> Grant {
        let now = clock.nowMicros()
        return lock.withLock {
            if let e = entries[id], e.expires > now { return .held(remaining: Double(e.expires - now) / 1e6) }
            if entries[id] == nil && entries.count >= capacity {
                entries = entries.filter { $0.value.expires > now }
                if entries.count >= capacity { return .full }
            }
            var token = tokens()
            while token == 0 { token = tokens() }
            entries[id] = Entry(token: token, expires: now + timeoutMicros)
            return .granted(token: token)
        }
    }

    /// Whether `token` holds the live lease on `id`.
    public func holds(_ id: ItemKey, token: UInt64) -> Bool {
        let now = clock.nowMicros()
        return lock.withLock {
            guard let e = entries[id] else { return false }
            return e.token == token && e.expires > now
        }
    }

    /// Gives the lease back; false when `token` did not hold it (expired, revoked, someone else's).
    @discardableResult
    public func release(_ id: ItemKey, token: UInt64) -> Bool {
        let now = clock.nowMicros()
        return lock.withLock {
            guard let e = entries[id], e.token == token else { return false }
            entries[id] = nil
            return e.expires > now
        }
    }

    /// Drops any lease on `id` (the key was written, deleted or invalidated: a fill in progress
    /// is stale).
    public func revoke(_ id: ItemKey) {
        guard entryCount.load(ordering: .relaxed) > 0 else { return }
        _ = lock.withLock { entries.removeValue(forKey: id) }
    }

    /// Drops every lease in `namespace`, or every lease when it is nil (FLUSH). O(leases held).
    public func revokeAll(namespace: [UInt8]?) {
        guard entryCount.load(ordering: .relaxed) > 0 else { return }
        lock.withLock {
            guard let ns = namespace else { entries.removeAll(); return }
            entries = entries.filter { $0.key.namespace != ns }
        }
    }

    /// Live leases.
    public var count: Int {
        let now = clock.nowMicros()
        return lock.withLock { entries.values.reduce(0) { $0 + ($1.expires > now ? 1 : 0) } }
    }
}
