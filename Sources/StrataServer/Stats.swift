#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import StrataCore
import StrataWire

/// A latency histogram with bounded relative error: buckets at 2^(1/4) steps from 1 µs to
/// about 70 s (≈ 19 % wide), counted with relaxed atomics. Percentiles are bucket upper bounds.
final class LatencyHistogram: Sendable {
    static let bucketCount = 105
    private let buckets: [Counter]

    init() { buckets = (0..<Self.bucketCount).map { _ in Counter() } }

    func record(micros: Double, count: Int = 1) {
        let b = micros <= 1 ? 0 : min(Self.bucketCount - 1, Int((log2(micros) * 4).rounded(.up)))
        buckets[b].add(count)
    }

    /// Cumulative counts at Prometheus-style upper bounds (seconds), every 4th bucket (×2 steps).
    func cumulativeSeconds() -> [(le: Double, count: Int)] {
        let counts = buckets.map { $0.load() }
        var out: [(Double, Int)] = []
        var sum = 0
        for (i, c) in counts.enumerated() {
            sum += c
            if i % 4 == 0 && i <= 100 { out.append((pow(2, Double(i) / 4) / 1e6, sum)) }
        }
        return out
    }

    var count: Int { buckets.reduce(0) { $0 + $1.load() } }

    /// The sum of observations, approximated by each bucket's upper bound (seconds).
    var approximateSumSeconds: Double {
        buckets.enumerated().reduce(0.0) { $0 + Double($1.element.load()) * pow(2, Double($1.offset) / 4) / 1e6 }
    }

    func percentile(_ p: Double) -> Double {
        let counts = buckets.map { $0.load() }
        let total = counts.reduce(0, +)
        guard total > 0 else { return 0 }
        let target = Int((Double(total) * p).rounded(.up))
        var seen = 0
        for (i, c) in counts.enumerated() {
            seen += c
            if seen >= max(1, target) { return pow(2, Double(i) / 4) }
        }
        return pow(2, Double(Self.bucketCount - 1) / 4)
    }
}

