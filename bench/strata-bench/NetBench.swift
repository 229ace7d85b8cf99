import Glibc
import StrataClient
import StrataCore
import StrataNet
import StrataWire

/// `strata-bench run`: network load against Strata, memcached and Redis with one load loop;
/// only the codec differs per target.
struct NetBench {
    struct Target {
        let kind: String       // strata | memcached | redis | cluster
        let host: String
        let port: UInt16
        /// A cluster target's nodes (the first is `host:port`).
        var nodes: [(host: String, port: UInt16)] = []
        /// Server processes whose CPU is counted (--server-pid, else found from the ports).
        var pids: [Int32] = []
        /// A Strata target's token (`--token-file` after its `--target`): every connection says
        /// HELLO with it first.
        var token: [UInt8]? = nil
        /// `KIND+tls=`: connections go through TLS (verified with --tls-ca).
        var tls = false
        var label: String { kind == "cluster" ? "cluster(\(nodes.count))@\(host):\(port)" : "\(kind)\(tls ? "+tls" : "")@\(host):\(port)" }
    }

    struct Workload {
        var getRatio = 0.9
        var keys = 100_000
        var zipf: Double? = nil
        var valueMin = 100
        var valueMax = 100
        /// `--values json`: JSON documents of one API's shape (ids, emails, dates, line items from
        /// a small vocabulary), cut to the value size, instead of random (incompressible) bytes.
        var jsonValues = false
        var connections = 50
        var pipeline = 1
        var duration = 5.0
        var maxOps = Int.max
        var preload = true
        /// Sets per second of the preload (`--preload-rate`; 0 = as fast as the server takes
        /// them). memcached's extstore drops items its flusher has not written yet when a
        /// preload outruns it; a bounded rate lets it keep every item (workload 6).
        var preloadRate = 0.0
        var strataTiers: UInt8 = 0
        var strataWriteBehind = false
        /// The namespace of every Strata GET and SET (`--namespace`; default the empty one).
        var strataNamespace: [UInt8] = []
        /// Copies per key for a cluster target.
        var replicas = 2
        /// Report the servers' resident memory per item after the preload.
        var memoryReport = false
        /// `+tls` targets: the CA that verifies the servers (and a client certificate).
        var tlsCA: String? = nil
        var tlsCert: String? = nil
        var tlsKey: String? = nil
    }

    struct Result {
        var ops = 0
        var seconds = 0.0
        var hits = 0, misses = 0, errors = 0
        var firstError: String?
        var histogram = LatencyHistogram()
        var cpuSeconds: Double?
        var throughput: Double { seconds > 0 ? Double(ops) / seconds : 0 }
        var hitRatio: Double { hits + misses > 0 ? Double(hits) / Double(hits + misses) : 0 }
        var cpuMicrosPerOp: Double? { cpuSeconds.map { ops > 0 ? $0 * 1e6 / Double(ops) : 0 } }
    }

    let targets: [Target]
    let workload: Workload
    let tlsContext: TLSContext?
    let rounds: Int
    let json: Bool
    let svgPath: String?

    static let usage = """
    usage: strata-bench run --target KIND=HOST:PORT [--target …] [--get-ratio 0.9] [--keys 100000]
             [--zipf 0.99] [--value-size 100 | --value-size 100-1000] [--values random|json] [--connections 50] [--pipeline 1]
             [--duration 5] [--ops N] [--no-preload] [--preload-rate SETS_PER_S] [--tiers memory|disk|all] [--write-behind]
             [--replicas 2] [--server-pid PID …] [--memory-report] [--rounds 1] [--json] [--svg FILE]
             [--token-file FILE] [--namespace NS]
      KIND is strata, memcached (text protocol), redis (RESP), or cluster=H:P,H:P,… (a Strata
      cluster through the cluster client: ring placement, --replicas copies, pipeline 1).
      strata+tls=… and redis+tls=… connect through TLS (a node's --tls-port, Redis's tls-port),
      verifying the server with --tls-ca FILE [--tls-cert FILE --tls-key FILE].
      --server-pid gives the server's PID for CPU per operation (one per target, in order; by
      default found from the listening port; a cluster sums its nodes). --memory-report prints
      each server's resident memory per item (beyond key and value) 5 s after the preload (once background work is done).
      With several targets and rounds, targets run alternately (A B A B …) and each figure is
      the median; ratios are to the first.
      --token-file FILE: the Strata target given just before authenticates with the token in FILE
      (HELLO on every connection). --namespace NS: Strata GETs and SETs use namespace NS.
      --preload-rate N: write the preload at N sets per second (default: as fast as the server
      takes them; memcached's extstore drops items when a preload outruns its flusher).
    """

