import StrataCore
import StrataStore

/// Anti-entropy's maintained digests (ARCHITECTURE.md "Repair in the nodes"): for each peer,
/// one XOR digest per 16-bit bucket of the ring position over the disk tier's rows that this
/// node and the peer both hold by this node's member list — what SYNC_DIGEST answers — kept
/// current from the disk tier's row changes (`DiskRowWatcher`) instead of a pass over every row
/// per round. Settled rounds (a `max_version` below 2^64 − 1) use them; catching-up rounds,
/// other member lists and nodes of more than 64 members pass over the rows as before, exactly.
///
/// What they count differs from a pass (PROTOCOL.md §7.19 "Maintained digests"), never in a
/// way that hides a difference both passes would see for long: rows of a flushed generation
/// and rows a flush mark supersedes until the sweeps collect them; the durability log's pending
/// writes only once applied (milliseconds); an expiry from the next whole second on. A
/// difference that is only that costs the round a SYNC_KEYS of its buckets, which lists exactly.
///
/// Costs: 512 KiB per peer sharing keys; 24 bytes per change of a row with an expiry until
/// that second passes (at most `maxExpiring`; past it, one relisting, then off until the next
/// member list); a ring of the last `recentCapacity` changes (48 bytes each) from which a
/// settled answer leaves out the writes newer than `max_version`; per change one ring position,
/// a binary search, an XXH64 and a few XORs on the disk writer thread; per answer a copy of the
/// peer's digests and a walk over the recent ring, under the lock the writer's changes take.
final class SyncDigests: DiskRowWatcher, @unchecked Sendable {
    /// The digests' bucket bits: SYNC_DIGEST's most. Fewer bits are folds of these.
    static let bits: UInt8 = 16
    static let recentCapacity = 1 << 17
    static let maxExpiring = 1 << 20

    private struct Toggle { let mask: UInt64; let e: UInt64; let bucket: UInt16; let appeared: Bool }
    private struct Recent { let pos: UInt64; let mask: UInt64; let e: UInt64; let version: UInt64; let slot: Int64; let appeared: Bool }

    private let lock = Lock()
    private let clock: any Clock
    private let log: Logger
    /// Asks the store to list every row again (`TieredCache.relistDiskRows`).
    private let relist: @Sendable () -> Void
    private var domain: ClusterView.RingDomain
    /// The member list (digest) the digests are for.
    private var listDigest: UInt64
    private var selfBit: UInt64 = 0
    /// Per ring member index: its digests (nil until it shares a row), and its entry count.
    private var digests: [[UInt64]?] = []
    private var counts: [Int] = []
    /// A relisting is complete and nothing turned the digests off.
    private var ready = false
    private var listing = false
    private var off = false
    /// Too many expiring changes: a relisting was asked for (it keeps one per row).
    private var compacting = false
    /// Changes of rows with an expiry, by the whole second from which they are expired for
    /// sure (`slot`), XORed out again once that second has passed (`fold`).
    private var expiring: [Int64: [Toggle]] = [:]
    private var slotHeap = MinHeap()
    private var expiringCount = 0
    /// Every slot below this is folded: a row expired that far is in no digest.
    private var foldedBelow: Int64 = 0
    private var recent: [Recent] = []
    private var recentNext = 0
    /// Told of each row that appears (listed, or applied from the log) of a key this node
    /// holds no replica of (a foreign write: a proxy's own placement) and of a version below
    /// `foreignBelow` — written before this process started: its hints to the key's replicas
    /// lived in memory and died with the process, so they are made again (an outside review,
    /// cl21: such writes stayed on the one node for good after a SIGKILL). Newer writes were
    /// hinted when taken. Called outside the lock.
    var foreignRow: (@Sendable (_ namespace: [UInt8], _ key: [UInt8], _ version: UInt64, _ tombstone: Bool) -> Void)? = nil
    var foreignBelow: UInt64 = 0

