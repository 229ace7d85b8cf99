#if canImport(Glibc)
import Glibc
#endif
import CLinux
import StrataCore

/// One shard of the memory tier: items packed into slab pages, indexed by a compact
/// open-addressing table, evicted by S3-FIFO (Yang et al., SOSP '23) over two intrusive FIFO
/// queues whose links are 32-bit references (MemoryShard+Policy.swift).
///
/// Layout (why): a Swift object plus two arrays per item costs well over 100 bytes beyond the
/// data; here an item costs its 30-byte header (plus 2–22 bytes of optional fields only when it
/// has flags, an expiry, extended data, a value ≥ 2 MiB or a namespace tag ≥ 255;
/// MemoryShard+Record.swift), rounding to its size class (≤ 7 bytes below 1 KiB, ≤ 12.5 %
/// above) and 5.3–8 bytes of index.
///
/// - Records live in 1 MiB pages dedicated to one size class (multiples of 8 up to 1 KiB, then
///   steps of 1/8 up to 128 KiB); larger records get an allocation of their own. A reference is
///   `page << 17 | offset / 8`; 0 means none (page 0 is never used).
/// - Freed chunks go on their class's free list; class pages are kept, as in memcached.
/// - The index holds references; linear probing with backward-shift deletion (no tombstones);
///   a key's home slot comes from its hash's high bits (`home`), so the index can grow by 1.5×
///   at 3/4 full (4/3 to 2 slots of 4 bytes per record).
/// - A hit bumps a 2-bit counter in the record's `oPolicy` byte (no relinking); beside the
///   records, a `GhostQueue` of recently evicted key hashes (11–22 B per entry, at most
///   ~90 % of the items the shard holds); its bytes are counted in `memoryBytes`.
///
/// Not thread-safe: `MemoryTier` holds `lock` around every call.
final class MemoryShard {
    let lock = Lock()

    // The record layout is in MemoryShard+Record.swift.
    static let bitTombstone: UInt8 = ItemMarks.tombstone

    static let pageShift = 20
    static let pageSize = 1 << pageShift
    static let largeClass: UInt8 = 255
    static let maxPages = 1 << 15

    /// Chunk sizes of the size classes.
    static let classSizes: [Int] = {
        var sizes: [Int] = []
        var s = 32
        while s <= 1024 { sizes.append(s); s += 8 }
        s = 1024
        while true {
            s = (s + s / 8 + 7) & ~7
            if s > 128 * 1024 { break }
            sizes.append(s)
        }
        return sizes
    }()

    static func sizeClass(for size: Int) -> Int? {
        if size <= 1024 { return (max(size, 32) - 32 + 7) / 8 }
        var lo = 125, hi = classSizes.count - 1
        if size > classSizes[hi] { return nil }
        while lo < hi {
            let mid = (lo + hi) / 2
            if classSizes[mid] >= size { hi = mid } else { lo = mid + 1 }
        }
        return lo
    }

    // Pages.
    private var pages: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    /// The size class of each page's records (`largeClass` for an allocation of its own).
    private var pageClass: UnsafeMutablePointer<UInt8>
    private var pageCapacity = 64
    private var pagesUsed = 1
    private var freePageSlots: [UInt32] = []
    // Size classes.
    private var classFree: [UInt32]
    private var classCarvePage: [UInt32]
    private var classCarveOffset: [Int]
    // Index.
    var index: UnsafeMutablePointer<UInt32>
    /// Slots in `index` (any size ≥ 1024).
    var indexCapacity: Int
    // The S3-FIFO queues: 0 = small, 1 = main; head is the newest, tail the oldest.
    var queueHead: (UInt32, UInt32) = (0, 0)
    var queueTail: (UInt32, UInt32) = (0, 0)
    /// Records and accounted bytes in the small queue (the main queue holds the rest).
    var smallCount = 0, smallBytes = 0
    /// Keys recently evicted, each marked with the queue it left.
    let ghost = GhostQueue()
    /// The small queue's share (MemoryShard+Policy.swift): bytes under a byte limit, else items.
    var smallTarget: Double

    private(set) var count = 0
    /// The chunk sizes of live records.
    private(set) var usedBytes = 0
    /// What the byte limit holds: the records' chunks and the ghost queue's arrays.
    var memoryBytes: Int { usedBytes + ghost.memoryBytes }
    /// Bumped by every delete, so a disk read that raced with a delete is not promoted.
    private(set) var deleteEpoch: UInt64 = 0

