import Dispatch
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
/// - Bounded: at most `maxCollectors` namespaces collect samples at once (each at most
///   `sampleCount` values and `sampleBytes` bytes: 1 MiB in all); a namespace waits for a slot
///   on its writes, and a collector that has not filled within `collectSeconds` trains on what
///   it has (at least `minSamples`) or gives its slot up. Trainings run one at a time on a
///   thread of their own, queued. At most `maxDictionaries` dictionaries for namespaces a
///   pattern (`prefix*`, `*`) matched; namespaces named exactly always get theirs (the operator
///   listed them). Dictionaries live as long as the store (records compressed with one may
///   outlive a flush); their memory is outside `--memory-limit` and counted in
///   `dictionaryBytes`.
///
/// Costs: a write to such a namespace compresses its value (~1–5 µs for ~100 B–1 KiB, outside
/// the shard's lock except for memory-only writes that derive the value from the item held);
/// a hit decompresses it (~0.5 µs for 200 B, ~2 µs for 1 KiB: bench/RESULTS.md) under the shard's lock.
final class MemoryCompression: @unchecked Sendable {
    static let minValue = 32, maxValue = 64 << 10
    /// Values a dictionary is trained from are 16 B … 16 KiB.
    static let minSample = 16, maxSample = 16 << 10
    static let dictionaryCapacity = 16 << 10
    static let maxDictionaries = 64
    static let maxCollectors = 8
    static let collectSeconds: Int64 = 60
    static let minSamples = 100
    /// Ids a store hands out (trainings that fail use one up too).
    static let maxIDs = 256
    /// Dictionary ids start here (zstd keeps ids below 32768 for a registry it may define).
    static let firstID: UInt32 = 32_768

    /// Whether a namespace is compressed (nil: not at all), and if so whether it was named exactly.
    let match: @Sendable ([UInt8]) -> Bool?
    let sampleCount: Int, sampleBytes: Int
    let zstd = Zstd(level: 1)
    let clock: any Clock
    let log: (@Sendable (String) -> Void)?

    /// The dictionaries by id − `firstID`, published once each (readers take no lock).
    private let slots: UnsafeMutablePointer<Unmanaged<ZstdDictionary>?>
    private let published = Atomic<Int>(0)
    private let trainer = DispatchQueue(label: "strata-dict")
    private let lock = Lock()
    private var nextID = 0
    /// Pattern-matched namespaces' dictionaries, trained or queued.
    private var patternClaims = 0
    private var retained: [ZstdDictionary] = []

    /// Values stored compressed (a counter) and trainings that failed.
    let compressedWrites = Atomic<Int>(0), failedTrainings = Atomic<Int>(0)

    init(match: @escaping @Sendable ([UInt8]) -> Bool?, sampleCount: Int, sampleBytes: Int, clock: any Clock,
         log: (@Sendable (String) -> Void)?) {
        self.match = match
        self.sampleCount = max(8, sampleCount)
        self.sampleBytes = max(1024, sampleBytes)
        self.clock = clock
        self.log = log
        slots = .allocate(capacity: Self.maxIDs)
        slots.initialize(repeating: nil, count: Self.maxIDs)
    }

    deinit {
        trainer.sync {} // a queued training holds no reference, but finish before the slots go
        slots.deallocate()
    }

    /// The per-namespace state for `name`, or nil when it is not to be compressed.
    func namespace(_ name: [UInt8]) -> NamespaceCompression? {
        match(name).map { NamespaceCompression(owner: self, name: name, exact: $0) }
    }

    /// The dictionary a frame names; nil for an unknown id.
    @inline(__always)
    func dictionary(id: UInt32) -> ZstdDictionary? {
        let i = Int(id &- Self.firstID)
        guard id >= Self.firstID, i < published.load(ordering: .acquiring) else { return nil }
        return slots[i]?.takeUnretainedValue()
    }

    var dictionaryCount: Int { lock.withLock { retained.count } }
    var dictionaryBytes: Int { lock.withLock { retained.reduce(0) { $0 + $1.memoryBytes } } }

    var nowSeconds: Int64 { clock.nowSeconds() }

    /// Namespaces collecting samples now (for tests).
    var collecting: Int { lock.withLock { collectors.count } }

    /// A namespace collecting samples: what it has so far, since when.
    private struct Collector {
        let ns: NamespaceCompression
        var samples: [[UInt8]] = []
        var bytes = 0
        let since: Int64
    }
    /// The collectors, held here (not by the namespaces) so one that stops writing can be
    /// dropped — its samples with it — when another namespace wants its slot.
    private var collectors: [ObjectIdentifier: Collector] = [:]

    /// A trained-to-be namespace, its samples and its dictionary id.
    private typealias Training = (ns: NamespaceCompression, samples: [[UInt8]], id: Int)

