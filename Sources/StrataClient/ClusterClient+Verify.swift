#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataWire

// When a key's answer is checked with its other nodes, and how the stale ones are repaired:
// a node that started or noticed a pause within `rejoinWindow` (HELLO's start version), a
// hinted key, a miss with `missFailover` (README "How it stays correct").
extension ClusterClient {
    /// Whether `node` started, or noticed a pause, within `rejoinWindow` (per its last HELLO).
    func recentlyStarted(_ node: NodeHandle) -> Bool {
        let start = node.knownStartVersion
        return start != 0 && Double(configuration.clock.nowMicros()) - Double(start) < configuration.rejoinWindow * 1e6
    }

    /// Tries of a versioned INCR/DECR/TOUCH answered SUPERSEDED: each retry takes a version past
    /// the one the node holds, and every round one of the writers racing on the key wins, so
    /// 100 tasks on one counter all finish (8 were too few under such contention).
    static let maxSupersededRetries = 256

    /// Before an operation the first live node decides from its own copy — a conditional
    /// write, a counter, a touch, an invalidate, a read-through — when that node started or
    /// was paused within `rejoinWindow` (or this client holds a hint for the key): a `get`
    /// first, which compares the key's nodes and writes the newest back onto the others. An
    /// outside review: a returning owner still holding 5 turned a counter at 10 into 6 on every
    /// node, let a CAS with a superseded version win, and an `add` overwrite a key set while it
    /// was down. Costs one read of the key's nodes per such operation during that window.
    func settleBeforeDeciding(_ key: [UInt8], _ ns: [UInt8]) {
        let nodes = targets(key, ns)
        guard nodes.count > 1 else { return }
        var suspect = isHinted(ns, key)
        if !suspect {
            for node in nodes {
                guard (try? node.run { _ in () }) != nil else { continue } // the first live node decides
                suspect = recentlyStarted(node)
                break
            }
        }
        if suspect { _ = try? get(key, namespace: ns) }
    }

    /// Before a counter or a touch is decided on one node: every node of the key is asked at
    /// once (`fanOut`) and those behind are given the newest answer (value or tombstone), so the
    /// node that decides does not compute from an old value. Returns the nodes that are behind
    /// and could not be brought up to date, each with why: they must not decide. An outside
    /// review (cl12): an `incr` acknowledged by the replica while the owner was paused for less
    /// than `--pause-threshold` (so the owner did not know) was lost when the next `decr` was
    /// decided on the resumed owner's old value; an acknowledged `del` came back the same way.
    /// (A node that knows it may be behind — it noticed its pause — refuses to decide itself:
    /// VERIFIED_ONLY, `ClusterClient+Counters.swift`.) Costs one round trip to the key's nodes
    /// at once per counter or touch.
    func settleAcrossReplicas(_ key: [UInt8], _ ns: [UInt8]) -> [String: String] {
        let nodes = targets(key, ns)
        guard nodes.count > 1 else { return [:] }
        let results = fanOut(nodes) { [self] _, node in try ask(node, key, ns).0 }
        var answers: [(NodeHandle, Answer)] = []
        for (node, r) in zip(nodes, results) { if case .success(let a) = r { answers.append((node, a)) } }
        guard answers.count > 1, let newest = answers.max(by: { $0.1.version < $1.1.version })?.1 else { return [:] }
        var behind: [String: String] = [:]
        for (node, a) in answers where a.version < newest.version {
            if !repair([(node, a)], newest: newest, key: key, ns: ns, all: nodes) {
                behind[node.address.name] = "holds an older version than another node of the key and could not be brought up to date"
            }
        }
        return behind
    }

    func mustVerify(_ node: NodeHandle, _ a: Answer, _ key: [UInt8], _ ns: [UInt8]) -> Bool {
        if isHinted(ns, key) { return true }
        let recentStart = recentlyStarted(node)
        let start = node.knownStartVersion
        switch a {
        case .item(let item):
            // Written before the node's last start: it may have missed a newer write.
            return recentStart && item.version < start
        case .absent:
            return configuration.missFailover || recentStart
        }
    }

    /// Writes the newest answer onto nodes that answered with something older; false when a
    /// repair failed.
    @discardableResult
    func repair(_ answers: [(NodeHandle, Answer)], newest: Answer, key: [UInt8], ns: [UInt8], all: [NodeHandle]) -> Bool {
        var ok = true
        for (node, a) in answers where a.version < newest.version {
            let isOwner = node === all.first
            switch newest {
            case .item(let item):
                var s = SetRequest(key: key, value: item.value, namespace: ns)
                s.flags = item.flags; s.extended = item.extended; s.version = item.version
                s.expiry = item.expiresAt == 0 ? .never : .at(unixMicros: item.expiresAt)
                s.tiers = isOwner ? 0 : 2
                s.stale = item.stale; s.negative = item.negative
                let f = try? node.run { try $0.set(s) }
                if f?.statusCode != .ok && f?.statusCode != .superseded { ok = false }
            case .absent(let tombstone) where tombstone > 0:
                let f = try? node.run { try $0.call(.delete(namespace: ns, key: key, tiers: 0, version: tombstone, writeBehind: false)) }
                if f == nil { ok = false }
            case .absent:
                break
            }
        }
        return ok
    }
}
