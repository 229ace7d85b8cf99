#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataWire

/// How many of a key's nodes must confirm a write.
public enum AckPolicy: String, Sendable { case one, majority, all }
/// Where reads go: the owner (with version checks where a node may be stale), or a majority
/// of the key's nodes, newest version wins.
public enum ReadPolicy: String, Sendable { case owner, quorum }

public struct ClusterConfiguration: Sendable {
    public var nodes: [NodeAddress]
    /// Copies in total (owner + replicas).
    public var replicas = 2
    public var ack: AckPolicy = .all
    public var read: ReadPolicy = .owner
    /// On an owner miss, also ask the replicas (and repair the owner).
    public var missFailover = false
    /// Seconds any one node may take to answer (connect, send, receive).
    public var timeout: Double = 2
    public var token: [UInt8]? = nil
    /// Connect to the nodes' TLS ports and verify their certificates (nil: plaintext). Every
    /// node address must then be a TLS port; the name checked is each node's host unless
    /// `serverName` is set.
    public var tls: TLSClientConfiguration? = nil
    public var pointsPerWeight = HashRing.defaultPointsPerWeight
    /// Seconds after a node (re)started on existing data during which its misses are checked
    /// against replicas (items older than its start are checked within this window too).
    public var rejoinWindow: Double = 3600
    /// Keys whose write missed a node, remembered so reads compare versions (bounded).
    public var maxHints = 10_000
    /// Idle connections kept per node for reuse (a thread that finds none opens one; beyond
    /// this many idle, a returned connection is closed). Size it to the caller's concurrency.
    public var maxIdleConnectionsPerNode = 16
    /// Seconds after which a pooled connection says HELLO again before its next request, so a
    /// long-lived client learns within about this long that a node restarted or was paused
    /// (PROTOCOL.md §7.1) and verifies its answers; 0 = only when a connection opens.
    public var helloInterval: Double = 1
    public var clock: any Clock = SystemClock()
    public init(nodes: [NodeAddress]) { self.nodes = nodes }
}

/// Why a cluster call could not be served: a message and each node's failure.
public struct ClusterError: Error, CustomStringConvertible, Sendable {
    public let message: String
    public let failures: [(node: String, reason: String)]
    /// The message and each failure once (a node asked twice — first as the decider, then as
    /// a replica — is named once).
    public var description: String {
        var seen = Set<String>()
        let lines = failures.map { "\($0.node): \($0.reason)" }.filter { seen.insert($0).inserted }
        return lines.isEmpty ? message : message + " (" + lines.joined(separator: "; ") + ")"
    }
}

/// What a cluster write did.
public enum ClusterSetOutcome: Equatable, Sendable {
    case stored(version: UInt64)
    case exists
    case notFound
    case casMismatch(current: UInt64)
    /// A fill whose lease had expired or was revoked (the key was deleted or invalidated meanwhile): not stored.
    case leaseLost
}

/// A client for a Strata cluster: keys placed by the ring of proto-spec/RING.md, writes
/// replicated with one client-assigned version (the owner gets all tiers, replicas the disk
/// tier), reads from the owner with failover, version comparison and read repair.
///
/// No stale reads after a node returns: a node reports in HELLO when it (re)started on existing
/// data; items older than that, and misses within `rejoinWindow` of it, are compared with the
/// key's other nodes and the newest version (tombstones included) wins and is repaired onto
/// the stale node. Writes that missed a node leave a bounded in-memory hint, so this client
/// also compares versions for those keys. Thread-safe; blocking (every call is bounded by the
/// per-node timeout for each node it has to ask).
public final class ClusterClient: @unchecked Sendable {
    public let configuration: ClusterConfiguration
    public let ring: HashRing
    let handles: [String: NodeHandle]
    let hlc: HybridLogicalClock
    /// Concurrent `getOrLoad` calls for one key in this process share one load.
    let loadFlights = SingleFlight<ItemKey, LoadedValue>()
    private let hintLock = Lock()
    private var hints: [ItemKey: UInt64] = [:]

