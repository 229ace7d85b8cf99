// The frequency-aware reference simulators for `strata-bench hitratio`: S3-FIFO and W-TinyLFU
// (LRU and SIEVE, and the shared `IdLists`, are in PolicySimulators.swift).

/// S3-FIFO (Yang et al., SOSP '23; defaults of libCacheSim's S3FIFO): a small FIFO S of 10 %
/// of the bytes, a main FIFO M of the rest, and a ghost FIFO G of recently evicted keys (no
/// data; up to 90 % of the capacity in charged bytes). A hit only bumps a 2-bit counter
/// (capped at 3). New keys go to S, or to M when G remembers them. Evicting from S: the back
/// item moves to M (counter cleared) if it was hit while in S, else it leaves for G. Evicting
/// from M: an item with a non-zero counter is reinserted at the front with counter − 1, else
/// evicted. S is evicted from while it holds ≥ 10 % of the capacity, else M.
/// What Strata's memory tier does per shard (MemoryShard+Policy.swift); with one shard and
/// records of exactly the charge the two agree hit for hit (HitRatioTests).
///
/// Subclasses (`AdaptiveS3FIFOSimulator`) change the small queue's share (`smallCapacity`),
/// what a miss does (`access`) and where evicted keys go (`retire`), on the same queues.
class S3FIFOSimulator: PolicySimulator {
    var name: String { "S3-FIFO" }
    static let small = 0, main = 1
    let capacity: Int
    /// The small queue's share of the bytes: evicted from while it holds at least this much.
    var smallCapacity: Double
    let ghostCapacity: Int
    /// The small and main queues (lists 0 and 1; a subclass may keep more lists after them).
    var lists: IdLists
    var freq: [UInt8]
    // The ghost FIFO: entries appended to arrays, the oldest live one at `ghostFirst`.
    private var ghostIds: [Int32] = []
    private var ghostCharges: [Int] = []
    private var ghostFirst = 0
    private var ghostBytes = 0
    private var ghostPos: [Int]   // index in ghostIds + 1; 0 = none

    init(capacity: Int, universe: Int, ghostCapacity: Int? = nil, lists: Int = 2) {
        self.capacity = capacity
        smallCapacity = Double(capacity) / 10
        self.ghostCapacity = ghostCapacity ?? capacity * 9 / 10
        self.lists = IdLists(universe: universe, lists: lists)
        freq = Array(repeating: 0, count: universe)
        ghostPos = Array(repeating: 0, count: universe)
    }

    func access(_ id: Int32, charge: Int) -> Bool {
        if lists.list(of: id) != nil {
            freq[Int(id)] = min(freq[Int(id)] + 1, 3)
            return true
        }
        guard charge <= capacity else { return false }
        while used + charge > capacity { evict() }
        freq[Int(id)] = 0
        if inGhost(id) {
            dropGhost(id)
            lists.pushFront(Self.main, id, charge: charge)
        } else {
            lists.pushFront(Self.small, id, charge: charge)
        }
        return false
    }

    var used: Int { lists.bytes[Self.small] + lists.bytes[Self.main] }

    /// Evicts one item: from the small queue while it holds its share, else from main.
    func evict() {
        if lists.count[Self.small] > 0 && (Double(lists.bytes[Self.small]) >= smallCapacity || lists.count[Self.main] == 0) {
            evictSmall()
        } else {
            evictMain()
        }
    }

    private func evictSmall() {
        while lists.count[Self.small] > 0 {
            let t = lists.back[Self.small]
            if freq[Int(t)] >= 1 {
                freq[Int(t)] = 0
                lists.moveToFront(Self.main, t)
                while Double(lists.bytes[Self.main]) > Double(capacity) - smallCapacity && lists.count[Self.main] > 1 { evictMain() }
            } else {
                retire(t, from: Self.small)
                return
            }
        }
    }

    private func evictMain() {
        while lists.count[Self.main] > 0 {
            let t = lists.back[Self.main]
            if freq[Int(t)] > 0 {
                freq[Int(t)] -= 1
                lists.moveToFront(Self.main, t)
            } else {
                retire(t, from: Self.main)
                return
            }
        }
    }

    /// Takes an evicted key out of `queue`: S3-FIFO remembers the small queue's in its ghost
    /// FIFO and forgets main's.
    func retire(_ id: Int32, from queue: Int) {
        let c = Int(lists.charge[Int(id)])
        lists.remove(id)
        if queue == Self.small { addGhost(id, charge: c) }
    }

