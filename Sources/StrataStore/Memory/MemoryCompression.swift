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
    private var collectors = 0
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
    var collecting: Int { lock.withLock { collectors } }

    /// A collector's slot for `ns`, if one is free and a dictionary could still be made for it.
    fileprivate func joinCollecting(exact: Bool) -> Bool {
        lock.withLock {
            guard collectors < Self.maxCollectors, nextID < Self.maxIDs,
                  exact || patternClaims < Self.maxDictionaries else { return false }
            collectors += 1
            return true
        }
    }

    fileprivate func leaveCollecting() { lock.withLock { collectors -= 1 } }

    /// Queues `ns`'s training on `samples` (its collector's slot is given back), or tells it
    /// none can be made.
    fileprivate func train(_ ns: NamespaceCompression, _ samples: [[UInt8]]) {
        let id: Int? = lock.withLock {
            collectors -= 1
            guard nextID < Self.maxIDs, ns.exact || patternClaims < Self.maxDictionaries else { return nil }
            if !ns.exact { patternClaims += 1 }
            nextID += 1
            return nextID - 1
        }
        guard let id else { ns.trainingEnded(nil); return }
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

/// One namespace's compression: waiting for a collector's slot, collecting samples, training,
/// then its dictionary (or none). Thread-safe.
final class NamespaceCompression: @unchecked Sendable {
    private unowned let owner: MemoryCompression
    let name: [UInt8]
    /// Named exactly in the configuration (not by a pattern).
    let exact: Bool
    private enum State { case waiting, collecting(since: Int64), training, ready, none }
    private let lock = Lock()
    private var state = State.waiting
    private var samples: [[UInt8]] = []
    private var sampleBytes = 0
    /// Set once trained (`dictionary` is read without the lock after that).
    private let ready = Atomic<Bool>(false)
    private var dictionary: ZstdDictionary?

    fileprivate init(owner: MemoryCompression, name: [UInt8], exact: Bool) {
        self.owner = owner; self.name = name; self.exact = exact
    }

    /// `value` as the memory tier should store it: a zstd frame when the namespace's dictionary
    /// is trained and the frame saves at least an eighth; nil to store it as it is (the value
    /// is then taken as a training sample while samples are wanted).
    func encode(_ value: [UInt8]) -> [UInt8]? {
        let n = value.count
        if ready.load(ordering: .acquiring), let d = dictionary {
            guard n >= MemoryCompression.minValue, n <= MemoryCompression.maxValue else { return nil }
            let frame = value.withUnsafeBytes { owner.zstd.compress($0, dictionary: d, maxOutput: n - n / 8) }
            if frame != nil { owner.compressedWrites.add(1, ordering: .relaxed) }
            return frame
        }
        sample(value)
        return nil
    }

    private func sample(_ value: [UInt8]) {
        let now = owner.nowSeconds
        let full: [[UInt8]]? = lock.withLock {
            switch state {
            case .waiting:
                guard owner.joinCollecting(exact: exact) else { return nil }
                state = .collecting(since: now)
            case .collecting: break
            case .training, .ready, .none: return nil
            }
            guard case .collecting(let since) = state else { return nil }
            if value.count >= MemoryCompression.minSample && value.count <= MemoryCompression.maxSample {
                samples.append(value)
                sampleBytes += value.count
            }
            let late = now - since >= MemoryCompression.collectSeconds
            if samples.count >= owner.sampleCount || sampleBytes >= owner.sampleBytes || (late && samples.count >= MemoryCompression.minSamples) {
                state = .training
                defer { samples = []; sampleBytes = 0 }
                return samples
            }
            if late {
                // Too few values in a minute: the slot goes to another namespace; this one
                // waits for a free slot again on a later write.
                state = .waiting
                samples = []; sampleBytes = 0
                owner.leaveCollecting()
            }
            return nil
        }
        if let full { owner.train(self, full) }
    }

    /// A training ended: with a dictionary, values are compressed from now on; without one,
    /// the namespace's values stay as written.
    fileprivate func trainingEnded(_ d: ZstdDictionary?) {
        lock.withLock {
            if let d { dictionary = d; state = .ready } else { state = .none }
        }
        if d != nil { ready.store(true, ordering: .releasing) }
    }

    var isTrained: Bool { ready.load(ordering: .acquiring) }
}