    public init(configuration: ClusterConfiguration) throws {
        // A bad configuration is the caller's error (INVALID_ARGUMENT), not an unreachable node.
        guard !configuration.nodes.isEmpty else { throw WireError(.invalidArgument, "the cluster configuration names no nodes") }
        guard configuration.replicas >= 1 else { throw WireError(.invalidArgument, "replicas must be at least 1, got \(configuration.replicas)") }
        self.configuration = configuration
        ring = HashRing(members: configuration.nodes.map { .init(name: $0.name) }, pointsPerWeight: configuration.pointsPerWeight)
        var h: [String: NodeHandle] = [:]
        var tls: ClientTLS? = nil
        if let t = configuration.tls {
            do { tls = try ClientTLS(t) } catch { throw ClusterError(message: "\(error)", failures: []) }
        }
        for n in configuration.nodes { h[n.name] = NodeHandle(address: n, timeout: configuration.timeout, token: configuration.token,
                                                        maxIdle: configuration.maxIdleConnectionsPerNode, clock: configuration.clock,
                                                        helloInterval: configuration.helloInterval, tls: tls) }
        handles = h
        hlc = HybridLogicalClock(clock: configuration.clock)
    }

    /// The key's nodes: owner first.
    public func nodes(for key: [UInt8], namespace: [UInt8] = []) -> [NodeAddress] {
        ring.nodes(for: key, namespace: namespace, count: configuration.replicas).compactMap { handles[$0.name]?.address }
    }

    func targets(_ key: [UInt8], _ ns: [UInt8]) -> [NodeHandle] {
        ring.nodes(for: key, namespace: ns, count: configuration.replicas).compactMap { handles[$0.name] }
    }

    func needed(_ n: Int) -> Int {
        switch configuration.ack {
        case .one: return 1
        case .majority: return n / 2 + 1
        case .all: return n
        }
    }

    func hint(_ ns: [UInt8], _ key: [UInt8], _ version: UInt64) {
        hintLock.withLock {
            if hints.count >= configuration.maxHints, let k = hints.keys.first { hints[k] = nil }
            hints[ItemKey(namespace: ns, key: key)] = version
        }
    }

    func isHinted(_ ns: [UInt8], _ key: [UInt8]) -> Bool { hintLock.withLock { hints[ItemKey(namespace: ns, key: key)] != nil } }
    func clearHint(_ ns: [UInt8], _ key: [UInt8], upTo version: UInt64) {
        hintLock.withLock {
            let k = ItemKey(namespace: ns, key: key)
            if let v = hints[k], v <= version { hints[k] = nil }
        }
    }

    // MARK: Writes

    /// Stores a value on the key's nodes. Throws `ClusterError` when the acknowledgement
    /// policy was not met (the message names each node that failed and why). With
    /// `writeBehind`, each node answers before the write is in its durability log (a node crash
    /// may lose it; PROTOCOL.md WRITE_BEHIND).
    public func set(_ key: [UInt8], _ value: [UInt8], namespace: [UInt8] = [], expiry: WireExpiry = .storeDefault,
                    flags: UInt32 = 0, extended: [UInt8] = [], mode: SetModeCode = .set, casVersion: UInt64 = 0,
                    writeBehind: Bool = false, validateImage: Bool = false) throws -> ClusterSetOutcome {
        try setReporting(key, value, namespace: namespace, expiry: expiry, flags: flags, extended: extended, mode: mode,
                         casVersion: casVersion, writeBehind: writeBehind, validateImage: validateImage).outcome
    }

    /// Like `set`, and also says which nodes acknowledged the write (and why others did not).
    /// `validateImage`: each node refuses a value that is not a whole image (flag
    /// VALIDATE_IMAGE, PROTOCOL.md §2.1) — INVALID_IMAGE from every node, so nothing is stored.
    public func setReporting(_ key: [UInt8], _ value: [UInt8], namespace: [UInt8] = [], expiry: WireExpiry = .storeDefault,
                             flags: UInt32 = 0, extended: [UInt8] = [], mode: SetModeCode = .set,
                             casVersion: UInt64 = 0, writeBehind: Bool = false, validateImage: Bool = false) throws -> ClusterWriteReport {
        if (mode != .set && mode != .lease) || casVersion != 0 { settleBeforeDeciding(key, namespace) }
        let version = hlc.next()
        var s = SetRequest(key: key, value: value, namespace: namespace)
        s.expiry = expiry; s.flags = flags; s.extended = extended; s.mode = mode; s.casVersion = casVersion; s.version = version
        s.writeBehind = writeBehind
        s.validateImage = validateImage
        return try replicate(s)
    }

    /// Deletes the key everywhere with one version, leaving tombstones so a late, older write
    /// cannot bring it back. Returns whether any node held it.
    @discardableResult
    public func delete(_ key: [UInt8], namespace: [UInt8] = []) throws -> Bool {
        try deleteReporting(key, namespace: namespace).found
    }

