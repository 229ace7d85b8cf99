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
        if conditional && s.mode != .lease { return try replicateConditional(s, nodes) }
        var results: [Result<Frame, Error>]
        if conditional {
            // A lease fill: the owner, which holds the lease, decides; the others follow only a
            // stored write.
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

    /// An add, replace or cas: decided by one node — the owner, or when it does not answer
    /// (twice: it is waited for again, as for a counter), the next node of the key, after
    /// every node was brought up to the newest value (`settleAcrossReplicas`) — and copied to
    /// the others only once stored. Sent with VERIFIED_ONLY while another node could decide,
    /// as counters are (a node that has not verified the key since a restart or pause answers
    /// UNVERIFIED). An outside-review-style test: with the owner down the other nodes were
    /// written unconditionally, so an `add` of a present key overwrote it and reported stored.
    private func replicateConditional(_ s: SetRequest, _ nodes: [NodeHandle]) throws -> ClusterWriteReport {
        var failures: [(String, String)] = []
        var behind: [String: String]? = nil
        let decided: ClusterWriteReport? = try firstDecision(nodes.count) { i, fenced in
            let node = nodes[i]
            // The owner did not decide: the others are first brought up to the newest value,
            // so the condition is checked against what the owner held.
            if i > 0 && behind == nil { behind = settleAcrossReplicas(s.key, s.namespace) }
            if fenced, let why = behind?[node.address.name] {
                failures.append((node.address.name, why))
                return .next
            }
            var d = s
            d.tiers = i == 0 ? 0 : 2
            d.verifiedOnly = fenced
            let f: Frame
            do {
                f = try node.run(ignoringQuiet: i == 0) { conn in
                    // SUPERSEDED: the node holds a newer version than this write's, and
                    // checked no condition — a racing add with a later clock, or a clock
                    // ahead of ours. Decided again with a version past it, as a counter
                    // is (counted as stored, two racing adds were both told stored: an
                    // outside review, cl16, 8 of 49 rounds with no fault at all).
                    for _ in 0..<Self.maxSupersededRetries {
                        let f = try conn.set(d)
                        guard f.statusCode == .superseded else { return f }
                        hlc.observe(f.cas)
                        d.version = hlc.next()
                    }
                    throw ClientError(.server, "the \(s.mode) of \(keyText(s.key)) was superseded by newer writes \(Self.maxSupersededRetries) times in a row", status: .superseded)
                }
            } catch let e as ClientError where e.kind == .server && e.status == .superseded {
                throw ClusterError(message: "write of \(keyText(s.key)) reached 0 of \(nodes.count) nodes: \(e.message)", failures: failures)
            } catch {
                failures.append((node.address.name, "\(error)"))
                return .next
            }
            switch f.statusCode {
            case .exists: return .done(ClusterWriteReport(outcome: .exists, acknowledged: [], failures: []))
            case .notFound: return .done(ClusterWriteReport(outcome: .notFound, acknowledged: [], failures: []))
            case .casMismatch: return .done(ClusterWriteReport(outcome: .casMismatch(current: f.cas), acknowledged: [], failures: []))
            case .unverified:
                failures.append((node.address.name, Self.unverifiedReason))
                return .unverified
            case .ok:
                return .done(try copyDecided(d, decidedBy: i, nodes, failures: failures))
            case .busy, .shuttingDown:
                failures.append((node.address.name, "\(f.statusCode): \(String(decoding: f.value, as: UTF8.self))"))
                return .next
            default:
                // The node's answer (TOO_LARGE, INVALID_ARGUMENT, …): another would say the same.
                failures.append((node.address.name, "\(f.statusCode): \(String(decoding: f.value, as: UTF8.self))"))
                throw ClusterError(message: "write of \(keyText(s.key)) reached 0 of \(nodes.count) nodes; the \(configuration.ack.rawValue) policy needs \(needed(nodes.count))",
                                   failures: failures)
            }
        }
        if let decided { return decided }
        throw ClusterError(message: "write of \(keyText(s.key)) reached 0 of \(nodes.count) nodes; no node could decide it", failures: failures)
    }

    /// After node `i` stored a conditional write: the same version, unconditionally, to the others.
    private func copyDecided(_ s: SetRequest, decidedBy i: Int, _ nodes: [NodeHandle], failures earlier: [(String, String)]) throws -> ClusterWriteReport {
        var plain = s
        // A plain copy: no condition, and not fenced — a node that has not verified the key
        // takes the decided write (an outside review, cl17: the copies went out with the
        // decider's VERIFIED_ONLY, were refused by such nodes, and a stored add reported exit 3).
        plain.mode = .set; plain.casVersion = 0; plain.verifiedOnly = false
        let copy = plain
        let others = nodes.indices.filter { $0 != i }
        let results = fanOut(others.map { nodes[$0] }) { k, node in
            var c = copy
            c.tiers = others[k] == 0 ? 0 : 2
            return try node.run { try $0.set(c) }
        }
        var acked = [nodes[i].address]
        var failures: [(String, String)] = []
        for (k, r) in results.enumerated() {
            let node = nodes[others[k]]
            switch r {
            case .success(let f) where f.statusCode == .ok || f.statusCode == .superseded: acked.append(node.address)
            case .success(let f): failures.append((node.address.name, "\(f.statusCode): \(String(decoding: f.value, as: UTF8.self))"))
            case .failure(let e): failures.append((node.address.name, "\(e)"))
            }
        }
        if !failures.isEmpty { hint(s.namespace, s.key, s.version) }
        guard acked.count >= needed(nodes.count) else {
            throw ClusterError(message: "write of \(keyText(s.key)) reached \(acked.count) of \(nodes.count) nodes (\(acked.map(\.name).joined(separator: ", "))); the \(configuration.ack.rawValue) policy needs \(needed(nodes.count))",
                               failures: failures + earlier.filter { e in !acked.contains { $0.name == e.0 } && !failures.contains { $0.0 == e.0 } })
        }
        return ClusterWriteReport(outcome: .stored(version: s.version), acknowledged: acked, failures: failures.map { "\($0.0): \($0.1)" })
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
        var acks = 0, found = false, handedOn = false
        var failures: [(String, String)] = []
        var acked: [String] = []
        for (node, r) in zip(nodes, results) {
            switch r {
            case .success(let f):
                switch f.statusCode {
                case .ok: acks += 1; found = true; acked.append(node.address.name)
                // This very request, handed on by another of the key's nodes first (hinted
                // handoff): whether it found the key there is not known here.
                case .superseded where f.cas == version: acks += 1; handedOn = true; acked.append(node.address.name)
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
        return ClusterDeleteReport(found: found, failures: failures.map { "\($0.0): \($0.1)" }, handedOn: handedOn)
    }
}

/// What a cluster DELETE (or INVALIDATE) did: whether a node that answered held the key, and
/// the nodes that did not answer. Not found with failures means "unknown": a node that did not
/// answer may have held it (the delete reaches it later, by hinted handoff). So does a node
/// that had this very request already, handed on by another node (`handedOn`: it answers
/// SUPERSEDED with the request's version; an outside review, cl23, saw `del` say "not found"
/// for a key the third replica held and deleted).
public struct ClusterDeleteReport: Sendable, Equatable {
    public let found: Bool
    public let failures: [String]
    public let handedOn: Bool
    public init(found: Bool, failures: [String], handedOn: Bool = false) {
        self.found = found; self.failures = failures; self.handedOn = handedOn
    }
    /// Not found on the nodes that answered, and some did not, or some had the request handed
    /// on first: whether the key existed is unknown.
    public var existenceUnknown: Bool { !found && (!failures.isEmpty || handedOn) }
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
