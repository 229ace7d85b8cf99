// strata-cache-bench: what the StrataCache facade costs per GET over the raw cluster client,
// at pipeline 1 (one request outstanding), against a running node.
//
//   strata-cache-bench [--server HOST:PORT] [--ops N] [--rounds R] [--value-size BYTES]
//
// Every mode reads the same key N times in a row, modes interleaved round by round (so drift
// hits them alike); each mode's figure is its median round. Modes: the raw client's blocking
// `get` on the calling thread, its async `get` (a BlockingPool hand-off, as the facade does),
// and the facade's `get` as [UInt8], String and a Codable struct (JSON). The overhead column
// compares each facade mode with the raw async get, the like-for-like baseline.
#if canImport(Glibc)
import Glibc
#endif
import Foundation
import StrataCache
import StrataClient
import StrataCore

struct Record: Codable, Sendable { var id: Int; var name: String; var tags: [String]; var balance: Double }

func argument(_ name: String) -> String? {
    let a = CommandLine.arguments
    guard let i = a.firstIndex(of: name), i + 1 < a.count else { return nil }
    return a[i + 1]
}

let server = argument("--server") ?? ProcessInfo.processInfo.environment["STRATA_SERVER"] ?? "127.0.0.1:7400"
let ops = Int(argument("--ops") ?? "") ?? 20_000
let rounds = Int(argument("--rounds") ?? "") ?? 5
let valueSize = Int(argument("--value-size") ?? "") ?? 100

guard let address = NodeAddress.parse(server) else {
    FileHandle.standardError.write(Data("strata-cache-bench: '\(server)' is not HOST:PORT\n".utf8))
    exit(2)
}

/// The blocking forms (an async context would pick the async overloads).
func blockingGet(_ c: ClusterClient, _ k: [UInt8]) throws { _ = try c.get(k) }
func blockingSet(_ c: ClusterClient, _ k: [UInt8], _ v: [UInt8]) throws { _ = try c.set(k, v) }

func main() async throws {
    let client = try ClusterClient(configuration: ClusterConfiguration(nodes: [address]))
    let cache = try StrataCache(.clusterClient(client))
    let bytesKey = Array("bench:bytes".utf8)
    let value = [UInt8](repeating: UInt8(ascii: "x"), count: valueSize)
    try blockingSet(client, bytesKey, value)
    let record = Record(id: 42, name: "Ada Lovelace", tags: ["math", "engines"], balance: 1234.5)
    try await cache.set("bench:json", record)

    typealias Mode = (name: String, run: () async throws -> Void)
    let modes: [Mode] = [
        ("raw client, blocking get", { try blockingGet(client, bytesKey) }),
        ("raw client, async get", { _ = try await client.get(bytesKey) }),
        ("facade get as [UInt8]", { _ = try await cache.get("bench:bytes", as: [UInt8].self) }),
        ("facade get as String", { _ = try await cache.get("bench:bytes", as: String.self) }),
        ("facade get as Codable (JSON)", { _ = try await cache.get("bench:json", as: Record.self) }),
    ]
    for m in modes { for _ in 0..<1000 { try await m.run() } } // warm up: connections, threads
    var perOp = [[Double]](repeating: [], count: modes.count)
    for _ in 0..<rounds {
        for (i, m) in modes.enumerated() {
            let t0 = monotonicSeconds()
            for _ in 0..<ops { try await m.run() }
            perOp[i].append((monotonicSeconds() - t0) / Double(ops) * 1e6)
        }
    }
    let medians = perOp.map { $0.sorted()[$0.count / 2] }
    let baseline = medians[1]
    print("strata-cache-bench: \(server), \(ops) GETs of a \(valueSize)-byte value per mode and round, \(rounds) rounds, pipeline 1; median round")
    print("mode                            µs/GET     GET/s   vs raw async")
    for (i, m) in modes.enumerated() {
        let over = i >= 2 ? String(format: "%+.1f %%", (medians[i] / baseline - 1) * 100) : "-"
        print(m.name.padding(toLength: 30, withPad: " ", startingAt: 0)
              + String(format: "%8.1f %9.0f   ", medians[i], 1e6 / medians[i]) + over)
    }
}

do { try await main() } catch {
    FileHandle.standardError.write(Data("strata-cache-bench: \(error)\n".utf8))
    exit(1)
}