    func inGhost(_ id: Int32) -> Bool {
        let p = ghostPos[Int(id)]
        return p != 0 && p - 1 >= ghostFirst
    }

    private func addGhost(_ id: Int32, charge: Int) {
        ghostIds.append(id)
        ghostCharges.append(charge)
        ghostPos[Int(id)] = ghostIds.count
        ghostBytes += charge
        while ghostBytes > ghostCapacity && ghostFirst < ghostIds.count {
            ghostBytes -= ghostCharges[ghostFirst]
            ghostFirst += 1
        }
    }

    private func dropGhost(_ id: Int32) {
        let i = ghostPos[Int(id)] - 1
        ghostBytes -= ghostCharges[i]
        ghostCharges[i] = 0
        ghostPos[Int(id)] = 0
    }

    func contains(_ id: Int32) -> Bool { queue(of: id) != nil }
    /// 0 = small, 1 = main, nil = not cached.
    func queue(of id: Int32) -> Int? { lists.list(of: id).flatMap { $0 <= Self.main ? $0 : nil } }
    var itemCount: Int { lists.count[Self.small] + lists.count[Self.main] }
    var usedBytes: Int { used }
}

/// TinyLFU's frequency estimate: a count-min sketch of 4 rows of counters capped at 15, in
/// front of it a doorkeeper (a Bloom filter: a key's first sighting only sets its bits), and
/// aging: after `sampleSize` increments every counter is halved and the doorkeeper cleared.
struct FrequencySketch {
    private var table: [UInt8]
    private let widthMask: Int
    private var door: [UInt64]
    private let doorMask: Int
    let sampleSize: Int
    private(set) var additions = 0

    init(expectedItems: Int) {
        var w = 16
        while w < max(1, expectedItems) { w <<= 1 }
        table = Array(repeating: 0, count: w * 4)
        widthMask = w - 1
        door = Array(repeating: 0, count: max(1, w * 8 / 64))
        doorMask = door.count * 64 - 1
        sampleSize = 10 * max(1, expectedItems)
    }

    @inline(__always) private static func mix(_ x: UInt64) -> UInt64 {
        var z = x &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    @inline(__always) private func slot(_ h: UInt64, row: Int) -> Int {
        row * (widthMask + 1) + Int(truncatingIfNeeded: Self.mix(h &+ UInt64(row))) & widthMask
    }

    private func inDoor(_ h: UInt64) -> Bool {
        let a = Int(truncatingIfNeeded: h) & doorMask, b = Int(truncatingIfNeeded: h >> 32) & doorMask
        return door[a >> 6] & (1 << UInt64(a & 63)) != 0 && door[b >> 6] & (1 << UInt64(b & 63)) != 0
    }

    /// Estimated requests of `id` since the last halving (counters + 1 if the doorkeeper has it).
    func frequency(_ id: Int32) -> Int {
        let h = Self.mix(UInt64(UInt32(bitPattern: id)))
        var m = UInt8.max
        for r in 0..<4 { m = min(m, table[slot(h, row: r)]) }
        return Int(m) + (inDoor(h) ? 1 : 0)
    }

    mutating func increment(_ id: Int32) {
        let h = Self.mix(UInt64(UInt32(bitPattern: id)))
        if !inDoor(h) {
            let a = Int(truncatingIfNeeded: h) & doorMask, b = Int(truncatingIfNeeded: h >> 32) & doorMask
            door[a >> 6] |= 1 << UInt64(a & 63)
            door[b >> 6] |= 1 << UInt64(b & 63)
        } else {
            for r in 0..<4 {
                let s = slot(h, row: r)
                if table[s] < 15 { table[s] += 1 }
            }
        }
        additions += 1
        if additions >= sampleSize {
            for i in table.indices { table[i] >>= 1 }
            for i in door.indices { door[i] = 0 }
            additions /= 2
        }
    }
}

/// W-TinyLFU (Einziger et al.; Caffeine's structure with a fixed window, as in Caffeine's
/// simulator `WindowTinyLfuPolicy`): a window LRU of 1 % of the bytes in front of a main
/// segmented LRU (probation + protected, protected ≤ 80 % of main). Every request increments
/// the key's sketch counter. A hit relinks within its segment (a probation hit promotes to
/// protected, demoting protected's LRU item when over). New keys enter the window; the
/// window's LRU item moves to probation, and when the cache is over capacity it competes
/// with probation's LRU item (the victim): the one with the lower estimated frequency is
/// evicted (the candidate on a tie), so a one-hit wonder never displaces a warm key.
/// (Caffeine also resizes the window by hill climbing and admits a warm candidate at random
/// against hash flooding; neither is simulated.)
final class WTinyLFUSimulator: PolicySimulator {
    let name = "W-TinyLFU"
    static let window = 0, probation = 1, protected = 2
    let capacity: Int
    let windowCapacity: Int
    let protectedCapacity: Int
    private(set) var lists: IdLists
    private(set) var sketch: FrequencySketch

