import Dispatch
import Glibc
import StrataCore
import StrataStore

/// `strata-bench store`: the embeddable store against a plain SQLite baseline, in one run.
///
/// Per value size (100 B, 1 KiB, 10 KiB) and round:
/// - memory set/get: one thread, `.memory` tier;
/// - disk set: 64 threads, each waiting for its write to return (group commit at the log), `.disk`
///   tier, until the backlog is in SQLite (`sync`);
/// - disk get: one thread, `.disk` tier (point reads);
/// - SQLite baseline: the same rows written with one prepared statement in transactions of 100
///   rows (WAL, synchronous=NORMAL), then point reads by primary key.
/// Values are random bytes, so compression neither helps nor hides anything; the JSON figure
/// is measured separately on JSON-like 10 KiB documents.
struct StoreBench {
    let json: Bool
    let rounds: Int
    let ops: Int
    let openDir: String
    let skipOpen: Bool
    let skipFootprint: Bool

    init(arguments: [String]) throws {
        let o = try Options(arguments, valued: ["--rounds", "--ops", "--open-dir"],
                            boolean: ["--json", "--skip-open", "--skip-memory-footprint"])
        json = o.flags.contains("--json")
        rounds = try o.int("--rounds", 3)
        ops = try o.int("--ops", 100_000)
        openDir = o.values["--open-dir"] ?? "/tmp/strata-bench-open-1m"
        skipOpen = o.flags.contains("--skip-open")
        skipFootprint = o.flags.contains("--skip-memory-footprint")
    }

    struct Figures {
        var memoryGet: [Double] = [], memorySet: [Double] = [], diskGet: [Double] = [], diskSet: [Double] = []
        var sqliteGet: [Double] = [], sqliteSet: [Double] = []
        var setRatio: [Double] = [], getRatio: [Double] = []
        /// Writes per commit during the 64-writer phase (how well group commit gathers).
        var rowsPerCommit: [Double] = []
    }

    func run() throws {
        var footprint: Double? = nil
        if !skipFootprint { footprint = try measureFootprintInChild() } // first, in a fresh process
        let sizes = [100, 1024, 10 * 1024]
        var figures = Dictionary(uniqueKeysWithValues: sizes.map { ($0, Figures()) })
        var jsonRatios: [Double] = []
        var openMs: [Double] = []
        if !skipOpen { try prepareOpenStore() }
        for round in 0..<rounds {
            for size in sizes {
                let n = size >= 10 * 1024 ? max(1000, ops / 4) : ops
                try measure(size: size, n: n, seed: UInt64(round * 1000 + size), into: &figures[size]!)
            }
            jsonRatios.append(try measureJSONRatio())
            if !skipOpen { openMs.append(try measureOpen()) }
            if !json { printErr("round \(round + 1)/\(rounds) done") }
        }
        report(sizes: sizes, figures: figures, jsonRatio: median(jsonRatios), openMs: skipOpen ? nil : median(openMs), footprint: footprint)
    }

    private func tempDir(_ tag: String) -> String {
        var template = Array("/tmp/strata-bench-\(tag)-XXXXXX".utf8CString)
        return template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
    }

    private func removeTree(_ path: String) {
        _ = system("rm -rf '\(path)'")
    }

    /// Runs `body` on `n` OS threads at once (Dispatch's concurrentPerform would use one per
    /// core, which is not "64 concurrent writers") and waits for all.
    private func runThreads(_ n: Int, _ body: @escaping @Sendable (Int) -> Void) {
        let left = Counter()
        let done = Completion<Void>()
        left.add(n)
        for t in 0..<n {
            startThread(name: "bench") {
                body(t)
                left.add(-1)
                if left.load() == 0 { done.fulfil(()) }
            }
        }
        done.wait()
    }

