#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import StrataCore

/// Which stored image variants were derived from which original, so that replacing, touching,
/// invalidating or deleting an original drops its variants (DESIGN.md "Images") instead of
/// leaving them to age out.
///
/// A variant is stored under a derived key: the original's key, a 0x00 byte, then
/// `variant:<original version, hex>:<spec>` (PROTOCOL.md §7.16). The node records each derived
/// key it stores or serves; at start it recovers the disk tier's derived keys with
/// `recover(from:)`. Any write that gives the original a new version hands the recorded keys
/// to the caller (`take`), who removes them in the background.
///
/// Guarantees: every variant this node stored or served since it started, and every variant on
/// disk at start, is dropped after its original changes (memory-only variants do not survive a
/// restart, so nothing is missed). Past `capacity` originals, new variants are not recorded
/// (they age out, as before) and `overflowed` says so.
/// Cost: one dictionary entry per original with variants, holding its derived keys; a write to
/// a key with no variants costs one atomic load. Thread-safe.
final class VariantLineage: @unchecked Sendable {
    static let marker: [UInt8] = Array("\u{0}variant:".utf8)

    private let lock = Lock()
    private var derived: [ItemKey: Set<[UInt8]>] = [:] { didSet { entryCount.store(derived.count, ordering: .relaxed) } }
    private let entryCount = Atomic<Int>(0)
    let capacity: Int
    private(set) var overflowed = false

    init(capacity: Int = 1_000_000) { self.capacity = max(1, capacity) }

    /// The derived key of a variant of `key` at `version` made with `spec` (its canonical text).
    static func derivedKey(_ key: [UInt8], version: UInt64, spec: String) -> [UInt8] {
        key + marker + Array("\(String(version, radix: 16)):\(spec)".utf8)
    }

    /// The original's key when `key` is a derived variant key, else nil. The marker is searched
    /// from the end, so an original key may itself hold 0x00 bytes.
    static func original(of key: [UInt8]) -> [UInt8]? {
        guard key.count > marker.count else { return nil }
        var i = key.count - marker.count
        while i >= 0 {
            if key[i] == 0 && key[i...].starts(with: marker) { return Array(key[..<i]) }
            i -= 1
        }
        return nil
    }

    /// Whether `key` is a derived variant key. Variants are this node's own cache of work it
    /// did: a `--cluster` node neither hints nor compares nor copies them (handoff,
    /// anti-entropy), so a variant made on one node is never left behind on another that does
    /// not track it (an outside review, img1: copies on nodes without the original outlived
    /// every change of it). Cost: a backward scan for a 0x00 byte, none for keys without one.
    static func isDerived(_ key: [UInt8]) -> Bool {
        key.withUnsafeBufferPointer { k in
            guard k.count > marker.count, memchr(k.baseAddress!, 0, k.count) != nil else { return false }
            return original(of: key) != nil
        }
    }

    /// Remembers that `derivedKey` holds a variant of `original`.
    func record(original: ItemKey, derivedKey: [UInt8]) {
        lock.withLock {
            if derived[original] == nil && derived.count >= capacity { overflowed = true; return }
            derived[original, default: []].insert(derivedKey)
        }
    }

    /// How many derived keys are recorded for `original`.
    func count(_ original: ItemKey) -> Int {
        guard entryCount.load(ordering: .relaxed) > 0 else { return 0 }
        return lock.withLock { derived[original]?.count ?? 0 }
    }

    /// The derived keys recorded for `original`, forgotten here (the caller removes them).
    func take(_ original: ItemKey) -> Set<[UInt8]>? {
        guard entryCount.load(ordering: .relaxed) > 0 else { return nil }
        return lock.withLock { derived.removeValue(forKey: original) }
    }

    /// Forgets every original in `namespace`, or all when nil (FLUSH removed their variants).
    func forget(namespace: [UInt8]?) {
        guard entryCount.load(ordering: .relaxed) > 0 else { return }
        lock.withLock {
            guard let ns = namespace else { derived.removeAll(); return }
            derived = derived.filter { $0.key.namespace != ns }
        }
    }

    /// Originals with recorded variants.
    var count: Int { entryCount.load(ordering: .relaxed) }

    /// Records every derived key in `keys` of namespace `ns` (the disk tier's keys at start).
    func recover(namespace ns: [UInt8], keys: [[UInt8]]) {
        for k in keys {
            if let o = Self.original(of: k) { record(original: ItemKey(namespace: ns, key: o), derivedKey: k) }
        }
    }
}
