#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataWire

/// What a cluster write did, node by node.
public struct ClusterWriteReport: Sendable, Equatable {
    public let outcome: ClusterSetOutcome
    /// The nodes that acknowledged it, in ring order (owner first).
    public let acknowledged: [NodeAddress]
    /// The nodes that did not, with why (a write that still met its policy may have some).
    public let failures: [String]
}

// The cluster client's replicated writes. Every node of a key is written at once (the owner in
// all tiers, the others in the disk tier), so a write waits for the slowest node rather than
// the sum of them; a conditional write (add, replace, cas, a lease fill) is decided by the
// owner first and only then copied to the others.
extension ClusterClient {
    /// Runs `body` for each node at once — the first on this thread, the others on
    /// `BlockingPool` threads — and returns every result in node order. Each call is bounded by
    /// the per-node timeout, so this returns within about one timeout.
    func fanOut<T: Sendable>(_ nodes: [NodeHandle], _ body: @escaping @Sendable (Int, NodeHandle) throws -> T) -> [Result<T, Error>] {
        guard nodes.count > 1 else { return nodes.enumerated().map { i, n in Result { try body(i, n) } } }
        let results = LockedResults<T>(count: nodes.count)
        for i in 1..<nodes.count {
            let node = nodes[i]
            BlockingPool.shared.run { results.set(i, Result { try body(i, node) }) }
        }
        results.set(0, Result { try body(0, nodes[0]) })
        return results.waitAll()
    }

    /// Writes `s` (with its version) to the key's nodes: the owner in all tiers, the others in
    /// the disk tier as a plain versioned set. Throws `ClusterError` when the ack policy was
    /// not met.
    func replicate(_ s: SetRequest) throws -> ClusterWriteReport {
        let nodes = targets(s.key, s.namespace)
        guard !nodes.isEmpty else { throw ClusterError(message: "no node for \(keyText(s.key))", failures: []) }
        var r = s
        r.mode = .set; r.casVersion = 0; r.tiers = 2 // leases and conditions are the owner's business
        var o = s
        o.tiers = 0
        let (owner, replica) = (o, r)
        // (a lease fill is mode .lease)
        let conditional = s.mode != .set || s.casVersion != 0
        var results: [Result<Frame, Error>]
        if conditional {
            // The owner decides; the others follow only a stored write.
            let first = Result { try nodes[0].run { try $0.set(owner) } }
            if case .success(let f) = first {
                switch f.statusCode {
                case .exists: return ClusterWriteReport(outcome: .exists, acknowledged: [], failures: [])
                case .notFound: return ClusterWriteReport(outcome: .notFound, acknowledged: [], failures: [])
                case .casMismatch: return ClusterWriteReport(outcome: .casMismatch(current: f.cas), acknowledged: [], failures: [])
                case .leaseLost: return ClusterWriteReport(outcome: .leaseLost, acknowledged: [], failures: [])
                default: break
                }
            }
            let rest = fanOut(Array(nodes.dropFirst())) { _, node in try node.run { try $0.set(replica) } }
            results = [first] + rest
        } else {
            results = fanOut(nodes) { i, node in try node.run { try $0.set(i == 0 ? owner : replica) } }
        }
        var acked: [NodeAddress] = []
        var failures: [(String, String)] = []
        for (node, r) in zip(nodes, results) {
            switch r {
            case .success(let f) where f.statusCode == .ok || f.statusCode == .superseded: acked.append(node.address)
            case .success(let f): failures.append((node.address.name, "\(f.statusCode): \(String(decoding: f.value, as: UTF8.self))"))
            case .failure(let e): failures.append((node.address.name, "\(e)"))
            }
        }
        if !failures.isEmpty { hint(s.namespace, s.key, s.version) }
        guard acked.count >= needed(nodes.count), !acked.isEmpty else {
            // Where it landed too: the write may or may not take effect (an indeterminate write).
            let on = acked.isEmpty ? "" : " (\(acked.map(\.name).joined(separator: ", ")))"
            throw ClusterError(message: "write of \(keyText(s.key)) reached \(acked.count) of \(nodes.count) nodes\(on); the \(configuration.ack.rawValue) policy needs \(needed(nodes.count))",
                               failures: failures)
        }
        return ClusterWriteReport(outcome: .stored(version: s.version), acknowledged: acked,
                                  failures: failures.map { "\($0.0): \($0.1)" })
    }

    /// Sends one versioned request (DELETE or INVALIDATE) to each of the key's nodes at once
    /// (`tiers` is 0, all, for the owner and 2, disk, for the others): OK means a node held the key.
    func versionedEverywhere(_ what: String, _ key: [UInt8], _ namespace: [UInt8],
                             _ request: @escaping @Sendable (_ tiers: UInt8, _ version: UInt64) -> Request) throws -> Bool {
        try versionedEverywhereReporting(what, key, namespace, request).found
    }

    /// `versionedEverywhere`, with the nodes that did not take it (`"H:P: why"`).
    func versionedEverywhereReporting(_ what: String, _ key: [UInt8], _ namespace: [UInt8],
                                      _ request: @escaping @Sendable (_ tiers: UInt8, _ version: UInt64) -> Request) throws -> ClusterDeleteReport {
        let version = hlc.next()
        let nodes = targets(key, namespace)
        let results = fanOut(nodes) { i, node in try node.run { try $0.call(request(i == 0 ? 0 : 2, version)) } }
        var acks = 0, found = false
        var failures: [(String, String)] = []
        var acked: [String] = []
        for (node, r) in zip(nodes, results) {
            switch r {
            case .success(let f):
                switch f.statusCode {
                case .ok: acks += 1; found = true; acked.append(node.address.name)
                case .notFound, .superseded: acks += 1; acked.append(node.address.name)
                default: failures.append((node.address.name, "\(f.statusCode)"))
                }
            case .failure(let e): failures.append((node.address.name, "\(e)"))
            }
        }
        if !failures.isEmpty { hint(namespace, key, version) }
        guard acks >= needed(nodes.count), acks > 0 else {
            let on = acked.isEmpty ? "" : " (\(acked.joined(separator: ", ")))"
            throw ClusterError(message: "\(what) of \(keyText(key)) reached \(acks) of \(nodes.count) nodes\(on); the \(configuration.ack.rawValue) policy needs \(needed(nodes.count))",
                               failures: failures)
        }
        return ClusterDeleteReport(found: found, failures: failures.map { "\($0.0): \($0.1)" })
    }
}

/// What a cluster DELETE (or INVALIDATE) did: whether a node that answered held the key, and
/// the nodes that did not answer. Not found with failures means "unknown": a node that did not
/// answer may have held it (the delete reaches it later, by hinted handoff).
public struct ClusterDeleteReport: Sendable, Equatable {
    public let found: Bool
    public let failures: [String]
    /// Not found on the nodes that answered, and some did not: whether the key existed is unknown.
    public var existenceUnknown: Bool { !found && !failures.isEmpty }
}

/// Results filled in by several threads, waited for together.
final class LockedResults<T: Sendable>: @unchecked Sendable {
    private let cond = ConditionLock()
    private var results: [Result<T, Error>?]
    private var left: Int

    init(count: Int) {
        results = Array(repeating: nil, count: count)
        left = count
    }

    func set(_ i: Int, _ r: Result<T, Error>) {
        cond.lock()
        results[i] = r
        left -= 1
        let done = left == 0
        cond.unlock()
        if done { cond.broadcast() }
    }

    func waitAll() -> [Result<T, Error>] {
        cond.lock()
        defer { cond.unlock() }
        while left > 0 { cond.wait() }
        return results.map { $0! }
    }
}