    /// `delete`, saying which nodes did not take it and whether the key's existence is unknown.
    public func deleteReporting(_ key: [UInt8], namespace: [UInt8] = []) throws -> ClusterDeleteReport {
        // Every node in both tiers: a DELETE removes only the tiers it names (PROTOCOL.md
        // §7.6), and a replica may hold a memory copy promoted by a read it served.
        try versionedEverywhereReporting("delete", key, namespace) { _, version in
            .delete(namespace: namespace, key: key, tiers: 0, version: version, writeBehind: false)
        }
    }

    /// Marks the key stale on every node with one version (stale-while-revalidate): readers
    /// keep getting the value, flagged stale, while one `getOrLoad` caller refreshes it. Any
    /// lease on the key is revoked, so a load that started before cannot store an old value.
    /// Returns whether any node held the key.
    @discardableResult
    public func invalidate(_ key: [UInt8], namespace: [UInt8] = []) throws -> Bool {
        try invalidateReporting(key, namespace: namespace).found
    }

    /// `invalidate`, saying which nodes did not take it and whether the key's existence is
    /// unknown (as `deleteReporting`).
    public func invalidateReporting(_ key: [UInt8], namespace: [UInt8] = []) throws -> ClusterDeleteReport {
        // Each node marks its own copy stale with the new version: an old copy would win.
        settleBeforeDeciding(key, namespace)
        return try versionedEverywhereReporting("invalidate", key, namespace) { tiers, version in
            .invalidate(namespace: namespace, key: key, tiers: tiers, version: version)
        }
    }

    // MARK: Reads

    /// What one node said about a key.
    enum Answer: Sendable {
        case item(ItemPayload)
        case absent(tombstone: UInt64)
        var version: UInt64 {
            switch self {
            case .item(let i): return i.version
            case .absent(let t): return t
            }
        }
    }

    /// What `node` says about the key, and whether it flagged the answer UNVERIFIED (it has not
    /// caught up with the key's other replicas since a restart, pause or partition).
    func ask(_ node: NodeHandle, _ key: [UInt8], _ ns: [UInt8]) throws -> (Answer, unverified: Bool) {
        try node.run { conn in
            let f = try conn.call(.get(GetRequest(key: key, namespace: ns)))
            let unverified = f.responseFlags & ResponseFlags.unverified.rawValue != 0
            if f.statusCode == .notFound { return (.absent(tombstone: f.cas), unverified) }
            try NodeConnection.check(f, allow: [.ok, .negative])
            return (.item(try Responses.parseGet(f)), unverified)
        }
    }

    /// The item, or nil. See the type's documentation for when other nodes are consulted. A
    /// stale item has `stale` set; a negative entry has `negative` set (its value is the message).
    ///
    /// An answer a node flagged UNVERIFIED (PROTOCOL.md §7.19) is compared with every other
    /// node of the key; when none of them answers and no answer was verified, this throws
    /// `ClusterError` rather than return what may be an old value or a deleted one.
    public func get(_ key: [UInt8], namespace: [UInt8] = []) throws -> ItemPayload? {
        let nodes = targets(key, namespace)
        var failures: [(String, String)] = []
        var answers: [(NodeHandle, Answer)] = []
        var unverified = false, anyVerified = false
        let quorum = configuration.read == .quorum ? nodes.count / 2 + 1 : 1
        var index = 0
        // First: the owner (or the first live node), or a majority for quorum reads.
        while index < nodes.count && answers.count < quorum {
            let node = nodes[index]
            index += 1
            do {
                let (a, flagged) = try ask(node, key, namespace)
                answers.append((node, a))
                unverified = unverified || flagged
                anyVerified = anyVerified || !flagged
            } catch {
                failures.append((node.address.name, "\(error)"))
            }
        }
        guard let first = answers.first else {
            throw ClusterError(message: "no node could serve \(keyText(key))", failures: failures)
        }
        if configuration.read == .quorum && answers.count < quorum {
            throw ClusterError(message: "only \(answers.count) of the \(quorum) nodes a quorum read of \(keyText(key)) needs answered", failures: failures)
        }
        // Then: should the others be asked too?
        if answers.count < nodes.count && (unverified || mustVerify(first.0, first.1, key, namespace)) {
            while index < nodes.count {
                let node = nodes[index]
                index += 1
                do {
                    let (a, flagged) = try ask(node, key, namespace)
                    answers.append((node, a))
                    anyVerified = anyVerified || !flagged
                } catch {
                    failures.append((node.address.name, "\(error)"))
                }
            }
        }
        if !anyVerified && answers.count < nodes.count {
            throw ClusterError(message: Self.onlyUnverified(answers.map(\.0.address.name), key), failures: failures)
        }
        guard let newest = answers.max(by: { $0.1.version < $1.1.version })?.1 else { return nil }
        let repaired = answers.count > 1 ? repair(answers, newest: newest, key: key, ns: namespace, all: nodes) : true
        // The hint goes only when every node answered, every repair worked, and nothing newer
        // was hinted meanwhile.
        if answers.count == nodes.count && repaired { clearHint(namespace, key, upTo: newest.version) }
        if case .item(let item) = newest { return item }
        return nil
    }