    /// 16-byte keys: the prefix and 12 hex digits of a hash of `i`, so consecutive writes land
    /// at random places in the index, as cache keys (URLs, ids, hashes) do — for the store and
    /// the baseline alike.
    private func key(_ prefix: String, _ i: Int) -> [UInt8] {
        var h = UInt64(i) &* 0x9E37_79B9_7F4A_7C15
        h ^= h >> 29
        let digits = Array("0123456789abcdef".utf8)
        var out = Array(prefix.utf8)
        for _ in 0..<12 { out.append(digits[Int(h & 15)]); h >>= 4 }
        return out
    }

    private func measure(size: Int, n: Int, seed: UInt64, into f: inout Figures) throws {
        var rng = SplitMix(seed: seed)
        let values = (0..<64).map { _ in rng.bytes(size) }
        let dir = tempDir("store")
        defer { removeTree(dir) }
        var config = StoreConfiguration(directory: dir + "/store")
        config.memoryCostLimit = 4 << 30
        config.quickCheckOnOpen = false
        let store = try TieredCache(configuration: config)

        // Memory tier.
        var t0 = monotonicSeconds()
        for i in 0..<n { _ = try store.set(key("memk", i), values[i & 63], options: SetOptions(tiers: .memory)) }
        f.memorySet.append(Double(n) / (monotonicSeconds() - t0))
        t0 = monotonicSeconds()
        var hits = 0
        for _ in 0..<n { if try store.get(key("memk", Int(rng.next() % UInt64(n))), tiers: .memory) != nil { hits += 1 } }
        f.memoryGet.append(Double(n) / (monotonicSeconds() - t0))
        precondition(hits == n, "memory tier lost items during the benchmark")

        // Disk tier: 64 concurrent writers, each waiting for its write.
        let writers = 64
        let perWriter = n / writers
        let errors = Counter()
        t0 = monotonicSeconds()
        let commitsBefore = store.stats().commits
        runThreads(writers) { w in
            for j in 0..<perWriter {
                let i = w * perWriter + j
                do { _ = try store.set(key("dskk", i), values[i & 63], options: SetOptions(tiers: .disk)) } catch { errors.add() }
            }
        }
        let written = perWriter * writers
        // Writes are answered at the durability log; the time to drain the backlog into
        // SQLite is part of the figure (issue 15), so the baseline compares like with like.
        try store.sync()
        f.diskSet.append(Double(written) / (monotonicSeconds() - t0))
        f.rowsPerCommit.append(Double(written) / Double(max(1, store.stats().commits - commitsBefore)))
        precondition(errors.load() == 0, "disk writes failed during the benchmark")
        t0 = monotonicSeconds()
        hits = 0
        for _ in 0..<n { if try store.get(key("dskk", Int(rng.next() % UInt64(written))), tiers: .disk) != nil { hits += 1 } }
        f.diskGet.append(Double(n) / (monotonicSeconds() - t0))
        precondition(hits == n, "disk tier lost items during the benchmark")
        store.close()

        // Plain SQLite baseline, same rows.
        let db = try SQLiteConnection(path: dir + "/baseline.db")
        try db.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; CREATE TABLE kv(key BLOB PRIMARY KEY, value BLOB NOT NULL)")
        let ins = try db.statement("INSERT OR REPLACE INTO kv(key, value) VALUES(?, ?)")
        t0 = monotonicSeconds()
        var i = 0
        while i < written {
            try db.execute("BEGIN")
            for _ in 0..<100 where i < written {
                ins.bind(1, key("dskk", i))
                ins.bind(2, values[i & 63])
                try ins.run()
                i += 1
            }
            try db.execute("COMMIT")
        }
        f.sqliteSet.append(Double(written) / (monotonicSeconds() - t0))
        let sel = try db.statement("SELECT value FROM kv WHERE key=?")
        t0 = monotonicSeconds()
        hits = 0
        for _ in 0..<n {
            sel.bind(1, key("dskk", Int(rng.next() % UInt64(written))))
            if try sel.step() { if !sel.bytes(0).isEmpty { hits += 1 } }
            sel.reset()
        }
        f.sqliteGet.append(Double(n) / (monotonicSeconds() - t0))
        precondition(hits == n, "baseline lost rows")
        f.setRatio.append(f.diskSet.last! / f.sqliteSet.last!)
        f.getRatio.append(f.diskGet.last! / f.sqliteGet.last!)
    }