    init(domain: ClusterView.RingDomain, listDigest: UInt64, selfName: String, clock: any Clock, log: Logger,
         relist: @escaping @Sendable () -> Void) {
        self.domain = domain; self.listDigest = listDigest; self.clock = clock; self.log = log; self.relist = relist
        configure(selfName: selfName)
    }

    private func configure(selfName: String) {
        let n = domain.ring.members.count
        selfBit = domain.memberBits[selfName] ?? 0
        digests = Array(repeating: nil, count: n)
        counts = Array(repeating: 0, count: n)
        off = domain.pointMasks == nil || selfBit == 0
    }

    /// A new member list: the digests are rebuilt for it (a relisting of the rows; rounds pass
    /// over the rows until it is done).
    func rebuild(domain: ClusterView.RingDomain, listDigest: UInt64, selfName: String) {
        lock.withLock {
            self.domain = domain; self.listDigest = listDigest
            ready = false
            configure(selfName: selfName)
        }
        relist()
    }

    /// Whether answers are maintained (for tests and STATS).
    var isReady: Bool { lock.withLock { ready && !off } }

    // MARK: DiskRowWatcher (the disk writer thread)

    func rowsReset() {
        lock.withLock {
            for i in digests.indices { digests[i] = nil; counts[i] = 0 }
            expiring.removeAll()
            slotHeap = MinHeap()
            expiringCount = 0
            foldedBelow = clock.nowMicros() / 1_000_000 + 1
            recent.removeAll(keepingCapacity: true)
            recentNext = 0
            ready = false
            listing = true
            compacting = false
            off = domain.pointMasks == nil || selfBit == 0
        }
    }

    func rowsListed() {
        lock.withLock {
            listing = false
            ready = !off
        }
    }

    func rowToggled(namespace: [UInt8], key: [UInt8], version: UInt64, tombstone: Bool, expiry: Int64,
                    appeared: Bool, listing byListing: Bool) {
        if VariantLineage.isDerived(key) { return } // node-local, as in `sharedTest`
        var foreign = false
        defer { if foreign, let f = foreignRow { f(namespace, key, version, tombstone) } }
        lock.withLock {
            guard !off, let masks = domain.pointMasks else { return }
            let pos = HashRing.position(key: key, namespace: namespace)
            let mask = masks[domain.ring.point(at: pos)]
            if mask & selfBit == 0 && appeared && version < foreignBelow && foreignRow != nil { foreign = true }
            guard mask & selfBit != 0, mask & ~selfBit != 0 else { return } // held here and by a peer
            // Expired for sure once this whole second began (0: never).
            let slot = expiry == 0 ? 0 : expiry / 1_000_000 + 1
            if slot != 0 && slot < foldedBelow { return } // already expired: in no digest
            let t = Toggle(mask: mask & ~selfBit, e: ClusterView.digest(namespace: namespace, key: key, version: version, tombstone: tombstone),
                           bucket: UInt16(truncatingIfNeeded: pos >> 48), appeared: appeared)
            apply(t, sign: appeared ? 1 : -1)
            if slot != 0 {
                if expiring[slot, default: []].isEmpty { slotHeap.push(slot) }
                expiring[slot, default: []].append(t)
                expiringCount += 1
                if expiringCount > Self.maxExpiring { overflow() }
            }
            if !byListing {
                let r = Recent(pos: pos, mask: t.mask, e: t.e, version: version, slot: slot, appeared: appeared)
                if recent.count < Self.recentCapacity { recent.append(r) } else { recent[recentNext] = r }
                recentNext = (recentNext + 1) % Self.recentCapacity
            }
        }
    }

    /// XORs a change into each peer's digests it is shared with (lock held).
    private func apply(_ t: Toggle, sign: Int) {
        var m = t.mask
        while m != 0 {
            let i = m.trailingZeroBitCount
            m &= m - 1
            if digests[i] == nil { digests[i] = [UInt64](repeating: 0, count: 1 << Int(Self.bits)) }
            digests[i]![Int(t.bucket)] ^= t.e
            counts[i] += sign
        }
    }