    /// `expectedItems` sizes the sketch (about the number of items the capacity holds).
    init(capacity: Int, universe: Int, expectedItems: Int) {
        self.capacity = capacity
        windowCapacity = max(1, capacity / 100)
        protectedCapacity = (capacity - windowCapacity) * 8 / 10
        lists = IdLists(universe: universe, lists: 3)
        sketch = FrequencySketch(expectedItems: expectedItems)
    }

    func access(_ id: Int32, charge: Int) -> Bool {
        sketch.increment(id)
        switch lists.list(of: id) {
        case Self.window?, Self.protected?:
            lists.moveToFront(lists.list(of: id)!, id)
            return true
        case Self.probation?:
            lists.moveToFront(Self.protected, id)
            while lists.bytes[Self.protected] > protectedCapacity && lists.count[Self.protected] > 1 {
                lists.moveToFront(Self.probation, lists.back[Self.protected])
            }
            return true
        default:
            break
        }
        guard charge <= capacity else { return false }
        lists.pushFront(Self.window, id, charge: charge)
        while lists.bytes[Self.window] > windowCapacity && lists.count[Self.window] > 0 {
            let candidate = lists.back[Self.window]
            lists.moveToFront(Self.probation, candidate)
            evictIfOver(candidate: candidate)
        }
        evictIfOver(candidate: IdLists.none)
        return false
    }

    private var used: Int { lists.bytes[0] + lists.bytes[1] + lists.bytes[2] }

    private func evictIfOver(candidate: Int32) {
        var candidate = candidate
        while used > capacity {
            var victim = lists.back[Self.probation]
            if victim == IdLists.none || victim == candidate && lists.count[Self.probation] == 1 {
                victim = lists.back[Self.protected] != IdLists.none ? lists.back[Self.protected] : lists.back[Self.window]
            }
            if candidate == IdLists.none || candidate == victim || !contains(candidate) {
                lists.remove(victim)
            } else if sketch.frequency(candidate) > sketch.frequency(victim) {
                lists.remove(victim)
            } else {
                lists.remove(candidate)
                candidate = IdLists.none
            }
        }
    }

    func contains(_ id: Int32) -> Bool { lists.list(of: id) != nil }
    /// 0 = window, 1 = probation, 2 = protected, nil = not cached.
    func segment(of id: Int32) -> Int? { lists.list(of: id) }
    var itemCount: Int { lists.count[0] + lists.count[1] + lists.count[2] }
    var usedBytes: Int { used }
}

/// S3-FIFO with an adaptive small queue (an experiment, not what the tier does): as
/// S3-FIFO, plus a ghost of main's evictions beside the small queue's ghost, and ARC's rule
/// for the small queue's target share — a request for a key the small queue evicted grows it
/// (new keys were not given time to prove themselves), one for a key main evicted shrinks it,
/// each by `mul` × the charge × the other ghost's bytes over this one's (at least the charge).
/// Both ghosts hold up to `ghostPercent` % of the capacity in charged bytes (90); the target
/// stays within 1 … 90 % of the capacity, starting at 10 %. bench/RESULTS.md ("The shifting
/// trace") has what it gives and what porting it to the tier would cost.
final class AdaptiveS3FIFOSimulator: S3FIFOSimulator {
    override var name: String { label }
    private let label: String
    static let ghostSmall = 2, ghostMain = 3
    let mul: Int
    /// The small queue's target share, in bytes (`smallCapacity`, which this moves).
    var target: Int { Int(smallCapacity) }

