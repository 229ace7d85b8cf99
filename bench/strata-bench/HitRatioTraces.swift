#if canImport(Glibc)
import Glibc
#endif
import StrataCore

/// A request trace for `strata-bench hitratio`: key ids (dense integers, so the simulators
/// can keep per-key state in arrays) and each key's value size. Pure and deterministic: the
/// same parameters and seed give the same trace.
struct Trace {
    let name: String
    let description: String
    /// The requested key ids, in order.
    let keys: [Int32]
    /// Every key id is below this.
    let universe: Int
    /// Keys of the popularity distribution are 0..<keySpace; ids above are one-time scan keys.
    let keySpace: Int
    let sizes: ValueSizes

    /// Value bytes of key `id`.
    @inline(__always) func valueSize(_ id: Int32) -> Int { sizes.size(of: id) }
}

/// Value sizes: fixed, or per key log-uniform in `min...max` (from a hash of the id and the
/// seed, so a key keeps its size across requests and traces).
struct ValueSizes: Sendable {
    let fixed: Int?
    let min: Int
    let max: Int
    let seed: UInt64

    static func fixed(_ n: Int) -> ValueSizes { ValueSizes(fixed: n, min: n, max: n, seed: 0) }
    static func variable(min: Int, max: Int, seed: UInt64) -> ValueSizes { ValueSizes(fixed: nil, min: min, max: max, seed: seed) }

    @inline(__always) func size(of id: Int32) -> Int {
        if let f = fixed { return f }
        var r = SplitMix(seed: seed ^ (UInt64(UInt32(bitPattern: id)) &* 0x9E37_79B9_7F4A_7C15))
        let u = Double(r.next() >> 11) / Double(1 << 53)
        return Swift.min(max, Int((Double(min) * pow(Double(max) / Double(min), u)).rounded()))
    }

    var label: String { fixed.map { "\($0) B values" } ?? "values \(min)–\(max) B log-uniform per key" }
}

/// Draws ranks 0..<n with probability ∝ 1/(rank+1)^alpha by binary search in the cumulative
/// distribution (n doubles of memory, ~log2 n steps a draw).
struct ZipfSampler {
    private let cdf: [Double]

    init(n: Int, alpha: Double) {
        var c = [Double](repeating: 0, count: n)
        var sum = 0.0
        for i in 0..<n { sum += 1 / pow(Double(i + 1), alpha); c[i] = sum }
        for i in 0..<n { c[i] /= sum }
        cdf = c
    }

    func draw(_ rng: inout SplitMix) -> Int {
        let u = Double(rng.next() >> 11) / Double(1 << 53)
        var lo = 0, hi = cdf.count - 1
        while lo < hi {
            let mid = (lo + hi) / 2
            if cdf[mid] >= u { hi = mid } else { lo = mid + 1 }
        }
        return lo
    }
}

/// The three traces. Ranks are mapped to key ids through a seeded permutation, so the hot
/// keys are not the low ids (the real tier hashes keys anyway; the simulators do not care).
enum TraceFactory {
    /// A random permutation of 0..<n (Fisher–Yates with SplitMix).
    static func permutation(_ n: Int, seed: UInt64) -> [Int32] {
        var p = (0..<n).map { Int32($0) }
        var rng = SplitMix(seed: seed)
        if n > 1 {
            for i in stride(from: n - 1, to: 0, by: -1) { p.swapAt(i, Int(rng.next() % UInt64(i + 1))) }
        }
        return p
    }

    /// Independent zipf requests over `keys` keys.
    static func zipf(keys: Int, alpha: Double, length: Int, seed: UInt64, sizes: ValueSizes) -> Trace {
        let z = ZipfSampler(n: keys, alpha: alpha)
        let perm = permutation(keys, seed: seed ^ 0xA5A5)
        var rng = SplitMix(seed: seed)
        var out = [Int32](); out.reserveCapacity(length)
        for _ in 0..<length { out.append(perm[z.draw(&rng)]) }
        return Trace(name: "zipf", description: "zipf alpha \(alpha) over \(keys) keys",
                     keys: out, universe: keys, keySpace: keys, sizes: sizes)
    }

    /// The zipf trace with a scan every `scanEvery` zipf requests: `scanLength` keys in a row,
    /// each requested once and never again (ids from `keys` up). The scans count in `length`.
    static func scanMixed(keys: Int, alpha: Double, length: Int, scanEvery: Int, scanLength: Int,
                          seed: UInt64, sizes: ValueSizes) -> Trace {
        let z = ZipfSampler(n: keys, alpha: alpha)
        let perm = permutation(keys, seed: seed ^ 0xA5A5)
        var rng = SplitMix(seed: seed)
        var out = [Int32](); out.reserveCapacity(length)
        var next = keys
        var sinceScan = 0
        while out.count < length {
            if sinceScan == scanEvery {
                for _ in 0..<min(scanLength, length - out.count) { out.append(Int32(next)); next += 1 }
                sinceScan = 0
            } else {
                out.append(perm[z.draw(&rng)])
                sinceScan += 1
            }
        }
        return Trace(name: "scan", description: "zipf alpha \(alpha) over \(keys) keys + a scan of \(scanLength) one-time keys every \(scanEvery) requests",
                     keys: out, universe: next, keySpace: keys, sizes: sizes)
    }

    /// Zipf requests whose rank → key mapping changes every `length / phases` requests: each
    /// phase has its own random permutation, so the hot set moves to keys that were cold.
    static func shifting(keys: Int, alpha: Double, length: Int, phases: Int, seed: UInt64, sizes: ValueSizes) -> Trace {
        let z = ZipfSampler(n: keys, alpha: alpha)
        var rng = SplitMix(seed: seed)
        var out = [Int32](); out.reserveCapacity(length)
        let phaseLength = max(1, (length + phases - 1) / phases)
        var perm: [Int32] = []
        for i in 0..<length {
            if i % phaseLength == 0 { perm = permutation(keys, seed: seed ^ UInt64(0xB0B0 + i / phaseLength)) }
            out.append(perm[z.draw(&rng)])
        }
        return Trace(name: "shifting", description: "zipf alpha \(alpha) over \(keys) keys, hot set reshuffled every \(phaseLength) requests (\(phases) phases)",
                     keys: out, universe: keys, keySpace: keys, sizes: sizes)
    }
}