    public func exists(_ key: [UInt8], namespace: [UInt8] = []) throws -> Bool { try get(key, namespace: namespace) != nil }

    public func getMany(_ keys: [[UInt8]], namespace: [UInt8] = []) throws -> [ItemPayload?] {
        try keys.map { try get($0, namespace: namespace) }
    }

    /// The error of a read that only nodes flagging their answer UNVERIFIED answered (one
    /// wording for every command).
    static func onlyUnverified(_ nodes: [String], _ key: [UInt8]) -> String {
        "\(nodes.joined(separator: ", ")) flagged \(quotedKey(key)) UNVERIFIED (not caught up with the key's other replicas since a restart, pause or lost contact) and no other replica answered"
    }

    /// META from the first live node of the key whose answer is verified; answers flagged
    /// UNVERIFIED (§7.19) are compared with the next nodes' (the newest wins), and when every
    /// answer is flagged and a node did not answer, this throws as `get` does.
    public func meta(_ key: [UInt8], namespace: [UInt8] = []) throws -> MetaInfo? {
        var failures: [(String, String)] = []
        var flagged: [MetaInfo?] = []
        var flaggedBy: [String] = []
        let nodes = targets(key, namespace)
        func newest(_ answers: [MetaInfo?]) -> MetaInfo? { answers.compactMap { $0 }.max { $0.version < $1.version } }
        for node in nodes {
            do {
                let (m, unverified) = try node.run { conn -> (MetaInfo?, Bool) in
                    let f = try conn.call(.meta(namespace: namespace, key: key, tiers: 0))
                    let unverified = f.responseFlags & ResponseFlags.unverified.rawValue != 0
                    if f.statusCode == .notFound { return (nil, unverified) }
                    try NodeConnection.check(f, allow: [.ok])
                    return (try Responses.parseMeta(f), unverified)
                }
                if !unverified { return newest(flagged + [m]) }
                flagged.append(m)
                flaggedBy.append(node.address.name)
            } catch { failures.append((node.address.name, "\(error)")) }
        }
        if !flagged.isEmpty && flagged.count == nodes.count { return newest(flagged) }
        if !flagged.isEmpty {
            throw ClusterError(message: Self.onlyUnverified(flaggedBy, key), failures: failures)
        }
        throw ClusterError(message: "no node could serve \(keyText(key))", failures: failures)
    }

    /// IMAGE_VARIANT routed by the original's key to its first live node (variants live on
    /// the original's node).
    public func variant(_ request: VariantRequest) throws -> Frame {
        var failures: [(String, String)] = []
        for node in targets(request.key, request.namespace) {
            do { return try node.run { try $0.call(.imageVariant(request)) } } catch { failures.append((node.address.name, "\(error)")) }
        }
        throw ClusterError(message: "no node could serve a variant of \(keyText(request.key))", failures: failures)
    }

    /// The nodes this client currently treats as dead (3 consecutive failures; probed again
    /// after a backoff of 1 s doubling to 30 s).
    public var deadNodes: [String] { configuration.nodes.filter { handles[$0.name]?.isDead ?? false }.map(\.name) }

    /// Runs `body` on one node by name (stats, flush, ping of every node).
    public func onNode<T>(_ name: String, _ body: (NodeConnection) throws -> T) throws -> T {
        guard let h = handles[name] else { throw ClusterError(message: "no node named \(name)", failures: []) }
        return try h.run(body)
    }

    func keyText(_ k: [UInt8]) -> String { quotedKey(k) }
}
