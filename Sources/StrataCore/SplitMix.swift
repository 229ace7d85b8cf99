/// SplitMix64: a tiny, fast, deterministic random number generator (not cryptographic).
/// For benchmarks and tests that must be repeatable from a seed.
public struct SplitMix: RandomNumberGenerator, Sendable {
    public var state: UInt64
    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// `n` random bytes.
    public mutating func bytes(_ n: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: n)
        var i = 0
        while i < n {
            var r = next()
            for _ in 0..<8 where i < n { out[i] = UInt8(truncatingIfNeeded: r); r >>= 8; i += 1 }
        }
        return out
    }
}