    init(arguments: [String]) throws {
        var targets: [Target] = []
        var pids: [Int32] = []
        var w = Workload()
        var rounds = 1, json = false
        var svg: String? = nil
        var i = 0
        func value() throws -> String {
            guard i + 1 < arguments.count else { throw UsageError(message: "\(arguments[i]) needs a value") }
            i += 1
            return arguments[i]
        }
        func number(_ s: String, _ name: String) throws -> Double {
            guard let d = Double(s), d >= 0, d.isFinite else { throw UsageError(message: "\(name) must be a number, got '\(s)'") }
            return d
        }
        while i < arguments.count {
            let a = arguments[i]
            switch a {
            case "--target" where (i + 1 < arguments.count && arguments[i + 1].hasPrefix("cluster=")):
                let v = String(try value().dropFirst("cluster=".count))
                var nodes: [(String, UInt16)] = []
                for part in v.split(separator: ",") {
                    guard let colon = part.lastIndex(of: ":"), let port = UInt16(part[part.index(after: colon)...]) else {
                        throw UsageError(message: "--target cluster= needs HOST:PORT,HOST:PORT,…; '\(part)' is not")
                    }
                    nodes.append((String(part[..<colon]), port))
                }
                guard let first = nodes.first else { throw UsageError(message: "--target cluster= needs at least one node") }
                targets.append(Target(kind: "cluster", host: first.0, port: first.1, nodes: nodes))
            case "--target":
                let v = try value()
                guard let eq = v.firstIndex(of: "="), let colon = v.lastIndex(of: ":"),
                      let port = UInt16(v[v.index(after: colon)...]) else {
                    throw UsageError(message: "--target must be KIND=HOST:PORT, got '\(v)'")
                }
                var kind = String(v[..<eq])
                let tls = kind.hasSuffix("+tls")
                if tls { kind.removeLast(4) }
                guard ["strata", "memcached", "redis"].contains(kind) else { throw UsageError(message: "unknown target kind '\(kind)'") }
                var t = Target(kind: kind, host: String(v[v.index(after: eq)..<colon]), port: port)
                t.tls = tls
                targets.append(t)
            case "--token-file":
                let path = try value()
                guard !targets.isEmpty, targets[targets.count - 1].kind == "strata" else {
                    throw UsageError(message: "--token-file follows the --target strata=… it is for")
                }
                guard let f = fopen(path, "r") else { throw UsageError(message: "cannot read '\(path)'") }
                var bytes: [UInt8] = []
                while true { let ch = fgetc(f); if ch < 0 || ch == 10 || ch == 13 { break }; bytes.append(UInt8(ch)) }
                fclose(f)
                targets[targets.count - 1].token = bytes
            case "--namespace": w.strataNamespace = Array(try value().utf8)
            case "--get-ratio":
                w.getRatio = try number(try value(), a)
                guard w.getRatio <= 1 else { throw UsageError(message: "--get-ratio must be 0…1") }
            case "--keys": w.keys = max(1, Int(try number(try value(), a)))
            case "--zipf": w.zipf = try number(try value(), a)
            case "--value-size":
                let v = try value()
                let parts = v.split(separator: "-").compactMap { parseByteSize(String($0)) }
                guard parts.count == (v.contains("-") ? 2 : 1), parts.allSatisfy({ $0 >= 1 }), parts.first! <= parts.last! else {
                    throw UsageError(message: "--value-size must be N or MIN-MAX, got '\(v)'")
                }
                w.valueMin = parts.first!; w.valueMax = parts.last!
            case "--values":
                let v = try value()
                guard v == "random" || v == "json" else { throw UsageError(message: "--values must be random or json, got '\(v)'") }
                w.jsonValues = v == "json"
            case "--connections": w.connections = max(1, Int(try number(try value(), a)))
            case "--pipeline": w.pipeline = max(1, Int(try number(try value(), a)))
            case "--duration": w.duration = try number(try value(), a)
            case "--ops": w.maxOps = max(1, Int(try number(try value(), a)))
            case "--no-preload": w.preload = false
            case "--preload-rate": w.preloadRate = max(0, try number(try value(), a))
            case "--tiers":
                let v = try value()
                guard let t = Tiers(name: v) else { throw UsageError(message: "--tiers must be memory, disk or all") }
                w.strataTiers = t.rawValue
            case "--write-behind": w.strataWriteBehind = true
            case "--replicas": w.replicas = max(1, Int(try number(try value(), a)))
            case "--server-pid":
                guard let p = Int32(try value()), p > 0 else { throw UsageError(message: "--server-pid must be a process id") }
                pids.append(p)
            case "--memory-report": w.memoryReport = true
            case "--tls-ca": w.tlsCA = try value()
            case "--tls-cert": w.tlsCert = try value()
            case "--tls-key": w.tlsKey = try value()
            case "--rounds": rounds = max(1, Int(try number(try value(), a)))
            case "--json": json = true
            case "--svg": svg = try value()
            default: throw UsageError(message: "unknown option '\(a)'\n\(Self.usage)")
            }
            i += 1
        }
        guard !targets.isEmpty else { throw UsageError(message: "give at least one --target\n\(Self.usage)") }
        guard pids.count <= targets.count else { throw UsageError(message: "more --server-pid than --target") }
        for (i, p) in pids.enumerated() { targets[i].pids = [p] }
        if targets.contains(where: { $0.kind == "cluster" }) && w.pipeline > 1 {
            throw UsageError(message: "a cluster target runs at pipeline 1 (the cluster client is not pipelined)")
        }
        guard w.duration > 0 || w.maxOps < Int.max else { throw UsageError(message: "give --duration or --ops") }
        if targets.contains(where: { $0.tls }) {
            guard let ca = w.tlsCA else { throw UsageError(message: "+tls targets need --tls-ca FILE") }
            do { tlsContext = try TLSContext.client(ca: ca, certificate: w.tlsCert, key: w.tlsKey) } catch {
                throw UsageError(message: "\(error)")
            }
        } else { tlsContext = nil }
        self.targets = targets; workload = w; self.rounds = rounds; self.json = json; svgPath = svg
    }

