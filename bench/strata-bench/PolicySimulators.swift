// Reference cache-policy simulators for `strata-bench hitratio`: LRU and SIEVE here, S3-FIFO
// and W-TinyLFU in PolicySimulators+Frequency.swift. Pure: no clock, no I/O. Keys are dense
// ids below a known `universe`, so per-key state lives in arrays (O(1), no hashing).

/// A cache policy simulated at a byte capacity. Every item is charged the bytes the caller
/// passes (key + value + a fixed overhead), the same for every policy: "equal memory".
protocol PolicySimulator: AnyObject {
    var name: String { get }
    /// Requests `id`: true on a hit. A miss inserts the key (a look-aside cache's GET-miss
    /// then SET), evicting as the policy says, unless `charge` exceeds the whole capacity.
    func access(_ id: Int32, charge: Int) -> Bool
    func contains(_ id: Int32) -> Bool
    var itemCount: Int { get }
    var usedBytes: Int { get }
}

/// Doubly linked lists threaded through per-id arrays; an id is in at most one list. The
/// front is the most recent insertion ("head"), the back the oldest ("tail").
struct IdLists {
    static let none: Int32 = -1
    private(set) var prev: [Int32]   // toward the front
    private(set) var next: [Int32]   // toward the back
    private var member: [UInt8]      // list + 1; 0 = in none
    private(set) var charge: [Int32]
    private(set) var front: [Int32]
    private(set) var back: [Int32]
    private(set) var count: [Int]
    private(set) var bytes: [Int]

    init(universe: Int, lists: Int) {
        prev = Array(repeating: Self.none, count: universe)
        next = Array(repeating: Self.none, count: universe)
        member = Array(repeating: 0, count: universe)
        charge = Array(repeating: 0, count: universe)
        front = Array(repeating: Self.none, count: lists)
        back = Array(repeating: Self.none, count: lists)
        count = Array(repeating: 0, count: lists)
        bytes = Array(repeating: 0, count: lists)
    }

    /// The list holding `id`, or nil.
    @inline(__always) func list(of id: Int32) -> Int? {
        let m = member[Int(id)]
        return m == 0 ? nil : Int(m) - 1
    }

    mutating func pushFront(_ l: Int, _ id: Int32, charge c: Int) {
        let i = Int(id)
        precondition(member[i] == 0, "id already in a list")
        member[i] = UInt8(l + 1)
        charge[i] = Int32(c)
        prev[i] = Self.none
        next[i] = front[l]
        if front[l] != Self.none { prev[Int(front[l])] = id } else { back[l] = id }
        front[l] = id
        count[l] += 1
        bytes[l] += c
    }

    mutating func remove(_ id: Int32) {
        let i = Int(id)
        guard let l = list(of: id) else { return }
        let p = prev[i], n = next[i]
        if p != Self.none { next[Int(p)] = n } else { front[l] = n }
        if n != Self.none { prev[Int(n)] = p } else { back[l] = p }
        member[i] = 0
        count[l] -= 1
        bytes[l] -= Int(charge[i])
    }

    /// Moves `id` (in some list) to the front of list `l`.
    mutating func moveToFront(_ l: Int, _ id: Int32) {
        let c = Int(charge[Int(id)])
        remove(id)
        pushFront(l, id, charge: c)
    }

    /// Ids of list `l`, front to back (for tests).
    func ids(_ l: Int) -> [Int32] {
        var out: [Int32] = []
        var r = front[l]
        while r != Self.none { out.append(r); r = next[Int(r)] }
        return out
    }
}

/// LRU: a hit moves the item to the front (a list relink on every hit); evicts from the back.
/// What Strata's memory tier did per shard until it adopted S3-FIFO (bench/RESULTS.md).
final class LRUSimulator: PolicySimulator {
    let name = "LRU"
    let capacity: Int
    private(set) var lists: IdLists

    init(capacity: Int, universe: Int) {
        self.capacity = capacity
        lists = IdLists(universe: universe, lists: 1)
    }

    func access(_ id: Int32, charge: Int) -> Bool {
        if lists.list(of: id) != nil { lists.moveToFront(0, id); return true }
        guard charge <= capacity else { return false }
        while lists.bytes[0] + charge > capacity { lists.remove(lists.back[0]) }
        lists.pushFront(0, id, charge: charge)
        return false
    }

    func contains(_ id: Int32) -> Bool { lists.list(of: id) != nil }
    var itemCount: Int { lists.count[0] }
    var usedBytes: Int { lists.bytes[0] }
}

/// SIEVE (Zhang et al., NSDI '24): one FIFO list, a visited bit per item and a hand. A hit
/// only sets the bit (no relink, no lock needed in a real cache). To evict, the hand walks
/// from its last position toward the front (wrapping to the back), clearing visited bits,
/// and evicts the first unvisited item; it then rests on that item's front neighbour. New
/// items go to the front, unvisited.
final class SIEVESimulator: PolicySimulator {
    let name = "SIEVE"
    let capacity: Int
    private(set) var lists: IdLists
    private(set) var visited: [Bool]
    /// Where the next eviction starts looking; `IdLists.none` = at the back.
    private(set) var hand: Int32 = IdLists.none

    init(capacity: Int, universe: Int) {
        self.capacity = capacity
        lists = IdLists(universe: universe, lists: 1)
        visited = Array(repeating: false, count: universe)
    }

    func access(_ id: Int32, charge: Int) -> Bool {
        if lists.list(of: id) != nil { visited[Int(id)] = true; return true }
        guard charge <= capacity else { return false }
        while lists.bytes[0] + charge > capacity { evict() }
        lists.pushFront(0, id, charge: charge)
        visited[Int(id)] = false
        return false
    }

    private func evict() {
        var o = hand == IdLists.none ? lists.back[0] : hand
        while visited[Int(o)] {
            visited[Int(o)] = false
            let p = lists.prev[Int(o)]
            o = p == IdLists.none ? lists.back[0] : p
        }
        hand = lists.prev[Int(o)]
        lists.remove(o)
    }

    func contains(_ id: Int32) -> Bool { lists.list(of: id) != nil }
    var itemCount: Int { lists.count[0] }
    var usedBytes: Int { lists.bytes[0] }
}
