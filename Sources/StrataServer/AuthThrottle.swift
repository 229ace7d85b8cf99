import StrataCore

/// Slows down token guessing: failed authentications (HELLO with a wrong token, or a memcached
/// authentication `set`) are counted per source address, and past `threshold` failures within
/// `window` seconds each further failure from that address is answered only after a delay —
/// `firstDelay`, doubling with each failure, at most `maxDelay`. A correct token is never
/// delayed nor refused, and does not reset the count (so clients sharing a NAT or pod address
/// with a guesser keep working, and the guesser gains nothing from their successes).
///
/// Guarantees: at most `capacity` addresses are tracked (an address's entry expires `window`
/// seconds after its last failure; when full, expired entries go first, then the entry with
/// the oldest last failure); at most one log line per address per `logInterval` (`Decision.log`,
/// with the failures left out since). `threshold` 0 turns the delays off (failures are still
/// counted and logged). Time comes from the injected `Clock`, so the policy is
/// tested without sleeping. Thread-safe (one lock per failure); a failure costs a dictionary
/// lookup, and O(capacity) only when the table is full.
final class AuthThrottle: @unchecked Sendable {
    struct Decision: Equatable {
        /// Seconds to wait before answering the failure (0: at once).
        var delay: Double
        /// Failures from this address within the window, this one included.
        var failures: Int
        /// Write a log line for this failure; `suppressed` lines were left out since the last.
        var log: Bool
        var suppressed: Int
    }

    let threshold: Int
    let window: Double
    let firstDelay: Double
    let maxDelay: Double
    let capacity: Int
    let logInterval: Double
    private let clock: any Clock
    private let lock = Lock()
    private struct Entry { var failures: Int; var last: Double; var logged: Double; var suppressed: Int }
    private var entries: [String: Entry] = [:]

    init(threshold: Int = 5, window: Double = 60, firstDelay: Double = 0.25, maxDelay: Double = 4,
         capacity: Int = 10_000, logInterval: Double = 10, clock: any Clock = MonotonicClock()) {
        self.threshold = threshold; self.window = window; self.firstDelay = firstDelay; self.maxDelay = maxDelay
        self.capacity = capacity; self.logInterval = logInterval; self.clock = clock
    }

    /// The delay for the `failures`th failure within the window.
    func delay(forFailure failures: Int) -> Double {
        guard threshold > 0, failures > threshold else { return 0 }
        let steps = min(failures - threshold - 1, 30)
        return min(maxDelay, firstDelay * Double(1 << steps))
    }

    /// Records one failure from `address` and says how to answer it.
    func failed(_ address: String) -> Decision {
        let now = Double(clock.nowMicros()) / 1e6
        return lock.withLock {
            var e = entries[address].flatMap { now - $0.last < window ? $0 : nil }
                ?? Entry(failures: 0, last: now, logged: -Double.infinity, suppressed: 0)
            if entries[address] == nil && entries.count >= capacity { makeRoom(now) }
            e.failures += 1
            e.last = now
            var d = Decision(delay: delay(forFailure: e.failures), failures: e.failures, log: false, suppressed: 0)
            if now - e.logged >= logInterval {
                d.log = true
                d.suppressed = e.suppressed
                e.logged = now
                e.suppressed = 0
            } else {
                e.suppressed += 1
            }
            entries[address] = e
            return d
        }
    }

    /// Addresses tracked now (expired entries included until room is needed).
    var count: Int { lock.withLock { entries.count } }

    private func makeRoom(_ now: Double) {
        entries = entries.filter { now - $0.value.last < window }
        if entries.count >= capacity, let oldest = entries.min(by: { $0.value.last < $1.value.last }) {
            entries[oldest.key] = nil
        }
    }
}

/// `monotonicSeconds()` as a `Clock` (µs): for intervals that must not jump with the wall clock.
struct MonotonicClock: Clock {
    func nowMicros() -> Int64 { Int64(monotonicSeconds() * 1e6) }
}