    /// Too many expiring changes kept: one relisting keeps one per row; if even that is too
    /// many, off until the next member list (rounds pass over the rows).
    private func overflow() {
        if listing {
            off = true; ready = false
            expiring.removeAll(); slotHeap = MinHeap(); expiringCount = 0
            log.warn("sync_digests_off", [("why", "more than \(Self.maxExpiring) rows with an expiry"),
                                          ("effect", "anti-entropy rounds pass over every row")])
        } else if !compacting {
            ready = false
            compacting = true
            relist()
        }
    }

    /// Takes out the changes whose expiry second has passed (lock held).
    private func fold(now: Int64) {
        let limit = now / 1_000_000 + 1
        while let s = slotHeap.min, s < limit {
            slotHeap.pop()
            for t in expiring.removeValue(forKey: s) ?? [] {
                apply(t, sign: t.appeared ? -1 : 1)
                expiringCount -= 1
            }
        }
        foldedBelow = max(foldedBelow, limit)
    }

    // MARK: Answers

    /// `peer`'s digests at `bits` with the entries newer than `maxVersion` left out, and their
    /// count; nil when not maintained for `list` (another member list, a relisting under way,
    /// off) or `peer` is not a member of it.
    func digests(for peer: String, list: UInt64, bits: UInt8, maxVersion: UInt64) -> (digests: [UInt64], entries: Int)? {
        lock.withLock { () -> ([UInt64], Int)? in
            guard ready, !off, list == listDigest, bits <= Self.bits, let bit = domain.memberBits[peer], bit != selfBit else { return nil }
            fold(now: clock.nowMicros())
            let i = bit.trailingZeroBitCount
            var full = digests[i] ?? [UInt64](repeating: 0, count: 1 << Int(Self.bits))
            var n = counts[i]
            if maxVersion < .max {
                // The newest change of each key: a row still there with a newer version is left
                // out. Only changes above `maxVersion` matter (a key's versions grow: its newest
                // change is above whenever an older one is — but after a delete without a
                // tombstone, where a bucket may then differ for nothing), so the others cost a
                // comparison each, not a set insert.
                var seen = Set<UInt64>()
                var at = recentNext
                for _ in 0..<recent.count {
                    at = at == 0 ? recent.count - 1 : at - 1
                    let r = recent[at]
                    guard r.version > maxVersion, seen.insert(r.pos).inserted, r.appeared, r.mask & bit != 0 else { continue }
                    if r.slot != 0 && r.slot < foldedBelow { continue } // expired: already out
                    full[Int(r.pos >> 48)] ^= r.e
                    n -= 1
                }
            }
            guard bits < Self.bits else { return (full, n) }
            var out = [UInt64](repeating: 0, count: 1 << Int(bits))
            let shift = Int(Self.bits - bits)
            for (b, d) in full.enumerated() { out[b >> shift] ^= d }
            return (out, n)
        }
    }
}

/// A binary min-heap of Int64 (the expiry seconds waiting to be folded).
struct MinHeap {
    private var a: [Int64] = []
    var min: Int64? { a.first }
    mutating func push(_ x: Int64) {
        a.append(x)
        var i = a.count - 1
        while i > 0 {
            let p = (i - 1) / 2
            guard a[p] > a[i] else { break }
            a.swapAt(p, i); i = p
        }
    }
    mutating func pop() {
        guard !a.isEmpty else { return }
        a.swapAt(0, a.count - 1)
        a.removeLast()
        var i = 0
        while true {
            let l = 2 * i + 1, r = l + 1
            var m = i
            if l < a.count && a[l] < a[m] { m = l }
            if r < a.count && a[r] < a[m] { m = r }
            guard m != i else { break }
            a.swapAt(m, i); i = m
        }
    }
}