    var countLimit: Int
    var costLimit: Int
    var ageLimitSeconds: Int64
    /// The store's `maxAge` in µs (0 = none): a record whose version is older than
    /// `now − maxAgeMicros` reads as expired (tombstones excepted).
    var maxAgeMicros: Int64 = 0

    // Counters (read under the lock by stats).
    var hits = 0, misses = 0, evictions = 0, expirations = 0
    /// Records whose value is a zstd frame (`MemoryCompression`).
    private(set) var compressedCount = 0

    /// The store's dictionaries, when some namespace's values are compressed; the decoder
    /// and the buffer a hit's value is expanded into are made on first use.
    var compression: MemoryCompression?
    var decoder: ZstdDecoder?
    var expandBuffer: UnsafeMutableRawPointer?

    init(countLimit: Int, costLimit: Int, ageLimitSeconds: Int64) {
        self.countLimit = countLimit
        self.costLimit = costLimit
        smallTarget = Self.initialSmallTarget(countLimit: countLimit, costLimit: costLimit)
        self.ageLimitSeconds = ageLimitSeconds
        pages = .allocate(capacity: pageCapacity)
        pages.initialize(repeating: nil, count: pageCapacity)
        pageClass = .allocate(capacity: pageCapacity)
        pageClass.initialize(repeating: 0, count: pageCapacity)
        let n = Self.classSizes.count
        classFree = Array(repeating: 0, count: n)
        classCarvePage = Array(repeating: 0, count: n)
        classCarveOffset = Array(repeating: 0, count: n)
        indexCapacity = 1024
        index = .allocate(capacity: indexCapacity)
        index.initialize(repeating: 0, count: indexCapacity)
    }

    deinit {
        for i in 1..<pagesUsed { free(pages[i]) }
        pages.deallocate()
        pageClass.deallocate()
        index.deallocate()
        expandBuffer?.deallocate()
    }

    // MARK: Record access

    @inline(__always) func ptr(_ ref: UInt32) -> UnsafeMutableRawPointer {
        pages[Int(ref >> 17)].unsafelyUnwrapped + (Int(ref & 0x1FFFF) << 3)
    }
    @inline(__always) func u32(_ p: UnsafeMutableRawPointer, _ o: Int) -> UInt32 { p.load(fromByteOffset: o, as: UInt32.self) }
    @inline(__always) private func set32(_ p: UnsafeMutableRawPointer, _ o: Int, _ v: UInt32) { p.storeBytes(of: v, toByteOffset: o, as: UInt32.self) }
    @inline(__always) func prev(_ r: UInt32) -> UInt32 { u32(ptr(r), Self.oPrev) }
    @inline(__always) func next(_ r: UInt32) -> UInt32 { u32(ptr(r), Self.oNext) }
    @inline(__always) private func setPrev(_ r: UInt32, _ v: UInt32) { set32(ptr(r), Self.oPrev, v) }
    @inline(__always) private func setNext(_ r: UInt32, _ v: UInt32) { set32(ptr(r), Self.oNext, v) }

    /// The bytes the record `r` occupies: its size class's chunk, or its own allocation's size.
    func chunkSize(_ r: UInt32) -> Int {
        let cls = pageClass[Int(r >> 17)]
        return cls == Self.largeClass ? recordSize(ptr(r)) : Self.classSizes[Int(cls)]
    }

    // MARK: Allocation

    private func newPageSlot(_ block: UnsafeMutableRawPointer, cls: UInt8) -> UInt32? {
        if let slot = freePageSlots.popLast() { pages[Int(slot)] = block; pageClass[Int(slot)] = cls; return slot }
        if pagesUsed == pageCapacity {
            guard pageCapacity < Self.maxPages else { return nil }
            let bigger = UnsafeMutablePointer<UnsafeMutableRawPointer?>.allocate(capacity: pageCapacity * 2)
            bigger.initialize(repeating: nil, count: pageCapacity * 2)
            bigger.update(from: pages, count: pageCapacity)
            pages.deallocate()
            pages = bigger
            let biggerClass = UnsafeMutablePointer<UInt8>.allocate(capacity: pageCapacity * 2)
            biggerClass.initialize(repeating: 0, count: pageCapacity * 2)
            biggerClass.update(from: pageClass, count: pageCapacity)
            pageClass.deallocate()
            pageClass = biggerClass
            pageCapacity *= 2
        }
        pages[pagesUsed] = block
        pageClass[pagesUsed] = cls
        pagesUsed += 1
        return UInt32(pagesUsed - 1)
    }