/// The node's counters (STATS), all relaxed atomics.
final class NodeStats: Sendable {
    let started = monotonicSeconds()
    let connectionsCurrent = Atomic<Int>(0)
    let connectionsTotal = Atomic<Int>(0)
    let connectionsRefused = Atomic<Int>(0)
    let bytesIn = Atomic<Int>(0)
    let bytesOut = Atomic<Int>(0)
    let bufferedBytes = Atomic<Int>(0)
    /// The connection (its object identity) that may read past `--max-buffered-bytes` while
    /// others wait for room, 0 for none: one request at a time arrives whole, so writers held
    /// by the bound finish one after another instead of all waiting for `--frame-timeout`
    /// (`OutputConnection.waitsForBufferRoom`).
    let bufferOverdraft = Atomic<Int>(0)
    let busyRefusals = Atomic<Int>(0)
    /// When a request was last answered BUSY for `--max-buffered-bytes` (monotonic ms): a
    /// silent holder of the turn is then closed even when nobody else holds bytes
    /// (`OutputConnection.closedForStalledTurn`).
    let lastBufferBusyMillis = Atomic<Int>(0)
    /// Writes refused for lack of disk space: DISK_FULL (binary), `SERVER_ERROR out of memory
    /// storing object` (memcached).
    let diskFullRefusals = Atomic<Int>(0)
    /// GETs whose disk read ran on their event loop (`NodeConfiguration.diskReadsOnLoop`).
    let loopDiskReads = Atomic<Int>(0)
    let malformedFrames = Atomic<Int>(0)
    let outputCapCutoffs = Atomic<Int>(0)
    let timeouts = Atomic<Int>(0)
    let authFailures = Atomic<Int>(0)
    /// Failed authentications answered after a delay (`AuthThrottle`).
    let authDelayed = Atomic<Int>(0)
    /// Requests answered FORBIDDEN (and memcached commands refused as forbidden).
    let forbidden = Atomic<Int>(0)
    /// Credential reloads (SIGHUP) that took effect, and those refused (the old users stay).
    let credentialsReloads = Atomic<Int>(0)
    let credentialsReloadFailures = Atomic<Int>(0)
    /// Connections open and not yet authenticated (a token is set).
    let connectionsUnauthenticated = Atomic<Int>(0)
    /// Connections closed for sending no HELLO with the token within the auth timeout.
    let authTimeouts = Atomic<Int>(0)
    /// Pauses the node noticed (`Node.checkPause`).
    let pausesNoticed = Atomic<Int>(0)
    /// Unauthenticated connections closed to make room past --max-unauthenticated.
    let authEvictions = Atomic<Int>(0)
    /// accept() calls that failed (out of descriptors, or the kernel refused).
    let acceptErrors = Atomic<Int>(0)
    /// TLS: connections accepted on the TLS port, handshakes that failed (not TLS, a
    /// certificate refused, cut by the frame timeout), certificate reloads and failed reloads.
    let tlsConnections = Atomic<Int>(0)
    let tlsHandshakeFailures = Atomic<Int>(0)
    let tlsReloads = Atomic<Int>(0)
    let tlsReloadFailures = Atomic<Int>(0)
    let ops: [Counter] = (0..<256).map { _ in Counter() }
    /// Images stored, by image format code (PROTOCOL.md §7.10).
    let imagesStored: [Counter] = (0..<8).map { _ in Counter() }
    let variantsComputed = Counter()
    let variantHits = Counter()
    /// Stored variants removed because their original was replaced, touched, invalidated or deleted.
    let variantsDropped = Counter()
    /// Variants computed and answered but not stored: their original had `maxStoredVariants`.
    let variantsNotStored = Counter()
    let transformMicros = Counter()
    /// Read-through: leases granted, GETs told another client is filling, fills refused
    /// (LEASE_LOST), negative entries served, stale items served.
    let leasesGranted = Counter()
    let leasesFilling = Counter()
    let leasesLost = Counter()
    let negativeHits = Counter()
    let staleHits = Counter()
    let latency: [LatencyHistogram] = (0..<256).map { _ in LatencyHistogram() }
    /// Anti-entropy (`AntiEntropy`): rounds finished and failed, keys copied here and to
    /// peers, buckets that differed, time spent in rounds, peers declared out of contact,
    /// GET/MGET answers flagged UNVERIFIED.
    let syncRounds = Counter()
    let syncFailures = Counter()
    let syncPulled = Counter()
    let syncPushed = Counter()
    /// Invalid images a `--validate-images` node did not take from a peer, or a peer did not take from this node.
    let syncInvalidImages = Counter()
    /// Values a peer held that were over this node's largest stored item, or this node's over a peer's (not copied).
    let syncTooLarge = Counter()
    let syncBucketsDiffering = Counter()
    /// Digests (ours for a round, or a SYNC_DIGEST answer) taken from `SyncDigests`, and made by a pass over the rows.
    let syncDigestsMaintained = Counter(), syncDigestsPassed = Counter()
    let syncMicros = Counter()
    let peersLost = Counter()
    let membershipChanges = Counter()
    let unverifiedAnswers = Counter()
    /// memcached reads of keys a `--cluster` node had not verified: brought up to date from the
    /// key's other replicas first, or — none answering — answered as misses.
    let readRepairs = Counter(), readRepairFailures = Counter()
    /// INCR/DECR/TOUCH with VERIFIED_ONLY refused with UNVERIFIED (PROTOCOL.md §7.9).
    let unverifiedRefusals = Counter()
    /// Hinted handoff (`Handoff`): hints made (one per write and other replica), writes
    /// checked with peers, copied to peers that lacked them, dropped past the bound, and
    /// batches that failed (retried).
    let handoffHints = Counter()
    let handoffChecked = Counter()
    let handoffCopied = Counter()
    let handoffDropped = Counter()
    let handoffFailures = Counter()
    /// Writes to the disk tier of a key this node is not a replica of under its `--cluster`
    /// list: a client on another member list (or a rolling change in progress).
    let foreignWrites = Counter()

    func recordOp(_ opcode: UInt8, micros: Double) {
        ops[Int(opcode)].add(1)
        latency[Int(opcode)].record(micros: micros)
    }

    /// `count` operations that took `micros` each (a batch answered together: its time shared out).
    func recordOps(_ opcode: UInt8, count: Int, micros: Double) {
        ops[Int(opcode)].add(count)
        latency[Int(opcode)].record(micros: micros, count: count)
    }
}
