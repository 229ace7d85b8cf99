// strata-example: a small worker that caches JSON records read through from a slow loader.
//
// It connects to STRATA_SERVER (HOST:PORT, default 127.0.0.1:7400; several, comma-separated,
// make a cluster), looks up customer records from 16 workers at once through
// `StrataCache.readThrough` — the loader pretends to be a database that takes 20 ms — and
// prints the hit ratio of each round. Round 1 is cold (every record loads once however many
// workers ask for it), round 2 is served from the cache. Exits 0 when the figures add up,
// 1 otherwise. STRATA_EXAMPLE_DIR=PATH runs it against an embedded store instead: the one
// line that differs is the `StrataCache(...)` below.
#if canImport(Glibc)
import Glibc
#endif
import Foundation
import StrataCache

/// A record as the "database" returns it; cached as JSON.
struct Customer: Codable, Sendable, Equatable {
    var id: Int
    var name: String
    var plan: String
    var balanceCents: Int
}

/// The slow source of truth: every lookup takes 20 ms and is counted.
actor SlowDatabase {
    private(set) var lookups = 0
    func customer(_ id: Int) async throws -> Customer {
        lookups += 1
        try await Task.sleep(for: .milliseconds(20))
        return Customer(id: id, name: "customer-\(id)", plan: id % 3 == 0 ? "pro" : "free", balanceCents: id * 137)
    }
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("strata-example: \(message)\n".utf8))
    exit(1)
}

let env = ProcessInfo.processInfo.environment
let server = env["STRATA_SERVER"] ?? "127.0.0.1:7400"
let cache: StrataCache
do {
    if let dir = env["STRATA_EXAMPLE_DIR"] {
        cache = try StrataCache(.directory(dir))
    } else {
        cache = try StrataCache(.nodes(server.split(separator: ",").map(String.init)))
    }
} catch { fail("\(error)") }

// A namespace of its own, so runs never see each other's records; emptied at the end.
let records = cache.namespace("example-\(getpid())")
let database = SlowDatabase()
let customers = 40
let workers = 16
let lookupsPerWorker = 50

/// One round: every worker looks up `lookupsPerWorker` customers; returns (hits, misses).
func round() async throws -> (hits: Int, misses: Int) {
    try await withThrowingTaskGroup(of: (Int, Int).self) { group in
        for w in 0..<workers {
            group.addTask {
                var hits = 0, misses = 0
                for i in 0..<lookupsPerWorker {
                    let id = (w * 7 + i * 13) % customers
                    let r = try await records.readThrough("customer:\(id)", ttl: .seconds(300)) {
                        try await database.customer(id)
                    }
                    guard r.value.id == id else { fail("customer:\(id) came back as \(r.value.id)") }
                    if r.isHit { hits += 1 } else { misses += 1 }
                }
                return (hits, misses)
            }
        }
        var total = (hits: 0, misses: 0)
        for try await (h, m) in group { total.hits += h; total.misses += m }
        return total
    }
}

do {
    let start = Date()
    let cold = try await round()
    let warm = try await round()
    let loads = await database.lookups
    let stats = try await records.stats()
    func ratio(_ r: (hits: Int, misses: Int)) -> String {
        String(format: "%.1f %%", Double(r.hits) * 100 / Double(max(1, r.hits + r.misses)))
    }
    print("strata-example: \(customers) customers, \(workers) workers × \(lookupsPerWorker) lookups per round, server \(env["STRATA_EXAMPLE_DIR"] ?? server)")
    print("round 1 (cold): \(cold.hits) hits, \(cold.misses) loads, hit ratio \(ratio(cold))")
    print("round 2 (warm): \(warm.hits) hits, \(warm.misses) loads, hit ratio \(ratio(warm))")
    print("slow loader ran \(loads) times for \(2 * workers * lookupsPerWorker) lookups")
    print("namespace stats: \(stats.items) items, \(stats.hits) hits, \(stats.misses) misses, \(stats.sets) sets")
    if let first = try await records.item("customer:0", as: Customer.self) {
        print("customer:0 is held in \(first.tier.map { $0.contains(.memory) ? "memory" : "the disk tier" } ?? "the cache")")
    }
    print(String(format: "took %.2f s", Date().timeIntervalSince(start)))
    try await records.removeAll()
    cache.close()
    // Every customer loads at least once; each load counts as one miss of the caller that ran it.
    guard loads >= customers, cold.misses + warm.misses == loads, warm.hits == workers * lookupsPerWorker - warm.misses else {
        fail("the figures do not add up")
    }
} catch let e as CacheError where e.status == .busy {
    fail("the node is at a capacity limit, try again: \(e)")
} catch {
    fail("\(error)")
}
