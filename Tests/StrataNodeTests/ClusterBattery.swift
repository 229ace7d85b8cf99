import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataWire

/// What a key may read as: a value, or nothing (deleted or never written).
enum BatteryValue: Hashable {
    case absent
    case value(String)
    var text: String { if case .value(let s) = self { return s }; return "(absent)" }
}

/// Issue 17's acceptance model: every write to a key with its start and end time and whether
/// its ack policy was met. A write that failed its policy is *indeterminate* (it may have
/// landed, and may win). A read issued after the writes completed may return any write that no
/// acknowledged write started after it ended (the newest acknowledged value, or a newer
/// indeterminate one); anything else is stale, a resurrected delete or a lost write.
final class BatteryModel: @unchecked Sendable {
    struct Write { let start: Double; let end: Double; let value: BatteryValue; let acked: Bool }
    private let lock = NSLock()
    private var writes: [String: [Write]] = [:]
    private(set) var stale = 0, resurrected = 0, lost = 0, failedReads = 0, reads = 0
    private(set) var acked = 0, indeterminate = 0
    /// Sets acknowledged although a node of the key did not take them (ack one/majority).
    private(set) var partial = 0
    private var examples: [String] = []

    var keys: [String] { lock.lock(); defer { lock.unlock() }; return writes.keys.sorted() }

    func record(_ key: String, _ value: BatteryValue, start: Double, acked ok: Bool, partial p: Bool = false, end: Double? = nil) {
        let w = Write(start: start, end: end ?? monotonicSeconds(), value: value, acked: ok)
        lock.lock(); defer { lock.unlock() }
        writes[key, default: []].append(w)
        if ok { acked += 1 } else { indeterminate += 1 }
        if ok && p { partial += 1 }
    }

    /// The values a read of `key` may return now (no write to it in flight).
    func allowed(_ key: String) -> Set<BatteryValue> {
        lock.lock(); defer { lock.unlock() }
        let ws = writes[key] ?? []
        var out: Set<BatteryValue> = []
        // Never written, or no acknowledged write yet: absent is allowed.
        if !ws.contains(where: \.acked) { out.insert(.absent) }
        for w in ws where !ws.contains(where: { $0.acked && $0.start > w.end }) { out.insert(w.value) }
        return out
    }

    /// Checks one read's result (nil: the read failed) and counts what is wrong with it.
    func check(_ key: String, _ got: BatteryValue?, how: String) {
        let ok = allowed(key)
        lock.lock(); defer { lock.unlock() }
        reads += 1
        guard let got else { failedReads += 1; return }
        if ok.contains(got) { return }
        let newestAcked = (writes[key] ?? []).filter(\.acked).max { $0.end < $1.end }?.value
        if got == .absent { lost += 1 } else if newestAcked == .absent { resurrected += 1 } else { stale += 1 }
        if examples.count < 5 { examples.append("\(key) read \(got.text) by \(how), allowed \(ok.map(\.text).sorted())") }
    }

    var summary: String {
        lock.lock(); defer { lock.unlock() }
        return "stale \(stale), resurrected \(resurrected), lost \(lost) (\(reads) reads, \(failedReads) failed; \(acked) acknowledged and \(indeterminate) indeterminate writes) \(examples)"
    }
}

/// Three or four `strata serve --cluster` nodes at fixed addresses: on 127.0.0.1 (free ports),
/// or each in its own network namespace (`launcher` `ip netns exec NS`, address `hosts[i]`).
final class BatteryCluster: @unchecked Sendable {
    let dirs: [TempDir]
    let hosts: [String]
    let ports: [UInt16]
    let launchers: [[String]]
    var nodes: [NodeProcess?]
    let replicas: Int

    init(hosts: [String], ports: [UInt16], launchers: [[String]]? = nil, replicas: Int) {
        self.hosts = hosts
        self.ports = ports
        self.launchers = launchers ?? hosts.map { _ in [] }
        dirs = hosts.map { _ in TempDir() }
        nodes = Array(repeating: nil, count: hosts.count)
        self.replicas = replicas
    }

    /// `count` nodes on 127.0.0.1 with distinct free ports.
    static func local(count: Int, replicas: Int) throws -> BatteryCluster {
        var ps: [UInt16] = []
        while ps.count < count {
            let p = try MemcachedClientTests.freePort()
            if !ps.contains(p) { ps.append(p) }
        }
        return BatteryCluster(hosts: Array(repeating: "127.0.0.1", count: count), ports: ps, replicas: replicas)
    }

    func name(_ i: Int) -> String { "\(hosts[i]):\(ports[i])" }
    func list(_ members: [Int]) -> String { members.map(name).joined(separator: ",") }

    func start(_ i: Int, members: [Int]) throws {
        nodes[i] = try NodeProcess(dataDir: dirs[i].path, port: ports[i],
                                   extra: ["--host", hosts[i], "--cluster", list(members), "--replicas", String(replicas),
                                           "--sync-interval", "0.5", "--pause-threshold", "0.5"]
                                       + (hosts[i] == "127.0.0.1" ? [] : ["--insecure"]),
                                   launcher: launchers[i])
    }