    func codec(for t: Target) -> any LoadCodec {
        switch t.kind {
        case "memcached": return MemcachedLoadCodec()
        case "redis": return RedisLoadCodec()
        default:
            var c = StrataLoadCodec()
            c.tiers = workload.strataTiers
            c.writeBehind = workload.strataWriteBehind
            c.namespace = workload.strataNamespace
            return c
        }
    }

    func run() throws {
        var results: [[Result]] = Array(repeating: [], count: targets.count)
        let keys = KeySpace(count: workload.keys, zipf: workload.zipf)
        for t in targets where workload.preload {
            let pids = serverPIDs(t)
            func resident(_ field: String) -> Int { pids.reduce(0) { $0 + residentBytes(pid: $1, field: field) } }
            let before = (all: resident("VmRSS"), anon: resident("RssAnon"))
            try preload(t, keys)
            if !json { printErr("preloaded \(workload.keys) keys into \(t.label)") }
            if workload.memoryReport {
                // Measured once background work after the load is done (a Strata node applies
                // its log within ~1 s and gives its SQLite writer's cache back 2 s after the
                // last batch): steady-state memory per item, the same wait for every target.
                usleep(5_000_000)
                let all = resident("VmRSS") - before.all, anon = resident("RssAnon") - before.anon
                let payload = 14 + (workload.valueMin + workload.valueMax) / 2
                func perItem(_ bytes: Int) -> Int { Int((Double(bytes) / Double(workload.keys) - Double(payload)).rounded()) }
                print("memory \(t.label): \(workload.keys) items of \(payload) B (key + value): anonymous +\(anon >> 20) MiB = \(perItem(anon)) B per item beyond key and value; all resident (with mapped files) +\(all >> 20) MiB = \(perItem(all)) B")
            }
        }
        for round in 0..<rounds {
            for (i, t) in targets.enumerated() {
                results[i].append(try measure(t, keys, seed: UInt64(round * 100 + i)))
                if !json { printErr("round \(round + 1)/\(rounds) \(t.label) done") }
            }
        }
        report(results)
    }