    init(capacity: Int, universe: Int, ghostPercent: Int = 90, mul: Int = 2) {
        self.mul = mul
        label = ghostPercent != 90 || mul != 2 ? "adapt g\(ghostPercent) m\(mul)" : "S3-FIFO adapt."
        super.init(capacity: capacity, universe: universe, ghostCapacity: capacity * ghostPercent / 100, lists: 4)
    }

    override func access(_ id: Int32, charge: Int) -> Bool {
        let l = lists.list(of: id)
        if l == Self.small || l == Self.main {
            freq[Int(id)] = min(freq[Int(id)] + 1, 3)
            return true
        }
        guard charge <= capacity else { return false }
        freq[Int(id)] = 0
        var into = Self.small
        if l == Self.ghostSmall {
            let gs = max(1, lists.bytes[Self.ghostSmall]), gm = lists.bytes[Self.ghostMain]
            smallCapacity = Double(min(capacity * 9 / 10, target + mul * max(charge, charge * gm / gs)))
            lists.remove(id)
            into = Self.main
        } else if l == Self.ghostMain {
            let gm = max(1, lists.bytes[Self.ghostMain]), gs = lists.bytes[Self.ghostSmall]
            smallCapacity = Double(max(capacity / 100, target - mul * max(charge, charge * gs / gm)))
            lists.remove(id)
            into = Self.main
        }
        while used + charge > capacity { evict() }
        lists.pushFront(into, id, charge: charge)
        return false
    }

    /// Evicted keys go to the ghost list of the queue they left (ARC-style), bounded in bytes.
    override func retire(_ id: Int32, from queue: Int) {
        let ghost = queue == Self.small ? Self.ghostSmall : Self.ghostMain
        let c = Int(lists.charge[Int(id)])
        lists.remove(id)
        lists.pushFront(ghost, id, charge: c)
        while lists.bytes[ghost] > ghostCapacity && lists.count[ghost] > 0 { lists.remove(lists.back[ghost]) }
    }
}

/// `AdaptiveS3FIFOSimulator` with one ghost FIFO for both queues' evictions, each entry marked
/// with the queue it left, bounded in total at `ghostPercent` % of the capacity: what Strata's
/// memory tier does (MemoryShard+Policy.swift) — its one ghost table marks each entry with a
/// bit, at no extra bytes. As the tier: the ghost is looked at after evicting for the new key,
/// the rule weighs the two kinds' entry counts, and the target is kept as a `Double`.
final class SharedGhostAdaptiveS3FIFOSimulator: S3FIFOSimulator {
    override var name: String { "S3-FIFO adapt.1" }
    static let ghost = 2
    private var leftMain: [Bool]
    private var kindCount = [0, 0] // live ghost entries that left small, main

    init(capacity: Int, universe: Int) {
        leftMain = Array(repeating: false, count: universe)
        super.init(capacity: capacity, universe: universe, lists: 3)
    }

    override func access(_ id: Int32, charge: Int) -> Bool {
        if queue(of: id) != nil {
            freq[Int(id)] = min(freq[Int(id)] + 1, 3)
            return true
        }
        guard charge <= capacity else { return false }
        freq[Int(id)] = 0
        while used + charge > capacity { evict() }
        var into = Self.small
        if lists.list(of: id) == Self.ghost {
            let main = leftMain[Int(id)]
            let this = Double(max(1, kindCount[main ? 1 : 0])), other = Double(kindCount[main ? 0 : 1])
            let step = 2 * Double(charge) * max(1, other / this)
            smallCapacity = main ? max(Double(capacity) / 100, smallCapacity - step) : min(Double(capacity) * 9 / 10, smallCapacity + step)
            dropFromGhost(id)
            into = Self.main
        }
        lists.pushFront(into, id, charge: charge)
        return false
    }

    private func dropFromGhost(_ id: Int32) {
        kindCount[leftMain[Int(id)] ? 1 : 0] -= 1
        lists.remove(id)
    }

    override func retire(_ id: Int32, from queue: Int) {
        let c = Int(lists.charge[Int(id)])
        lists.remove(id)
        leftMain[Int(id)] = queue == Self.main
        kindCount[queue == Self.main ? 1 : 0] += 1
        lists.pushFront(Self.ghost, id, charge: c)
        while lists.bytes[Self.ghost] > ghostCapacity && lists.count[Self.ghost] > 0 { dropFromGhost(lists.back[Self.ghost]) }
    }
}