    func kill(_ i: Int) {
        guard let n = nodes[i] else { return }
        Glibc.kill(n.process.processIdentifier, SIGKILL)
        n.process.waitUntilExit()
        nodes[i] = nil
    }

    func signal(_ i: Int, _ sig: Int32) { if let n = nodes[i] { Glibc.kill(n.process.processIdentifier, sig) } }

    /// A new client: no hints, no dead marks, no start versions carried over.
    func client(_ members: [Int], ack: AckPolicy = .all, timeout: Double = 0.5) throws -> ClusterClient {
        var c = ClusterConfiguration(nodes: members.map { NodeAddress(host: hosts[$0], port: ports[$0]) })
        c.replicas = replicas
        c.ack = ack
        c.timeout = timeout
        return try ClusterClient(configuration: c)
    }

    func ring(_ members: [Int]) -> HashRing { HashRing(members: members.map { .init(name: name($0)) }) }

    func replicaSet(_ key: String, _ members: [Int]) -> [Int] {
        ring(members).nodes(for: b(key), count: replicas).map { n in members.first { name($0) == n.name }! }
    }

    func connect(_ i: Int, timeout: Double = 5) throws -> NodeConnection {
        try NodeConnection(host: hosts[i], port: ports[i], timeout: timeout)
    }

    func verified(_ i: Int) -> Bool {
        guard let c = try? connect(i, timeout: 2), let s = try? nodeStats(c) else { return false }
        c.close()
        return s["cluster_verified"] as? Int == 1
    }

    /// Each key's value on node i's disk tier, read directly (no client repair), pipelined.
    func diskValues(_ i: Int, _ keys: [String]) -> [String: BatteryValue]? {
        guard let c = try? connect(i, timeout: 5) else { return nil }
        defer { c.close() }
        var out: [String: BatteryValue] = [:]
        var start = 0
        while start < keys.count {
            let batch = Array(keys[start..<min(keys.count, start + 256)])
            var bytes: [UInt8] = []
            for (n, k) in batch.enumerated() { bytes += Request.get(GetRequest(key: b(k), tiers: 2)).frame(id: UInt32(n + 1)).encoded() }
            guard (try? c.sendRaw(bytes)) != nil else { return nil }
            for _ in batch {
                guard let f = try? c.readFrame(), f.requestID >= 1, Int(f.requestID) <= batch.count else { return nil }
                let k = batch[Int(f.requestID) - 1]
                if f.statusCode == .notFound { out[k] = .absent } else if f.statusCode == .ok, let p = try? Responses.parseGet(f) {
                    out[k] = .value(String(decoding: p.value, as: UTF8.self))
                } else { return nil }
            }
            start += batch.count
        }
        return out
    }

    /// Keys on which the live nodes of the replica set (by `members`) disagree, or agree on a
    /// value the model does not allow.
    func disagreeing(_ model: BatteryModel, members: [Int]) -> Int {
        let keys = model.keys
        var disks: [Int: [String: BatteryValue]] = [:]
        for i in members where nodes[i] != nil {
            guard let d = diskValues(i, keys) else { return keys.count }
            disks[i] = d
        }
        var bad = 0
        for k in keys {
            let held = Set(replicaSet(k, members).compactMap { disks[$0]?[k] })
            if held.count != 1 || !model.allowed(k).contains(held.first!) { bad += 1 }
        }
        return bad
    }

    /// Whether every two live members hold the same versions of the entries they share by the
    /// ring: node i's digests for requester j equal node j's for requester i.
    func digestsAgree(_ members: [Int]) -> Bool {
        let live = members.filter { nodes[$0] != nil }
        var conns: [Int: NodeConnection] = [:]
        defer { conns.values.forEach { $0.close() } }
        for i in live { guard let c = try? connect(i, timeout: 5) else { return false }; conns[i] = c }
        func digests(_ i: Int, for j: Int) -> [UInt64]? {
            let req = SyncRequest(requester: b(name(j)), bucketBits: 8, maxVersion: .max)
            guard let f = try? conns[i]!.call(.syncDigest(req)), f.statusCode == .ok else { return nil }
            return try? Responses.parseSyncDigest(f, bits: 8)
        }
        for i in live { for j in live where j > i {
            guard let a = digests(i, for: j), let z = digests(j, for: i), a == z else { return false }
        } }
        return true
    }

    /// Seconds until every live replica of every key agrees with the model (polled), or nil.
    func convergence(_ model: BatteryModel, members: [Int], since t0: Double, limit: Double = 30) -> Double? {
        var at = 0.0
        let ok = eventually(limit, interval: 0.1) {
            guard digestsAgree(members) else { return false }
            at = monotonicSeconds() - t0
            return disagreeing(model, members: members) == 0
        }
        return ok ? at : nil
    }
}