    private func allocate(size: Int) -> UInt32? {
        guard let cls = Self.sizeClass(for: size) else {
            guard let block = malloc(size) else { return nil }
            guard let slot = newPageSlot(block, cls: Self.largeClass) else { free(block); return nil }
            return slot << 17
        }
        let head = classFree[cls]
        if head != 0 {
            classFree[cls] = u32(ptr(head), 0)
            return head
        }
        let chunk = Self.classSizes[cls]
        if classCarvePage[cls] == 0 || classCarveOffset[cls] + chunk > Self.pageSize {
            guard let block = malloc(Self.pageSize) else { return nil }
            guard let slot = newPageSlot(block, cls: UInt8(cls)) else { free(block); return nil }
            classCarvePage[cls] = slot
            classCarveOffset[cls] = 0
        }
        let ref = classCarvePage[cls] << 17 | UInt32(classCarveOffset[cls] >> 3)
        classCarveOffset[cls] += chunk
        return ref
    }

    private func release(_ ref: UInt32) {
        let p = ptr(ref)
        let cls = pageClass[Int(ref >> 17)]
        if cls == Self.largeClass {
            let slot = Int(ref >> 17)
            free(pages[slot])
            pages[slot] = nil
            freePageSlots.append(UInt32(slot))
        } else {
            set32(p, 0, classFree[Int(cls)])
            classFree[Int(cls)] = ref
        }
    }

    // MARK: Queues

    @inline(__always) func policyBits(_ r: UInt32) -> UInt8 { ptr(r).load(fromByteOffset: Self.oPolicy, as: UInt8.self) }
    @inline(__always) func setPolicyBits(_ r: UInt32, _ v: UInt8) { ptr(r).storeBytes(of: v, toByteOffset: Self.oPolicy, as: UInt8.self) }

    /// Links `r` at the head of the queue its `oPolicy` byte names.
    func linkAtHead(_ r: UInt32) {
        let main = policyBits(r) & Self.policyMain != 0
        let head = main ? queueHead.1 : queueHead.0
        setPrev(r, 0)
        setNext(r, head)
        if head != 0 { setPrev(head, r) }
        if main {
            queueHead.1 = r
            if queueTail.1 == 0 { queueTail.1 = r }
        } else {
            queueHead.0 = r
            if queueTail.0 == 0 { queueTail.0 = r }
            smallCount += 1
            smallBytes += chunkSize(r)
        }
    }

    /// Unlinks `r` from the queue its `oPolicy` byte names.
    func unlink(_ r: UInt32) {
        let main = policyBits(r) & Self.policyMain != 0
        let p = prev(r), n = next(r)
        if p != 0 { setNext(p, n) } else if main { queueHead.1 = n } else { queueHead.0 = n }
        if n != 0 { setPrev(n, p) } else if main { queueTail.1 = p } else { queueTail.0 = p }
        if !main {
            smallCount -= 1
            smallBytes -= chunkSize(r)
        }
    }

    // MARK: Operations

    /// Removes the record at `slot`.
    func remove(ref: UInt32, slot: Int) {
        usedBytes -= chunkSize(ref)
        count -= 1
        if policyBits(ref) & Self.policyCompressed != 0 { compressedCount -= 1 }
        unlink(ref)
        removeSlot(slot)
        release(ref)
        deleteEpoch &+= 1
    }

    /// Past its expiry, or (with a `maxAge`) written too long ago.
    func isExpired(_ p: UnsafeMutableRawPointer, now: Int64) -> Bool {
        let e = expiry(p)
        if e != 0 && e <= now { return true }
        guard maxAgeMicros > 0, !isTombstone(p) else { return false }
        return version(p) < UInt64(max(0, now - maxAgeMicros))
    }

    /// The live item, counting the access (the record's 2-bit counter, capped at 3; nothing is
    /// relinked); nil on a miss (expired items are removed).
    func get(tag: UInt32, key: UnsafeRawBufferPointer, hash: UInt32, now: Int64, countStats: Bool = true) -> ItemState? {
        guard let p = live(tag: tag, key: key, hash: hash, now: now) else { if countStats { misses += 1 }; return nil }
        guard let s = state(p) else { if countStats { misses += 1 }; return nil }
        if countStats { hits += 1 }
        return s
    }

