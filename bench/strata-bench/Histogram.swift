/// A latency histogram with bounded relative error (HDR-style): values below 64 µs get a
/// bucket each; above, each power of two is split into 64 buckets, so any reported
/// percentile is within 1/64 (≈ 1.6 %) of a recorded value. Memory is fixed (~3,600 counters)
/// however many samples arrive. Not thread-safe: one per connection thread, merged at the end.
struct LatencyHistogram {
    static let subBuckets = 64
    static let maxExponent = 40  // 2^40 µs ≈ 12 days
    private(set) var counts = [UInt64](repeating: 0, count: 64 + (maxExponent - 6) * 64)
    private(set) var total: UInt64 = 0
    private(set) var maxValue: Double = 0

    static func index(_ micros: Double) -> Int {
        let v = max(0, micros)
        if v < 64 { return Int(v) }
        var e = 6
        var scaled = v
        while scaled >= 128 && e < maxExponent - 1 { scaled /= 2; e += 1 }
        let m = min(63, Int(scaled) - 64)
        return 64 + (e - 6) * 64 + m
    }

    /// The largest value that falls in bucket `i`.
    static func upperBound(_ i: Int) -> Double {
        if i < 64 { return Double(i + 1) }
        let e = (i - 64) / 64 + 6
        let m = (i - 64) % 64
        return Double(64 + m + 1) * Double(1 << (e - 6))
    }

    mutating func record(micros: Double) {
        counts[Self.index(micros)] += 1
        total += 1
        maxValue = max(maxValue, micros)
    }

    mutating func merge(_ other: LatencyHistogram) {
        for i in 0..<counts.count { counts[i] += other.counts[i] }
        total += other.total
        maxValue = max(maxValue, other.maxValue)
    }

    /// The value at quantile `q` (0…1), as the upper bound of its bucket (never above the max).
    func percentile(_ q: Double) -> Double {
        guard total > 0 else { return 0 }
        let rank = max(1, UInt64((Double(total) * q).rounded(.up)))
        var seen: UInt64 = 0
        for (i, c) in counts.enumerated() where c > 0 {
            seen += c
            if seen >= rank { return min(Self.upperBound(i), maxValue) }
        }
        return maxValue
    }
}