    /// The processes whose CPU and memory count for `t`.
    func serverPIDs(_ t: Target) -> [Int32] {
        if !t.pids.isEmpty { return t.pids }
        if t.kind == "cluster" { return t.nodes.compactMap { pidListening(port: $0.port) } }
        return pidListening(port: t.port).map { [$0] } ?? []
    }

    func clusterClient(_ t: Target) throws -> ClusterClient {
        var c = ClusterConfiguration(nodes: t.nodes.map { NodeAddress(host: $0.host, port: $0.port) })
        c.replicas = min(workload.replicas, t.nodes.count)
        c.timeout = 5
        c.maxIdleConnectionsPerNode = workload.connections + 8
        return try ClusterClient(configuration: c)
    }

    /// Writes every key once (pipelined; a cluster through the client on 8 threads), so gets hit.
    func preload(_ t: Target, _ keys: KeySpace) throws {
        if t.kind == "cluster" {
            let client = try clusterClient(t)
            let failures = Counter()
            let group = Completion<Void>()
            let done = Counter()
            let threads = 8
            for th in 0..<threads {
                startThread(name: "bench-preload") {
                    var rng = SplitMix(seed: 42 &+ UInt64(th))
                    var i = th
                    while i < keys.count {
                        if (try? client.set(keys.key(i), self.valueBytes(&rng))) == nil { failures.add() }
                        i += threads
                    }
                    done.add()
                    if done.load() == threads { group.fulfil(()) }
                }
            }
            group.wait()
            if failures.load() > 0 { throw UsageError(message: "preload of \(t.label): \(failures.load()) writes failed") }
            return
        }
        var codec = codec(for: t)
        let conn = try connect(t, codec)
        var rng = SplitMix(seed: 42)
        var i = 0
        let started = monotonicSeconds()
        while i < keys.count {
            if workload.preloadRate > 0 {
                let due = started + Double(i) / workload.preloadRate
                let now = monotonicSeconds()
                if due > now { usleep(UInt32((due - now) * 1e6)) }
            }
            var out: [UInt8] = []
            let n = min(workload.preloadRate > 0 ? 10 : 100, keys.count - i)
            for j in 0..<n { codec.appendSet(keys.key(i + j), valueBytes(&rng), into: &out) }
            try conn.send(out)
            for _ in 0..<n {
                let r = try conn.readReply(codec)
                if case .error(let e) = r { throw UsageError(message: "preload of \(t.label) failed: \(e)") }
            }
            i += n
        }
    }

    /// A connection to `t`, authenticated with its token when it has one.
    func connect(_ t: Target, _ codec: any LoadCodec) throws -> RawConnection {
        let conn = try RawConnection(host: t.host, port: t.port, tls: t.tls ? tlsContext : nil)
        if let token = t.token {
            try conn.send(Request.hello(minVersion: Wire.version, maxVersion: Wire.version, token: token).frame(id: UInt32.max).encoded())
            if case .error(let e) = try conn.readReply(codec) { throw UsageError(message: "HELLO to \(t.label) failed: \(e)") }
        }
        return conn
    }

    func valueBytes(_ rng: inout SplitMix) -> [UInt8] {
        let n = workload.valueMin == workload.valueMax ? workload.valueMin
            : workload.valueMin + Int(rng.next() % UInt64(workload.valueMax - workload.valueMin + 1))
        return workload.jsonValues ? Self.jsonDocument(n, &rng) : rng.bytes(n)
    }

