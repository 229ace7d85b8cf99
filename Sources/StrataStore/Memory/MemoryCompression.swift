import StrataCore
import Synchronization

/// Memory-tier compression for the namespaces a store's configuration names
/// (`StoreConfiguration.memoryCompression`): each such namespace gets a zstd dictionary trained
/// from its own first values, and its memory records then hold values compressed with it —
/// small JSON-like values compress 2–4 × with a dictionary where plain zstd gains little below
/// ~1 KiB (bench/RESULTS.md, "Memory-tier compression").
///
/// What it guarantees:
/// - Readers never see a compressed value: `MemoryShard` expands it on every read (an
///   `ItemState`, or the in-place view of a memory hit), and reports the value's real size.
/// - A value is stored compressed only when that saves at least an eighth of it; values under
///   `minValue` or over `maxValue` bytes, and values written before the namespace's dictionary
///   was trained, are stored as they are.
/// - Bounded: at most `maxDictionaries` dictionaries per store (further namespaces are not
///   compressed), each trained from at most `sampleCount` values and `sampleBytes` bytes, on a
///   thread of its own (one training at a time). Dictionaries live as long as the store
///   (records compressed with one may outlive a flush); their memory is outside
///   `--memory-limit` and counted in `dictionaryBytes`.
///
/// Costs: a write to such a namespace compresses its value (~1–5 µs for ~100 B–1 KiB, outside
/// the shard's lock except for memory-only writes that derive the value from the item held);
/// a hit decompresses it (~0.5 µs for 200 B, ~2 µs for 1 KiB: bench/RESULTS.md) under the shard's lock.
final class MemoryCompression: @unchecked Sendable {
    static let minValue = 32, maxValue = 64 << 10
    /// Values a dictionary is trained from are 16 B … 16 KiB.
    static let maxSample = 16 << 10
    static let dictionaryCapacity = 16 << 10
    static let maxDictionaries = 64
    /// Dictionary ids start here (zstd keeps ids below 32768 for a registry it may define).
    static let firstID: UInt32 = 32_768

    let includes: @Sendable ([UInt8]) -> Bool
    let sampleCount: Int, sampleBytes: Int
    let zstd = Zstd(level: 1)

    /// The dictionaries by id − `firstID`, published once each (readers take no lock).
    private let slots: UnsafeMutablePointer<Unmanaged<ZstdDictionary>?>
    private let published = Atomic<Int>(0)
    private let lock = Lock()
    private var claimed = 0
    private var training = false
    private var retained: [ZstdDictionary] = []

    /// Values stored compressed (a counter) and trainings that failed.
    let compressedWrites = Atomic<Int>(0), failedTrainings = Atomic<Int>(0)

    init(includes: @escaping @Sendable ([UInt8]) -> Bool, sampleCount: Int, sampleBytes: Int) {
        self.includes = includes
        self.sampleCount = max(8, sampleCount)
        self.sampleBytes = max(1024, sampleBytes)
        slots = .allocate(capacity: Self.maxDictionaries)
        slots.initialize(repeating: nil, count: Self.maxDictionaries)
    }

    deinit { slots.deallocate() }

    /// The per-namespace state for `name`, or nil when it is not to be compressed.
    func namespace(_ name: [UInt8]) -> NamespaceCompression? {
        includes(name) ? NamespaceCompression(owner: self) : nil
    }

    /// The dictionary a frame names; nil for an unknown id.
    @inline(__always)
    func dictionary(id: UInt32) -> ZstdDictionary? {
        let i = Int(id &- Self.firstID)
        guard id >= Self.firstID, i < published.load(ordering: .acquiring) else { return nil }
        return slots[i]?.takeUnretainedValue()
    }

    var dictionaryCount: Int { published.load(ordering: .acquiring) }
    var dictionaryBytes: Int { lock.withLock { retained.reduce(0) { $0 + $1.memoryBytes } } }

    /// Starts training `ns`'s dictionary from `samples` on a thread of its own unless one is
    /// running or the store has its `maxDictionaries` (then `ns` keeps collecting nothing).
    fileprivate func train(_ ns: NamespaceCompression, _ samples: [[UInt8]]) {
        let id: UInt32? = lock.withLock {
            guard !training, claimed < Self.maxDictionaries else { return nil }
            training = true
            claimed += 1
            return Self.firstID + UInt32(claimed - 1)
        }
        guard let id else { ns.trainingEnded(nil, retry: lock.withLock { claimed < Self.maxDictionaries }); return }
        startThread(name: "strata-dict") { [self] in
            let d = ZstdDictionary.train(samples: samples, capacity: Self.dictionaryCapacity, id: id, level: zstd.level)
            lock.withLock {
                training = false
                if let d {
                    retained.append(d)
                    let i = Int(id - Self.firstID)
                    slots[i] = .passUnretained(d)
                    // Ids are claimed in order and trainings run one at a time, so `i` is next.
                    published.store(i + 1, ordering: .releasing)
                } else {
                    claimed -= 1
                }
            }
            if d == nil { failedTrainings.add(1, ordering: .relaxed) }
            ns.trainingEnded(d, retry: false)
        }
    }
}

/// One namespace's compression: collecting samples, then its dictionary. Thread-safe.
final class NamespaceCompression: @unchecked Sendable {
    private unowned let owner: MemoryCompression
    private let lock = Lock()
    private var samples: [[UInt8]] = []
    private var sampleBytes = 0
    private var collecting = true
    /// Set once trained (read without the lock after that).
    private let ready = Atomic<Bool>(false)
    private var dictionary: ZstdDictionary?

    fileprivate init(owner: MemoryCompression) { self.owner = owner }

    /// `value` as the memory tier should store it: a zstd frame when the namespace's dictionary
    /// is trained and the frame saves at least an eighth; nil to store it as it is (the value
    /// is then taken as a training sample while samples are wanted).
    func encode(_ value: [UInt8]) -> [UInt8]? {
        let n = value.count
        guard n >= MemoryCompression.minValue, n <= MemoryCompression.maxValue else { return nil }
        if ready.load(ordering: .acquiring), let d = lock.withLock({ dictionary }) {
            let frame = value.withUnsafeBytes { owner.zstd.compress($0, dictionary: d, maxOutput: n - n / 8) }
            if frame != nil { owner.compressedWrites.add(1, ordering: .relaxed) }
            return frame
        }
        guard n <= MemoryCompression.maxSample else { return nil }
        let full: [[UInt8]]? = lock.withLock {
            guard collecting else { return nil }
            samples.append(value)
            sampleBytes += n
            guard samples.count >= owner.sampleCount || sampleBytes >= owner.sampleBytes else { return nil }
            collecting = false
            defer { samples = []; sampleBytes = 0 }
            return samples
        }
        if let full { owner.train(self, full) }
        return nil
    }

    /// A training ended: with a dictionary, values are compressed from now on; without one,
    /// sampling starts over when `retry` (another training was running), else stops.
    fileprivate func trainingEnded(_ d: ZstdDictionary?, retry: Bool) {
        lock.withLock {
            if let d { dictionary = d } else { collecting = retry }
        }
        if d != nil { ready.store(true, ordering: .releasing) }
    }

    var isTrained: Bool { ready.load(ordering: .acquiring) }
}
