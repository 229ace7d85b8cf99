#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataWire

// The cluster client's read-modify-writes decided on one node: INCR/DECR and TOUCH run on the
// key's first live node (after `settleAcrossReplicas`), and the result is copied to the others.
extension ClusterClient {
    /// INCR/DECR on the first live node, then the resulting item is replicated as a versioned
    /// write. Nil when absent and no initial value was given. Each attempt carries a new
    /// version from this client's clock, so an INCR that timed out on a paused node and runs
    /// when it resumes is older than the writes made meanwhile and loses to them (an outside
    /// review: with node-assigned versions such a late INCR, run on the old value, won on
    /// every node); a node holding a newer version answers SUPERSEDED and the client tries again
    /// past it (at most `maxSupersededRetries` times).
    public func counter(_ key: [UInt8], delta: UInt64, decrement: Bool = false, namespace: [UInt8] = [],
                        initial: UInt64? = nil) throws -> UInt64? {
        try counterReporting(key, delta: delta, decrement: decrement, namespace: namespace, initial: initial).value
    }

    /// `counter`, with the nodes that did not take the result (`"H:P: why"`), as `set` reports.
    public func counterReporting(_ key: [UInt8], delta: UInt64, decrement: Bool = false, namespace: [UInt8] = [],
                                 initial: UInt64? = nil) throws -> (value: UInt64?, failures: [String]) {
        var r = CounterRequest(key: key, delta: delta, namespace: namespace, decrement: decrement)
        r.initial = initial
        let behind = settleAcrossReplicas(key, namespace)
        let (value, failures) = try onPrimaryThenReplicate(key, namespace, skipping: behind) { conn, verifiedOnly -> UInt64? in
            r.verifiedOnly = verifiedOnly
            for _ in 0..<Self.maxSupersededRetries {
                r.version = hlc.next()
                let f = try conn.call(.counter(r))
                if f.statusCode == .superseded { hlc.observe(f.cas); continue }
                if f.statusCode == .notFound { return nil }
                try NodeConnection.check(f, allow: [.ok])
                return try Responses.parseCounter(f)
            }
            throw ClientError(.server, "the counter \(keyText(key)) was superseded by newer writes \(Self.maxSupersededRetries) times in a row", status: .superseded)
        }
        return (value, failures)
    }

    /// TOUCH on the first live node, then replicated as a versioned write. False when absent.
    /// Each attempt carries a new version from this client's clock, as `counter` does: a TOUCH
    /// that runs late on a resumed node cannot give its old copy a version newer than the
    /// writes made meanwhile.
    public func touch(_ key: [UInt8], namespace: [UInt8] = [], expiry: WireExpiry) throws -> Bool {
        try touchReporting(key, namespace: namespace, expiry: expiry).touched
    }

    /// `touch`, with the nodes that did not take it (`"H:P: why"`).
    public func touchReporting(_ key: [UInt8], namespace: [UInt8] = [], expiry: WireExpiry) throws -> (touched: Bool, failures: [String]) {
        let behind = settleAcrossReplicas(key, namespace)
        let (touched, failures) = try onPrimaryThenReplicate(key, namespace, skipping: behind) { conn, verifiedOnly -> Bool? in
            for _ in 0..<Self.maxSupersededRetries {
                let f = try conn.call(.touch(namespace: namespace, key: key, tiers: 0, expiry: expiry, version: hlc.next(),
                                             verifiedOnly: verifiedOnly))
                if f.statusCode == .superseded { hlc.observe(f.cas); continue }
                if f.statusCode == .notFound { return nil }
                try NodeConnection.check(f, allow: [.ok])
                return true
            }
            throw ClientError(.server, "the touch of \(keyText(key)) was superseded by newer writes \(Self.maxSupersededRetries) times in a row", status: .superseded)
        }
        return (touched ?? false, failures)
    }

    /// Runs `body` on the first live node of the key not in `skipping` (nodes that must not
    /// decide, with why: `settleAcrossReplicas`), then copies the result to the others.
    /// Returns the result and the nodes that did not take it. `body` gets whether to send
    /// VERIFIED_ONLY (PROTOCOL.md §7.9): while another node could decide, a node that has not
    /// verified the key with its replicas (it noticed a pause, it restarted) answers UNVERIFIED
    /// and the next one decides — an outside review (cl14) lost every increment a replica
    /// acknowledged during a 5 s owner pause when the owner, resuming, ran the increments sent
    /// to it during the pause from its old value. Only when every node that answered said
    /// UNVERIFIED do they decide without the flag, in order (as with a single node).
    private func onPrimaryThenReplicate<T>(_ key: [UInt8], _ ns: [UInt8], skipping: [String: String] = [:],
                                           _ body: (NodeConnection, _ verifiedOnly: Bool) throws -> T?) throws -> (T?, [String]) {
        let nodes = targets(key, ns)
        var failures: [(String, String)] = []
        let decided: (T?, [String])? = try firstDecision(nodes.count) { i, fenced in
            let node = nodes[i]
            if let why = skipping[node.address.name] {
                failures.append((node.address.name, why))
                return .next
            }
            do {
                return .done(try decide(on: i, of: nodes, key, ns, fenced: fenced, failures: &failures, body) ?? (nil, []))
            } catch let e as ClusterError {
                throw e
            } catch let e as ClientError where e.kind == .server && e.status == .unverified {
                failures.append((node.address.name, Self.unverifiedReason))
                return .unverified
            } catch let e as ClientError where e.kind == .server && e.status != .shuttingDown && e.status != .busy {
                // The node answered (NOT_A_NUMBER, INVALID_ARGUMENT, …): that is the answer, not
                // a node to skip — another replica would say the same.
                throw e
            } catch {
                failures.append((node.address.name, "\(error)"))
                return .next
            }
        }
        if let decided { return decided }
        throw ClusterError(message: "no node could serve \(keyText(key))", failures: failures)
    }