    /// A JSON document of an API's shape, `n` bytes (cut, or grown by more line items).
    static func jsonDocument(_ n: Int, _ rng: inout SplitMix) -> [UInt8] {
        let words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
                     "kilo", "lima", "mike", "november", "oscar", "papa"]
        var s = "{\"id\":\(100_000 + rng.next() % 900_000),\"email\":\"user\(rng.next() % 100_000)@example.com\",\"created\":\"2026-11-\(10 + rng.next() % 20)T\(10 + rng.next() % 14):\(10 + rng.next() % 50):00Z\",\"status\":\"\(words[Int(rng.next() % 4)])\",\"items\":["
        var first = true
        while s.utf8.count < n {
            s += (first ? "" : ",") + "{\"sku\":\"\(words[Int(rng.next() % 16)])-\(rng.next() % 1000)\",\"qty\":\(rng.next() % 9 + 1),\"price\":\(rng.next() % 10_000)}"
            first = false
        }
        s += "]}"
        return Array(s.utf8.prefix(n))
    }

    func measure(_ t: Target, _ keys: KeySpace, seed: UInt64) throws -> Result {
        let pids = serverPIDs(t)
        func cpuNow() -> Double? {
            let each = pids.compactMap(cpuSeconds)
            return each.isEmpty || each.count < pids.count ? nil : each.reduce(0, +)
        }
        let cpu0 = cpuNow()
        let cluster = t.kind == "cluster" ? try clusterClient(t) : nil
        let perThread = SharedResults()
        let opsLeft = Counter()
        if workload.maxOps < Int.max { opsLeft.add(workload.maxOps) }
        let deadline = monotonicSeconds() + (workload.duration > 0 ? workload.duration : 1e9)
        let started = monotonicSeconds()
        let done = Counter()
        let finished = Completion<Void>()
        let n = workload.connections
        for c in 0..<n {
            let codecForThread = codec(for: t)
            let w = workload
            startThread(name: "bench-conn") {
                var result = Result()
                var codec = codecForThread
                var rng = SplitMix(seed: seed &* 1000 &+ UInt64(c))
                do {
                    if let client = cluster {
                        // One operation at a time through the cluster client (ring + replicas).
                        while monotonicSeconds() < deadline {
                            if w.maxOps < Int.max {
                                if opsLeft.load() <= 0 { break }
                                opsLeft.add(-1)
                            }
                            let key = keys.key(keys.next(&rng))
                            let t0 = monotonicSeconds()
                            do {
                                if Double(rng.next() % 10_000) / 10_000 < w.getRatio {
                                    if try client.get(key) != nil { result.hits += 1 } else { result.misses += 1 }
                                } else {
                                    _ = try client.set(key, self.valueBytes(&rng))
                                }
                            } catch {
                                result.errors += 1
                                if result.firstError == nil { result.firstError = "\(error)" }
                            }
                            result.histogram.record(micros: (monotonicSeconds() - t0) * 1e6)
                            result.ops += 1
                        }
                    } else {
                        let conn = try self.connect(t, codec)
                        var out: [UInt8] = []
                        while monotonicSeconds() < deadline {
                            var batch = w.pipeline
                            if w.maxOps < Int.max {
                                let left = opsLeft.load()
                                if left <= 0 { break }
                                batch = min(batch, left)
                                opsLeft.add(-batch)
                            }
                            out.removeAll(keepingCapacity: true)
                            for _ in 0..<batch {
                                let key = keys.key(keys.next(&rng))
                                if Double(rng.next() % 10_000) / 10_000 < w.getRatio { codec.appendGet(key, into: &out) } else {
                                    codec.appendSet(key, self.valueBytes(&rng), into: &out)
                                }
                            }
                            let t0 = monotonicSeconds()
                            try conn.send(out)
                            for _ in 0..<batch {
                                let r = try conn.readReply(codec)
                                result.histogram.record(micros: (monotonicSeconds() - t0) * 1e6)
                                result.ops += 1
                                switch r {
                                case .hit: result.hits += 1
                                case .miss: result.misses += 1
                                case .stored: break
                                case .error(let e): result.errors += 1; if result.firstError == nil { result.firstError = e }
                                }
                            }
                        }
                    }
                } catch {
                    result.errors += 1
                    result.firstError = result.firstError ?? "\(error)"
                }
                perThread.append(result)
                done.add()
                if done.load() == n { finished.fulfil(()) }
            }
        }
        finished.wait()
        var total = Result()
        total.seconds = monotonicSeconds() - started
        for r in perThread.all {
            total.ops += r.ops; total.hits += r.hits; total.misses += r.misses; total.errors += r.errors
            total.firstError = total.firstError ?? r.firstError
            total.histogram.merge(r.histogram)
        }
        if let c0 = cpu0, let c1 = cpuNow() { total.cpuSeconds = c1 - c0 }
        return total
    }

    func report(_ results: [[Result]]) {
        struct Row { var label: String; var throughput, p50, p90, p99, p999, hitRatio: Double; var cpu: Double?; var errors: Int; var firstError: String? }
        let rows: [Row] = zip(targets, results).map { t, rs in
            func med(_ f: (Result) -> Double) -> Double { median(rs.map(f)) }
            let cpus = rs.compactMap(\.cpuMicrosPerOp)
            return Row(label: t.label, throughput: med(\.throughput), p50: med { $0.histogram.percentile(0.5) },
                       p90: med { $0.histogram.percentile(0.9) }, p99: med { $0.histogram.percentile(0.99) },
                       p999: med { $0.histogram.percentile(0.999) }, hitRatio: med(\.hitRatio),
                       cpu: cpus.isEmpty ? nil : median(cpus), errors: rs.map(\.errors).reduce(0, +),
                       firstError: rs.compactMap(\.firstError).first)
        }
        let w = workload
        let desc = "get \(Int(w.getRatio * 100))% / set \(100 - Int(w.getRatio * 100))%, \(w.keys) keys \(w.zipf.map { "zipf \($0)" } ?? "uniform"), values \(w.valueMin == w.valueMax ? "\(w.valueMin)" : "\(w.valueMin)-\(w.valueMax)") B, \(w.connections) conns, pipeline \(w.pipeline), \(rounds) round(s)"
        if json {
            let items = rows.map { r in
                "{\"target\":\"\(r.label)\",\"ops_per_s\":\(Int(r.throughput)),\"p50_us\":\(r.p50),\"p90_us\":\(r.p90),\"p99_us\":\(r.p99),\"p999_us\":\(r.p999),\"hit_ratio\":\(r.hitRatio),\"cpu_us_per_op\":\(r.cpu.map { String($0) } ?? "null"),\"errors\":\(r.errors)}"
            }
            print("{\"workload\":\"\(desc)\",\"results\":[\(items.joined(separator: ","))]}")
        } else {
            print("strata-bench run — \(desc)")
            print(pad("target", 28) + pad("ops/s", 10) + pad("p50 µs", 9) + pad("p90 µs", 9) + pad("p99 µs", 9) + pad("p99.9 µs", 10) + pad("hit %", 7) + pad("cpu µs/op", 10) + "errors")
            for r in rows {
                print(pad(r.label, 28) + pad(String(Int(r.throughput)), 10) + pad(f1(r.p50), 9) + pad(f1(r.p90), 9) + pad(f1(r.p99), 9)
                      + pad(f1(r.p999), 10) + pad(f1(r.hitRatio * 100), 7) + pad(r.cpu.map(f1) ?? "-", 10) + String(r.errors))
                if let e = r.firstError { print("  first error: \(e)") }
            }
            if rows.count > 1 {
                for r in rows.dropFirst() {
                    print("ratio \(rows[0].label) / \(r.label): throughput \(f2(rows[0].throughput / max(1, r.throughput))), p99 \(f2(rows[0].p99 / max(0.001, r.p99)))"
                          + (rows[0].cpu != nil && r.cpu != nil ? ", cpu/op \(f2(rows[0].cpu! / max(0.0001, r.cpu!)))" : ""))
                }
            }
        }
        if let path = svgPath {
            writeSVG(path, title: desc, bars: rows.map { ($0.label, $0.throughput, $0.p50, $0.p99, $0.p999) })
        }
    }

    func pad(_ s: String, _ n: Int) -> String { s.count >= n ? s + " " : s + String(repeating: " ", count: n - s.count) }
    func f1(_ x: Double) -> String { String(Double(Int((x * 10).rounded())) / 10) }
    func f2(_ x: Double) -> String { String(Double(Int((x * 100).rounded())) / 100) }
}