extension BatteryCluster {
    /// Polls agreement on a thread of its own from now (the heal at `t0`) while the caller
    /// reads; the returned function waits for it and gives the seconds from `t0`, or nil.
    func watchConvergence(_ model: BatteryModel, members: [Int], since t0: Double, limit: Double = 60) -> () -> Double? {
        let result = SharedFlag<Double?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread {
            // Cheap enough to poll at 10,000 keys: each pair of live nodes' digests of the
            // entries they share (SYNC_DIGEST, §7.19) are equal. Then the model check, once.
            while monotonicSeconds() - t0 < limit {
                if self.digestsAgree(members) {
                    let at = monotonicSeconds() - t0
                    if self.disagreeing(model, members: members) == 0 { result.value = at; break }
                }
                Thread.sleep(forTimeInterval: 0.1)
            }
            done.signal()
        }.start()
        return { done.wait(); return result.value }
    }
}

/// A value shared by threads.
final class SharedFlag<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var v: T
    init(_ v: T) { self.v = v }
    var value: T {
        get { lock.lock(); defer { lock.unlock() }; return v }
        set { lock.lock(); v = newValue; lock.unlock() }
    }
}

/// Writes and reads for the battery. Reads come from a new `ClusterClient` each (or a new CLI
/// process), so nothing a client remembers can hide a node that answers wrong.
extension BatteryCluster {
    /// Writes `value` (or deletes) with a client of this phase and records the outcome.
    func write(_ c: ClusterClient, _ model: BatteryModel, _ key: String, _ value: BatteryValue) {
        let t0 = monotonicSeconds()
        var ok = true, partial = false
        do {
            switch value {
            case .value(let v): partial = !(try c.setReporting(b(key), b(v)).failures.isEmpty)
            case .absent: try c.delete(b(key))
            }
        } catch { ok = false }
        model.record(key, value, start: t0, acked: ok, partial: partial)
    }

    /// One read by a freshly made client.
    func freshRead(_ model: BatteryModel, _ key: String, members: [Int], phase: String = "") {
        var got: BatteryValue?
        do {
            let c = try client(members)
            got = try c.get(b(key)).map { .value(String(decoding: $0.value, as: UTF8.self)) } ?? .absent
        } catch { got = nil }
        model.check(key, got, how: "a new client\(phase)")
    }

    /// One read by a new `strata get` process (exit 1: not found; 3: refused or failed).
    func cliRead(_ model: BatteryModel, _ key: String, members: [Int], phase: String = "") {
        let r = try? runCLI(["get", key, "--nodes", list(members), "--replicas", String(replicas), "--timeout", "0.5"])
        var got: BatteryValue?
        switch r?.code {
        case 0: got = .value(String(decoding: r!.out, as: UTF8.self))
        case 1: got = .absent
        default: got = nil
        }
        model.check(key, got, how: "the CLI\(phase)")
    }

    /// Reads `keys` (every `cliEvery`-th by the CLI, the rest by new clients).
    func readAll(_ model: BatteryModel, _ keys: [String], members: [Int], cliEvery: Int = 20, phase: String) {
        let t0 = monotonicSeconds()
        for (n, k) in keys.enumerated() {
            let p = String(format: " %@ +%.2f s", phase, monotonicSeconds() - t0)
            if n % cliEvery == 0 { cliRead(model, k, members: members, phase: p) } else { freshRead(model, k, members: members, phase: p) }
        }
    }
}

/// The (scenario, R, ack) combinations run: a bounded table in `make test`, every combination
/// with STRATA_SOAK=1 (only the table's, at full counts, with STRATA_BATTERY_TABLE=1 too).
func batteryCombinations(_ quick: (Int, AckPolicy)) -> [(Int, AckPolicy)] {
    let env = ProcessInfo.processInfo.environment
    return env["STRATA_SOAK"] == nil || env["STRATA_BATTERY_TABLE"] != nil ? [quick] : [(2, .one), (2, .majority), (2, .all), (3, .majority)]
}

func reportBattery(_ scenario: String, _ r: Int, _ ack: AckPolicy, _ model: BatteryModel, converged: Double?, keys: Int,
                   cluster: BatteryCluster? = nil, note: String = "") {
    var note = note
    if let c = cluster {
        // Each live node's anti-entropy rounds and the seconds they took (STATS).
        let per = c.nodes.indices.compactMap { i -> String? in
            guard c.nodes[i] != nil, let conn = try? c.connect(i, timeout: 2), let st = try? nodeStats(conn) else { return nil }
            return String(format: "%d rounds %.1f s", st["sync_rounds"] as? Int ?? -1, Double(st["sync_us"] as? Int ?? 0) / 1e6)
        }
        note += "; anti-entropy " + per.joined(separator: ", ")
    }
    let conv = converged.map { String(format: "%.1f", $0) } ?? "never"
    reportFigure("cluster \(scenario) R=\(r) ack=\(ack.rawValue)",
                 "stale \(model.stale), resurrected \(model.resurrected), lost \(model.lost), converged in \(conv) s (\(keys) keys; \(model.reads) reads, \(model.failedReads) failed; \(model.acked) acknowledged (\(model.partial) sets of them missing a node), \(model.indeterminate) indeterminate writes\(note))")
}
