#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataStore

/// `strata-bench hitratio`: replays seeded traces through Strata's real memory tier (a
/// `TieredCache` used memory-only: GET with `tiers: .memory`, a miss followed by a SET with
/// `tiers: .memory`, as a look-aside cache does) and through the reference simulators (LRU,
/// SIEVE, S3-FIFO, W-TinyLFU) at equal memory, and prints each policy's hit ratio.
///
/// Equal memory: every policy gets the same byte capacity, a fraction of the key space's
/// bytes, where an item costs `key + value + overhead` (overhead 32 B: the memory tier's
/// 30-byte record header, rounded with a 12-byte key and a 100-byte value to a 144-byte chunk). The real tier gets that capacity as `memoryCostLimit`; it rounds records
/// to 8-byte size classes and splits the limit over its shards, so the items it held at the
/// end are printed beside the simulators' counts.
struct HitRatioBench {
    static let usage = """
    usage: strata-bench hitratio [options]
      Replays seeded traces through Strata's memory tier (memory-only TieredCache, GET miss → SET)
      and through reference simulators (LRU, SIEVE, S3-FIFO, W-TinyLFU) at equal memory.
      --requests N        requests per trace (default 2000000)
      --keys N            keys of the popularity distribution (default 1000000)
      --alpha A           zipf exponent (default 0.99)
      --seed N            trace seed (default 1)
      --traces LIST       comma-separated: zipf,scan,shifting (default all three)
      --cache-percent L   comma-separated cache sizes in % of the key space's bytes (default 1,5,10)
      --value-bytes N     fixed value size (default 100)
      --variable-sizes    per-key value sizes, log-uniform 16–4096 B, instead of fixed
      --scan-every N      scan trace: zipf requests before each scan (default 200000; a shorter trace has no scan)
      --scan-length N     scan trace: one-time keys per scan (default 50000)
      --phases N          shifting trace: popularity phases (default 8)
      --shards N          memory-tier shards of the real tier (default 16, the store's default)
      --skip-strata       simulators only
    Per-item charge: 12-byte key + value + 32 B. See bench/RESULTS.md for figures.
    """

    static let keyBytes = 12
    static let overhead = 32

    let requests: Int, keys: Int, alpha: Double, seed: UInt64
    let traces: [String], percents: [Double]
    let sizes: ValueSizes
    let scanEvery: Int, scanLength: Int, phases: Int, shards: Int
    let skipStrata: Bool

    init(arguments: [String]) throws {
        let o = try Options(arguments, valued: ["--requests", "--keys", "--alpha", "--seed", "--traces", "--cache-percent",
                                                "--value-bytes", "--scan-every", "--scan-length", "--phases", "--shards"],
                            boolean: ["--variable-sizes", "--skip-strata"])
        requests = try o.int("--requests", 2_000_000)
        keys = try o.int("--keys", 1_000_000)
        guard requests <= 50_000_000, keys <= 40_000_000 else { throw UsageError(message: "--requests is at most 50000000 and --keys at most 40000000") }
        let a = o.values["--alpha"] ?? "0.99"
        guard let alpha = Double(a), alpha > 0, alpha < 10 else { throw UsageError(message: "--alpha must be a number in (0, 10), got '\(a)'") }
        self.alpha = alpha
        seed = UInt64(try o.int("--seed", 1))
        traces = (o.values["--traces"] ?? "zipf,scan,shifting").split(separator: ",").map(String.init)
        for t in traces where !["zipf", "scan", "shifting"].contains(t) {
            throw UsageError(message: "unknown trace '\(t)' (zipf, scan, shifting)")
        }
        percents = try (o.values["--cache-percent"] ?? "1,5,10").split(separator: ",").map {
            guard let p = Double($0), p > 0, p <= 100 else { throw UsageError(message: "--cache-percent takes numbers in (0, 100], got '\($0)'") }
            return p
        }
        let valueBytes = try o.int("--value-bytes", 100)
        guard valueBytes <= 1 << 20 else { throw UsageError(message: "--value-bytes is at most 1048576") }
        sizes = o.flags.contains("--variable-sizes") ? .variable(min: 16, max: 4096, seed: seed ^ 0x51_2E5) : .fixed(valueBytes)
        scanEvery = try o.int("--scan-every", 200_000)
        scanLength = try o.int("--scan-length", 50_000)
        phases = try o.int("--phases", 8)
        shards = try o.int("--shards", 16)
        skipStrata = o.flags.contains("--skip-strata")
    }

    func makeTrace(_ name: String) -> Trace {
        switch name {
        case "zipf": return TraceFactory.zipf(keys: keys, alpha: alpha, length: requests, seed: seed, sizes: sizes)
        case "scan": return TraceFactory.scanMixed(keys: keys, alpha: alpha, length: requests, scanEvery: scanEvery,
                                                   scanLength: scanLength, seed: seed, sizes: sizes)
        default: return TraceFactory.shifting(keys: keys, alpha: alpha, length: requests, phases: phases, seed: seed, sizes: sizes)
        }
    }

    static func charge(_ trace: Trace, _ id: Int32) -> Int { keyBytes + trace.valueSize(id) + overhead }