    private func measureJSONRatio() throws -> Double {
        let dir = tempDir("json")
        defer { removeTree(dir) }
        var config = StoreConfiguration(directory: dir)
        config.quickCheckOnOpen = false
        let store = try TieredCache(configuration: config)
        defer { store.close() }
        for i in 0..<200 {
            _ = try store.set(key("json", i), jsonLikeValue(size: 10 * 1024, seed: UInt64(i)), options: SetOptions(tiers: .disk))
        }
        return store.stats().compressionRatio
    }

    /// Creates the 1,000,000-item store once; later runs reuse it.
    private func prepareOpenStore() throws {
        var st = stat()
        if stat(openDir + "/ready", &st) == 0 { return }
        removeTree(openDir)
        if !json { printErr("creating \(openDir) with 1,000,000 items (once)…") }
        var config = StoreConfiguration(directory: openDir)
        config.quickCheckOnOpen = false
        config.memoryCostLimit = 64 << 20
        let store = try TieredCache(configuration: config)
        var rng = SplitMix(seed: 99)
        let errors = Counter()
        runThreads(64) { w in
            var local = SplitMix(seed: UInt64(w))
            for j in 0..<(1_000_000 / 64 + 1) {
                let i = j * 64 + w
                if i >= 1_000_000 { break }
                do { _ = try store.set(key("open", i), local.bytes(100), options: SetOptions(tiers: .disk)) } catch { errors.add() }
            }
        }
        _ = rng.next()
        store.close()
        guard errors.load() == 0 else { throw UsageError(message: "could not create the 1M-item store") }
        let fd = open(openDir + "/ready", O_CREAT | O_WRONLY, 0o644)
        if fd >= 0 { close(fd) }
    }

    /// Milliseconds from opening the 1M-item store until its first get returns.
    private func measureOpen() throws -> Double {
        let t0 = monotonicSeconds()
        var config = StoreConfiguration(directory: openDir)
        config.memoryCostLimit = 64 << 20
        let store = try TieredCache(configuration: config)
        let got = try store.get(key("open", 777_777))
        let ms = (monotonicSeconds() - t0) * 1000
        precondition(got != nil, "the 1M-item store is missing items; delete \(openDir) and rerun")
        store.close()
        return ms
    }

