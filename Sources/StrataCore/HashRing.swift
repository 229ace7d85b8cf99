/// Consistent hashing with virtual nodes, exactly as proto-spec/RING.md fixes it, so clients
/// in any language place keys identically.
///
/// - A node with weight w gets `round(pointsPerWeight × w)` points; point i of node N sits at
///   `XXH64(UTF-8 of "N-i")`. Points are ordered by (position, node name).
/// - A key's position is `XXH64(key, seed: XXH64(namespace))`.
/// - Its owner is the node of the first point at or after that position (wrapping); its
///   replicas are the next distinct nodes clockwise.
///
/// Node order does not matter; a node's points come from its name only. Immutable and
/// thread-safe once built; a lookup is a binary search over the points (O(log points)).
public struct HashRing: Sendable {
    public struct Member: Sendable, Hashable {
        public let name: String
        public let weight: Double
        public init(name: String, weight: Double = 1) { self.name = name; self.weight = weight }
    }

    public static let defaultPointsPerWeight = 512

    public let members: [Member]
    private let positions: [UInt64]
    private let owners: [Int32]       // index into `members`, per point

    /// Builds the ring. Members with the same name are merged (the first weight wins);
    /// members with weight ≤ 0 get no points.
    public init(members: [Member], pointsPerWeight: Int = HashRing.defaultPointsPerWeight) {
        var seen = Set<String>()
        let unique = members.filter { seen.insert($0.name).inserted }.sorted { $0.name < $1.name }
        self.members = unique
        var points: [(UInt64, Int32)] = []
        for (m, member) in unique.enumerated() {
            let n = Int((Double(pointsPerWeight) * member.weight).rounded())
            points.reserveCapacity(points.count + max(0, n))
            for i in 0..<max(0, n) {
                points.append((XXH64.hash(Array("\(member.name)-\(i)".utf8)), Int32(m)))
            }
        }
        // Ties (vanishingly rare) break by node name; members are sorted by name already.
        points.sort { $0.0 != $1.0 ? $0.0 < $1.0 : $0.1 < $1.1 }
        positions = points.map { $0.0 }
        owners = points.map { $0.1 }
    }

    public var isEmpty: Bool { positions.isEmpty }

    /// The ring position of a key.
    public static func position(key: [UInt8], namespace: [UInt8] = []) -> UInt64 {
        XXH64.hash(key, seed: XXH64.hash(namespace))
    }

    /// The owner and then up to `count − 1` further distinct nodes, clockwise.
    public func nodes(for key: [UInt8], namespace: [UInt8] = [], count: Int) -> [Member] {
        guard !positions.isEmpty, count > 0 else { return [] }
        let i = point(at: Self.position(key: key, namespace: namespace))
        return memberIndices(fromPoint: i, count: count).map { members[$0] }
    }

    /// How many points the ring has.
    public var pointCount: Int { positions.count }

    /// The point that owns `position`: the first at or after it, wrapping to 0. The ring must
    /// not be empty.
    public func point(at position: UInt64) -> Int {
        var lo = 0, hi = positions.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if positions[mid] < position { lo = mid + 1 } else { hi = mid }
        }
        return lo == positions.count ? 0 : lo
    }

    /// The indexes in `members` of the owner at point `i` and up to `count − 1` further
    /// distinct members, clockwise.
    public func memberIndices(fromPoint start: Int, count: Int) -> [Int] {
        var out: [Int] = []
        let want = min(count, members.count)
        var i = start, steps = 0
        while out.count < want && steps < positions.count {
            let o = Int(owners[i])
            if !out.contains(o) { out.append(o) }
            i += 1
            if i == positions.count { i = 0 }
            steps += 1
        }
        return out
    }

    /// The owner of a key.
    public func owner(for key: [UInt8], namespace: [UInt8] = []) -> Member? {
        nodes(for: key, namespace: namespace, count: 1).first
    }
}