    /// `body` on node `i`, then its result copied to the key's other nodes. Nil result with
    /// nil item: absent (nothing decided).
    private func decide<T>(on i: Int, of nodes: [NodeHandle], _ key: [UInt8], _ ns: [UInt8], fenced: Bool,
                           failures: inout [(String, String)],
                           _ body: (NodeConnection, Bool) throws -> T?) throws -> (T?, [String])? {
        let node = nodes[i]
        // The owner decides whenever it answers: a client that skipped it after a timeout
        // decided on a replica while another, whose read the owner answered on resuming,
        // decided on the owner — two increments from one value (an outside review, cl13). So
        // the owner is waited for again, quiet or not; a replica decides only when the owner
        // does not answer twice (or answers UNVERIFIED).
        let (result, item): (T?, ItemPayload?) = try node.run(ignoringQuiet: i == 0) { conn in
            guard let r = try body(conn, fenced) else { return (nil, nil) }
            return (r, try conn.get(key, namespace: ns))
        }
        guard let r = result else { return nil }
        var missed: [String] = []
        if let item, nodes.count > 1 {
            var s = SetRequest(key: key, value: item.value, namespace: ns)
            s.flags = item.flags; s.extended = item.extended; s.version = item.version
            s.expiry = item.expiresAt == 0 ? .never : .at(unixMicros: item.expiresAt)
            s.tiers = 2
            s.stale = item.stale; s.negative = item.negative
            var reached = [node.address.name]
            // The other nodes at once (`fanOut`): one after another, a paused replica's
            // timeout came on top of the primary's.
            let others = nodes.enumerated().filter { $0.offset != i }.map(\.element)
            let copy = s
            for (other, r) in zip(others, fanOut(others) { _, n in try n.run { try $0.set(copy) } }) {
                switch r {
                case .success(let f) where f.statusCode == .ok || f.statusCode == .superseded: reached.append(other.address.name)
                case .success(let f): failures.append((other.address.name, "\(f.statusCode)"))
                case .failure(let e): failures.append((other.address.name, "\(e)"))
                }
            }
            if !failures.isEmpty { hint(ns, key, item.version) }
            guard reached.count >= needed(nodes.count) else {
                // Where it landed, as a write's error says: it may or may not take effect.
                throw ClusterError(message: "update of \(keyText(key)) reached \(reached.count) of \(nodes.count) nodes (\(reached.joined(separator: ", "))); the \(configuration.ack.rawValue) policy needs \(needed(nodes.count))", failures: failures)
            }
            var seen = Set(reached)
            for (name, why) in failures where seen.insert(name).inserted { missed.append("\(name): \(why)") }
        }
        return (r, missed)
    }
}

/// What a node did with a key's counter or conditional write (`ClusterClient.firstDecision`).
enum DeciderAnswer<T> {
    /// Decided (or answered for good): the call ends with this.
    case done(T)
    /// Answered UNVERIFIED to VERIFIED_ONLY: it may decide without the flag if no node does.
    case unverified
    /// Did not decide (down, timed out, behind): the next node is asked.
    case next
}

extension ClusterClient {
    static let unverifiedReason = "has not verified the key with its other replicas since a restart or a pause (UNVERIFIED)"

    /// The order in which a key's `count` nodes decide a counter, a touch or a conditional
    /// write (PROTOCOL.md §7.9): each, owner first, with VERIFIED_ONLY (`fenced`) while another
    /// node could decide; when none decided, those that answered UNVERIFIED, in order, without
    /// it (as a single node decides). Nil when no node decided.
    func firstDecision<T>(_ count: Int, _ attempt: (_ index: Int, _ fenced: Bool) throws -> DeciderAnswer<T>) rethrows -> T? {
        var unverified: [Int] = []
        for fenced in count > 1 ? [true, false] : [false] {
            for i in fenced || count == 1 ? Array(0..<count) : unverified {
                switch try attempt(i, fenced) {
                case .done(let t): return t
                case .unverified: unverified.append(i)
                case .next: break
                }
            }
        }
        return nil
    }
}