    private func measureFootprintInChild() throws -> Double {
        let exe = CommandLine.arguments[0]
        guard let p = popen("'\(exe)' store-memory-child 1000000", "r") else { throw UsageError(message: "cannot start child") }
        var buf = [CChar](repeating: 0, count: 256)
        var out = ""
        while fgets(&buf, 256, p) != nil { out += String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) }
        pclose(p)
        guard let v = Double(out.trimmingCharacters()) else { throw UsageError(message: "child printed '\(out)'") }
        return v
    }

    private func report(sizes: [Int], figures: [Int: Figures], jsonRatio: Double, openMs: Double?, footprint: Double?) {
        let k = figures[1024]!
        if json {
            var fields: [(String, String)] = [
                ("memory_get_ops_per_s", fmt(median(k.memoryGet))), ("memory_set_ops_per_s", fmt(median(k.memorySet))),
                ("disk_get_ops_per_s", fmt(median(k.diskGet))), ("disk_set_ops_per_s", fmt(median(k.diskSet))),
                ("sqlite_get_ops_per_s", fmt(median(k.sqliteGet))), ("sqlite_set_ops_per_s", fmt(median(k.sqliteSet))),
                ("disk_set_vs_sqlite", fmt2(median(k.setRatio))), ("disk_get_vs_sqlite", fmt2(median(k.getRatio))),
                ("disk_set_rows_per_commit", fmt2(median(k.rowsPerCommit))),
                ("json_compression_ratio", fmt2(jsonRatio)),
                ("open_ms_1m_items", openMs.map(fmt2) ?? "null"),
                ("memory_bytes_per_item", footprint.map(fmt2) ?? "null"),
                ("rounds", String(rounds)), ("ops", String(ops)),
            ]
            for size in sizes where size != 1024 {
                let f = figures[size]!
                let tag = size == 100 ? "100b" : "10k"
                fields.append(("disk_set_ops_per_s_\(tag)", fmt(median(f.diskSet))))
                fields.append(("disk_get_ops_per_s_\(tag)", fmt(median(f.diskGet))))
                fields.append(("sqlite_set_ops_per_s_\(tag)", fmt(median(f.sqliteSet))))
                fields.append(("sqlite_get_ops_per_s_\(tag)", fmt(median(f.sqliteGet))))
                fields.append(("memory_get_ops_per_s_\(tag)", fmt(median(f.memoryGet))))
                fields.append(("memory_set_ops_per_s_\(tag)", fmt(median(f.memorySet))))
            }
            print("{" + fields.map { "\"\($0.0)\": \($0.1)" }.joined(separator: ", ") + "}")
            return
        }
        print("strata-bench store — medians of \(rounds) rounds, ops/s")
        print(pad("value", 8) + pad("mem get", 11) + pad("mem set", 11) + pad("disk get", 11) + pad("sqlite get", 11)
              + pad("ratio", 7) + pad("disk set", 11) + pad("sqlite set", 11) + pad("ratio", 7) + "rows/commit")
        for size in sizes {
            let f = figures[size]!
            print(pad(size == 100 ? "100 B" : size == 1024 ? "1 KiB" : "10 KiB", 8)
                  + pad(fmt(median(f.memoryGet)), 11) + pad(fmt(median(f.memorySet)), 11)
                  + pad(fmt(median(f.diskGet)), 11) + pad(fmt(median(f.sqliteGet)), 11) + pad(fmt2(median(f.getRatio)), 7)
                  + pad(fmt(median(f.diskSet)), 11) + pad(fmt(median(f.sqliteSet)), 11) + pad(fmt2(median(f.setRatio)), 7)
                  + fmt2(median(f.rowsPerCommit)))
        }
        print("JSON-like 10 KiB compression ratio: \(fmt2(jsonRatio))")
        if let o = openMs { print("open + first get, 1,000,000 items: \(fmt2(o)) ms") }
        if let m = footprint { print("memory overhead per item (16 B key, 100 B value): \(fmt2(m)) bytes") }
    }

    private func fmt(_ x: Double) -> String { String(Int(x.rounded())) }
    private func fmt2(_ x: Double) -> String { String(Double(Int((x * 100).rounded())) / 100) }
    private func pad(_ s: String, _ n: Int) -> String { s.count >= n ? s + " " : s + String(repeating: " ", count: n - s.count) }
}

extension String {
    func trimmingCharacters() -> String {
        var s = Substring(self)
        while let c = s.first, c.isWhitespace { s.removeFirst() }
        while let c = s.last, c.isWhitespace { s.removeLast() }
        return String(s)
    }
}

/// In a fresh process: resident memory growth per item after putting `count` items with 16-byte
/// keys and 100-byte values in the memory tier, minus the 116 bytes of key and value.
func memoryFootprintChild(count: Int) throws {
    var template = Array("/tmp/strata-bench-mem-XXXXXX".utf8CString)
    let dir = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
    defer { _ = system("rm -rf '\(dir)'") }
    var config = StoreConfiguration(directory: dir)
    config.memoryCostLimit = 8 << 30
    config.quickCheckOnOpen = false
    let store = try TieredCache(configuration: config)
    var rng = SplitMix(seed: 5)
    // Keys and values are built before the baseline is taken... no: building them all would add
    // their own arrays to the measurement. Build each on the fly; transient arrays are freed.
    let before = residentBytes(pid: getpid())
    for i in 0..<count {
        var s = String(i)
        while s.count < 12 { s = "0" + s }
        let k = Array(("memk" + s).utf8)
        _ = try store.set(k, rng.bytes(100), options: SetOptions(tiers: .memory))
    }
    let after = residentBytes(pid: getpid())
    precondition(store.stats().memory.items == count, "items were evicted; raise the limit")
    print(Double(after - before) / Double(count) - 116)
    store.close()
}