    /// The live record of the key, its access counted as `get` counts it (expired records are
    /// removed); nil for a miss, an expired item or a tombstone. Counts no hit or miss.
    @inline(__always)
    func live(tag: UInt32, key: UnsafeRawBufferPointer, hash: UInt32, now: Int64) -> UnsafeMutableRawPointer? {
        let (r, slot) = find(tag: tag, key: key, hash: hash)
        guard r != 0 else { return nil }
        let p = ptr(r)
        if isExpired(p, now: now) {
            expirations += 1
            remove(ref: r, slot: slot)
            return nil
        }
        if isTombstone(p) { return nil }
        let bits = p.load(fromByteOffset: Self.oPolicy, as: UInt8.self)
        touch(p, now: now, policy: bits & Self.policyFreqMask != Self.policyFreqMask ? bits &+ 1 : bits)
        return p
    }

    /// What the shard holds for the key, tombstones included, without counting an access.
    /// With `withValue` false the value is left empty; `valueLen` is always the real size.
    func peek(tag: UInt32, key: UnsafeRawBufferPointer, hash: UInt32, now: Int64, withValue: Bool) -> (state: ItemState, valueLen: Int)? {
        let (r, slot) = find(tag: tag, key: key, hash: hash)
        guard r != 0 else { return nil }
        let p = ptr(r)
        if isExpired(p, now: now) {
            expirations += 1
            remove(ref: r, slot: slot)
            return nil
        }
        if withValue { return state(p).map { ($0, $0.value.count) } }
        return header(p)
    }

    /// Stores `item` under the key, replacing what was there, evicting first (S3-FIFO,
    /// `evict(toFit:now:)`) so the count and byte limits hold. A new key enters the small queue,
    /// or the main queue when the ghost queue remembers it; a replaced record keeps its queue
    /// and counter. False when the item cannot be held (larger than the shard's share, or
    /// memory could not be allocated). `compressed`: `item.value` as a zstd frame made with one
    /// of `compression`'s dictionaries, stored instead (readers see `item.value`).
    @discardableResult
    func put(tag: UInt32, key: UnsafeRawBufferPointer, hash: UInt32, item original: ItemState, now: Int64,
             compressed: [UInt8]? = nil) -> Bool {
        var item = original
        if let compressed { item.value = compressed }
        let (layout, headerBytes) = Self.headerLayout(tag: tag, item: item)
        let size = headerBytes + key.count + item.extended.count + item.value.count
        let chunk = Self.sizeClass(for: size).map { Self.classSizes[$0] } ?? size
        // An item the shard can never hold changes nothing (its older copy stays).
        guard chunk <= costLimit, countLimit > 0, key.count <= Self.maxKeyLen, item.extended.count <= Int(UInt16.max),
              item.value.count <= Int(UInt32.max) else { return false }
        let (old, oldSlot) = find(tag: tag, key: key, hash: hash)
        var policy: UInt8? = nil
        if old != 0 { policy = policyBits(old); remove(ref: old, slot: oldSlot) }
        evict(toFit: chunk, now: now)
        // After evicting, as the simulator does: the eviction may have pushed the key out of the ghost.
        var bits = policy ?? 0
        if policy == nil, let fromMain = ghost.remove(hash) {
            adaptSmallShare(fromMain: fromMain, chunk: chunk)
            bits = Self.policyMain
        }
        bits &= ~Self.policyCompressed
        if compressed != nil { bits |= Self.policyCompressed }
        guard let ref = allocate(size: size) else { return false }
        writeRecord(ptr(ref), tag: tag, key: key, hash: hash, item: item, layout: layout, policy: bits, now: now)
        growIndexIfNeeded()
        let slot = find(tag: tag, key: key, hash: hash).slot
        index[slot] = ref
        linkAtHead(ref)
        count += 1
        usedBytes += chunk
        if compressed != nil { compressedCount += 1 }
        return true
    }

    /// Removes the key; true when something (live, expired or a tombstone) was there.
    @discardableResult
    func delete(tag: UInt32, key: UnsafeRawBufferPointer, hash: UInt32) -> Bool {
        let (r, slot) = find(tag: tag, key: key, hash: hash)
        guard r != 0 else {
            // Nothing here, but a disk read begun before this delete must not promote what it
            // found (`MemoryTier.promote` checks the epoch).
            deleteEpoch &+= 1
            return false
        }
        remove(ref: r, slot: slot)
        return true
    }

    /// Drops everything, the ghost queue too (and moves `deleteEpoch`, so no disk read begun
    /// before is promoted).
    func removeAll() {
        while queueTail.0 != 0 { remove(ref: queueTail.0, slot: slotOf(queueTail.0)) }
        while queueTail.1 != 0 { remove(ref: queueTail.1, slot: slotOf(queueTail.1)) }
        ghost.removeAll()
        smallTarget = Self.initialSmallTarget(countLimit: countLimit, costLimit: costLimit)
        deleteEpoch &+= 1
    }
}