/// Keys `key-<i>` (zero padded), chosen uniformly or by a zipf law.
struct KeySpace: @unchecked Sendable {
    let count: Int
    private let cdf: [Double]?

    init(count: Int, zipf: Double?) {
        self.count = count
        if let s = zipf, s > 0 {
            var c = [Double](repeating: 0, count: count)
            var sum = 0.0
            for i in 0..<count { sum += 1 / pow(Double(i + 1), s); c[i] = sum }
            cdf = c.map { $0 / sum }
        } else { cdf = nil }
    }

    func next(_ rng: inout SplitMix) -> Int {
        guard let cdf else { return Int(rng.next() % UInt64(count)) }
        let u = Double(rng.next() >> 11) / Double(1 << 53)
        var lo = 0, hi = cdf.count - 1
        while lo < hi {
            let mid = (lo + hi) / 2
            if cdf[mid] < u { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }

    func key(_ i: Int) -> [UInt8] {
        var s = String(i)
        while s.count < 10 { s = "0" + s }
        return Array(("key-" + s).utf8)
    }
}

final class SharedResults: @unchecked Sendable {
    private let lock = Lock()
    private var items: [NetBench.Result] = []
    func append(_ r: NetBench.Result) { lock.withLock { items.append(r) } }
    var all: [NetBench.Result] { lock.withLock { items } }
}

/// The PID of the process listening on TCP `port` (from /proc/net/tcp{,6} and /proc/*/fd).
func pidListening(port: UInt16) -> Int32? {
    var inodes = Set<String>()
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        guard let f = fopen(file, "r") else { continue }
        defer { fclose(f) }
        var line = [CChar](repeating: 0, count: 512)
        while fgets(&line, 512, f) != nil {
            let parts = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self).split(separator: " ")
            guard parts.count > 9, parts[3] == "0A", let colon = parts[1].lastIndex(of: ":"),
                  UInt16(parts[1][parts[1].index(after: colon)...], radix: 16) == port else { continue }
            inodes.insert(String(parts[9]))
        }
    }
    guard !inodes.isEmpty, let proc = opendir("/proc") else { return nil }
    defer { closedir(proc) }
    while let e = readdir(proc) {
        let name = withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        guard let pid = Int32(name), let fds = opendir("/proc/\(name)/fd") else { continue }
        defer { closedir(fds) }
        while let fdEntry = readdir(fds) {
            let fdName = withUnsafeBytes(of: fdEntry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            var target = [CChar](repeating: 0, count: 128)
            let n = readlink("/proc/\(name)/fd/\(fdName)", &target, 127)
            guard n > 0 else { continue }
            let link = String(decoding: target.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if link.hasPrefix("socket:["), inodes.contains(String(link.dropFirst(8).dropLast())) { return pid }
        }
    }
    return nil
}

/// User + system CPU seconds of a process (/proc/PID/stat fields 14 and 15).
func cpuSeconds(_ pid: Int32) -> Double? {
    guard let f = fopen("/proc/\(pid)/stat", "r") else { return nil }
    defer { fclose(f) }
    var line = [CChar](repeating: 0, count: 1024)
    guard fgets(&line, 1024, f) != nil else { return nil }
    let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    guard let close = text.lastIndex(of: ")") else { return nil }
    let fields = text[text.index(after: close)...].split(separator: " ")
    // After ")": state is field 3 → index 0; utime field 14 → index 11; stime 15 → index 12.
    guard fields.count > 12, let u = Double(fields[11]), let s = Double(fields[12]) else { return nil }
    return (u + s) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// A small SVG: throughput bars and p50/p99/p99.9 per target.
func writeSVG(_ path: String, title: String, bars: [(String, Double, Double, Double, Double)]) {
    let maxT = max(1, bars.map { $0.1 }.max() ?? 1)
    let maxL = max(1, bars.map { $0.4 }.max() ?? 1)
    var s = "<svg xmlns='http://www.w3.org/2000/svg' width='1150' height='\(140 + bars.count * 60)' font-family='sans-serif' font-size='12'>\n"
    s += "<text x='10' y='20' font-size='14'>\(title.replacingOccurrences(of: "<", with: "&lt;"))</text>\n"
    s += "<text x='10' y='45'>throughput (ops/s)</text><text x='470' y='45'>latency µs: p50 (dark), p99, p99.9 (light)</text>\n"
    for (i, b) in bars.enumerated() {
        let y = 60 + i * 60
        let w = Int(380 * b.1 / maxT)
        s += "<text x='10' y='\(y + 14)'>\(b.0)</text>\n"
        s += "<rect x='10' y='\(y + 20)' width='\(w)' height='20' fill='#4a7'/><text x='\(w + 15)' y='\(y + 35)'>\(Int(b.1))</text>\n"
        for (j, (v, color)) in [(b.4, "#ccd"), (b.3, "#88a"), (b.2, "#446")].enumerated() {
            let lw = Int(380 * v / maxL)
            s += "<rect x='470' y='\(y + 20)' width='\(lw)' height='20' fill='\(color)'/>\n"
            if j == 0 { s += "<text x='\(470 + lw + 5)' y='\(y + 35)'>p50 \(Int(b.2)) / p99 \(Int(b.3)) / p99.9 \(Int(b.4))</text>\n" }
        }
    }
    s += "</svg>\n"
    if let f = fopen(path, "w") { fputs(s, f); fclose(f) }
}
