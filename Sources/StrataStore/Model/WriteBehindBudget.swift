import Synchronization

/// The bytes of write-behind writes answered and not yet in the log file
/// (`StoreConfiguration.maxWriteBehindBytes`). Guarantees: `tryReserve` never lets the sum pass
/// the limit, even when many threads reserve at once (compare-and-swap); a write that cannot
/// reserve waits for the log like a durable write (back-pressure, not loss). Costs one atomic
/// compare-and-swap per write-behind write and one atomic add when its record is written.
final class WriteBehindBudget: Sendable {
    let limit: Int
    private let used = Atomic<Int>(0)
    private let peak = Atomic<Int>(0)

    init(limit: Int) { self.limit = max(0, limit) }

    /// Reserves `bytes`; false (nothing reserved) when that would pass the limit.
    func tryReserve(_ bytes: Int) -> Bool {
        var current = used.load(ordering: .relaxed)
        while true {
            guard current + bytes <= limit else { return false }
            let (done, now) = used.compareExchange(expected: current, desired: current + bytes, ordering: .relaxed)
            if done {
                peak.max(current + bytes, ordering: .relaxed)
                return true
            }
            current = now
        }
    }

    func release(_ bytes: Int) { used.subtract(bytes, ordering: .relaxed) }

    /// Bytes reserved now, and the most ever reserved at once (for stats and tests).
    var bytes: Int { used.load(ordering: .relaxed) }
    var peakBytes: Int { peak.load(ordering: .relaxed) }

    /// What a write-behind write holds until its record is written: its value, key and
    /// namespace, and the record's fixed fields.
    static func cost(_ op: WriteOp, key: [UInt8], namespace: [UInt8]) -> Int {
        let value: Int
        if case .set(let v, _, _, let ext, _, _, _) = op { value = v.count + ext.count } else { value = 0 }
        return value + key.count + namespace.count + 64
    }
}