    func run() throws {
        print("strata-bench hitratio — \(requests) requests a trace, seed \(seed), \(sizes.label); "
              + "per-item charge \(Self.keyBytes) B key + value + \(Self.overhead) B")
        for name in traces {
            let trace = makeTrace(name)
            var spaceBytes = 0
            for id in 0..<trace.keySpace { spaceBytes += Self.charge(trace, Int32(id)) }
            var seen = [Bool](repeating: false, count: trace.universe)
            var distinct = 0
            for id in trace.keys where !seen[Int(id)] { seen[Int(id)] = true; distinct += 1 }
            print("")
            print("trace \(trace.name): \(trace.description); key space \(spaceBytes) B; "
                  + "infinite-cache hit ratio \(formatDecimal(Double(requests - distinct) / Double(requests), 4))")
            for pct in percents {
                let capacity = Int(Double(spaceBytes) * pct / 100)
                let meanCharge = max(1, spaceBytes / trace.keySpace)
                print("  cache \(formatDecimal(pct, 1)) % = \(capacity) B (≈ \(capacity / meanCharge) items at the mean charge)"
                      + (skipStrata ? "" : "; strata: memoryCostLimit \(capacity) B over \(shards) shards"))
                print("  policy          hit ratio   items held   replay ns/request")
                if !skipStrata {
                    let r = try replayStrata(trace, capacity: capacity)
                    row("strata memory", Double(r.hits) / Double(requests), r.items, formatDecimal(r.seconds * 1e9 / Double(requests), 0))
                }
                let sims: [any PolicySimulator] = [
                    LRUSimulator(capacity: capacity, universe: trace.universe),
                    SIEVESimulator(capacity: capacity, universe: trace.universe),
                    S3FIFOSimulator(capacity: capacity, universe: trace.universe),
                    AdaptiveS3FIFOSimulator(capacity: capacity, universe: trace.universe),
                    SharedGhostAdaptiveS3FIFOSimulator(capacity: capacity, universe: trace.universe),
                    WTinyLFUSimulator(capacity: capacity, universe: trace.universe, expectedItems: capacity / meanCharge),
                ]
                for sim in sims {
                    var hits = 0
                    for id in trace.keys where sim.access(id, charge: Self.charge(trace, id)) { hits += 1 }
                    row(sim.name, Double(hits) / Double(requests), sim.itemCount, "-")
                }
            }
        }
    }

    private func row(_ name: String, _ ratio: Double, _ items: Int, _ ns: String) {
        func pad(_ s: String, _ n: Int, left: Bool = false) -> String {
            let fill = String(repeating: " ", count: max(0, n - s.count))
            return left ? fill + s : s + fill
        }
        print("  " + pad(name, 14) + pad(formatDecimal(ratio, 4), 11, left: true) + pad(String(items), 13, left: true) + pad(ns, 20, left: true))
    }

    /// Replays `trace` through a memory-only `TieredCache` whose memory tier may account
    /// `capacity` bytes (records and the S3-FIFO ghost queue), or with `countLimit`, hold that
    /// many items (bytes unlimited). Returns the hits, the items and accounted bytes held at
    /// the end, and the replay's wall time (key formatting, GETs and the SETs after misses).
    func replayStrata(_ trace: Trace, capacity: Int, countLimit: Int? = nil) throws -> (hits: Int, items: Int, bytes: Int, seconds: Double) {
        var template = Array("/tmp/strata-bench-hitratio-XXXXXX".utf8CString)
        let dir = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        defer { _ = system("rm -rf '\(dir)'") }
        var config = StoreConfiguration(directory: dir)
        config.memoryCostLimit = countLimit == nil ? capacity : Int.max
        if let countLimit { config.memoryCountLimit = countLimit }
        config.memoryShards = shards
        config.quickCheckOnOpen = false
        let store = try TieredCache(configuration: config)
        defer { store.close() }
        // One value per size, built before the clock starts.
        var values: [Int: [UInt8]] = [:]
        for s in sizes.min...sizes.max { values[s] = [UInt8](repeating: 0x61, count: s) }
        let byID = (0..<(sizes.max - sizes.min + 1)).map { values[sizes.min + $0]! }
        var key = Array("key:00000000".utf8)
        precondition(key.count == Self.keyBytes && trace.universe <= 100_000_000)
        let options = SetOptions(tiers: .memory)
        var hits = 0
        let t0 = monotonicSeconds()
        for id in trace.keys {
            var v = Int(id)
            for i in stride(from: 11, through: 4, by: -1) { key[i] = 0x30 + UInt8(v % 10); v /= 10 }
            if try store.get(key, tiers: .memory) != nil {
                hits += 1
            } else {
                _ = try store.set(key, byID[trace.valueSize(id) - sizes.min], options: options)
            }
        }
        let seconds = monotonicSeconds() - t0
        let m = store.stats().memory
        return (hits, m.items, m.bytes, seconds)
    }
}

/// `x` with `digits` decimals (no Foundation).
func formatDecimal(_ x: Double, _ digits: Int) -> String {
    var scale = 1.0
    for _ in 0..<digits { scale *= 10 }
    let n = Int((x * scale).rounded())
    if digits == 0 { return String(n) }
    let whole = n / Int(scale), frac = String(abs(n) % Int(scale))
    return (n < 0 && whole == 0 ? "-" : "") + String(whole) + "." + String(repeating: "0", count: digits - frac.count) + frac
}