    /// Takes `value` as a sample of `ns` while it collects; starts collecting when a slot is
    /// free (a collector past `collectSeconds` — even one that stopped writing — trains on what
    /// it has, at least `minSamples`, or gives its slot up); queues the training once the
    /// samples are enough.
    fileprivate func offer(_ ns: NamespaceCompression, _ value: [UInt8]) {
        let now = nowSeconds
        let trainings: [Training] = lock.withLock {
            var out: [Training] = []
            let key = ObjectIdentifier(ns)
            if collectors[key] == nil {
                guard nextID < Self.maxIDs, ns.exact || patternClaims < Self.maxDictionaries else {
                    ns.trainingQueued() // no dictionary can be made for it: it stops offering
                    return out
                }
                if collectors.count >= Self.maxCollectors {
                    for (k, c) in collectors where now - c.since >= Self.collectSeconds {
                        collectors[k] = nil
                        if c.samples.count >= Self.minSamples, let t = claimLocked(c.ns, c.samples) { out.append(t) }
                    }
                }
                guard collectors.count < Self.maxCollectors else { return out }
                collectors[key] = Collector(ns: ns, since: now)
            }
            guard var c = collectors[key] else { return out }
            if value.count >= Self.minSample && value.count <= Self.maxSample {
                c.samples.append(value)
                c.bytes += value.count
            }
            let late = now - c.since >= Self.collectSeconds
            if c.samples.count >= sampleCount || c.bytes >= sampleBytes || (late && c.samples.count >= Self.minSamples) {
                collectors[key] = nil
                if let t = claimLocked(ns, c.samples) { out.append(t) }
            } else if late {
                collectors[key] = nil // too few values in a minute: the slot goes to another namespace
            } else {
                collectors[key] = c
            }
            return out
        }
        for t in trainings { queue(t) }
    }

    /// An id for `ns`'s dictionary, or nil (and the namespace stays uncompressed) when none
    /// can be made; the namespace stops offering samples either way.
    private func claimLocked(_ ns: NamespaceCompression, _ samples: [[UInt8]]) -> Training? {
        ns.trainingQueued()
        guard nextID < Self.maxIDs, ns.exact || patternClaims < Self.maxDictionaries else {
            ns.trainingEnded(nil)
            return nil
        }
        if !ns.exact { patternClaims += 1 }
        nextID += 1
        return (ns, samples, nextID - 1)
    }

    /// Trains on the `strata-dict` queue, one at a time, in the order queued.
    private func queue(_ t: Training) {
        let (ns, samples, id) = t
        trainer.async { [self] in
            let d = ZstdDictionary.train(samples: samples, capacity: Self.dictionaryCapacity, id: Self.firstID + UInt32(id), level: zstd.level)
            let name = ns.name.allSatisfy { $0 >= 0x21 && $0 < 0x7F && $0 != 0x22 } ? String(decoding: ns.name, as: UTF8.self) : "hex:" + ns.name.hexString
            lock.withLock {
                if let d {
                    retained.append(d)
                    slots[id] = .passUnretained(d)
                    // Ids below may still be queued (their slots nil until trained).
                    published.store(max(published.load(ordering: .relaxed), id + 1), ordering: .releasing)
                } else if !ns.exact {
                    patternClaims -= 1
                }
            }
            if let d {
                log?("level=info event=memory_dictionary_trained namespace=\"\(name)\" id=\(d.id) bytes=\(d.size) memory=\(d.memoryBytes) samples=\(samples.count)")
            } else {
                failedTrainings.add(1, ordering: .relaxed)
                log?("level=warn event=memory_dictionary_failed namespace=\"\(name)\" samples=\(samples.count) action=\"values of this namespace stay uncompressed\"")
            }
            ns.trainingEnded(d)
        }
    }
}

/// One namespace's compression: its samples are offered to the store's `MemoryCompression`
/// until its training is queued; then its dictionary (or none). Thread-safe.
final class NamespaceCompression: @unchecked Sendable {
    private unowned let owner: MemoryCompression
    let name: [UInt8]
    /// Named exactly in the configuration (not by a pattern).
    let exact: Bool
    /// Set once its training is queued (no more samples), and once trained.
    private let queued = Atomic<Bool>(false)
    private let ready = Atomic<Bool>(false)
    /// Written once, before `ready` is set (read without a lock after that).
    private var dictionary: ZstdDictionary?

    fileprivate init(owner: MemoryCompression, name: [UInt8], exact: Bool) {
        self.owner = owner; self.name = name; self.exact = exact
    }

    /// `value` as the memory tier should store it: a zstd frame when the namespace's dictionary
    /// is trained and the frame saves at least an eighth; nil to store it as it is (the value
    /// is then offered as a training sample while samples are wanted).
    func encode(_ value: [UInt8]) -> [UInt8]? {
        let n = value.count
        if ready.load(ordering: .acquiring), let d = dictionary {
            guard n >= MemoryCompression.minValue, n <= MemoryCompression.maxValue else { return nil }
            let frame = value.withUnsafeBytes { owner.zstd.compress($0, dictionary: d, maxOutput: n - n / 8) }
            if frame != nil { owner.compressedWrites.add(1, ordering: .relaxed) }
            return frame
        }
        if !queued.load(ordering: .relaxed) { owner.offer(self, value) }
        return nil
    }

    fileprivate func trainingQueued() { queued.store(true, ordering: .relaxed) }

    /// A training ended: with a dictionary, values are compressed from now on; without one,
    /// the namespace's values stay as written.
    fileprivate func trainingEnded(_ d: ZstdDictionary?) {
        if let d {
            dictionary = d
            ready.store(true, ordering: .releasing)
        }
    }

    var isTrained: Bool { ready.load(ordering: .acquiring) }
}
