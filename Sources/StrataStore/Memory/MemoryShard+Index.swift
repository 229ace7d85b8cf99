#if canImport(Glibc)
import Glibc
#endif
import CLinux
import StrataCore

// MemoryShard's index: an open-addressing table of record references (linear probing from
// the hash's home slot, backward-shift deletion, at most 3/4 full, growing by half), and the
// prefetches the GET fast path issues before it probes. The caller holds the shard's lock.
extension MemoryShard {
    /// The home slot of `hash` in an index of `capacity` slots (the hash's high bits: any
    /// capacity works, so the index grows by 1.5×, not 2×).
    @inline(__always) static func home(_ hash: UInt32, _ capacity: Int) -> Int {
        Int(truncatingIfNeeded: (UInt64(hash) &* UInt64(capacity)) >> 32)
    }
    @inline(__always) func nextSlot(_ i: Int) -> Int { i + 1 == indexCapacity ? 0 : i + 1 }

    /// The reference and index slot of `key` in namespace `tag`, or the empty slot where it would go.
    func find(tag: UInt32, key: UnsafeRawBufferPointer, hash: UInt32) -> (ref: UInt32, slot: Int) {
        var i = Self.home(hash, indexCapacity)
        while true {
            let r = index[i]
            if r == 0 { return (0, i) }
            let p = ptr(r)
            if u32(p, Self.oHash) == hash, keyLen(p) == key.count, tagMatches(p, tag),
               key.count == 0 || memcmp(keyStart(p), key.baseAddress!, key.count) == 0 {
                return (r, i)
            }
            i = nextSlot(i)
        }
    }

    /// Starts loading the index slot where the probe for `hash` begins (the lock held: the
    /// index may move). Never waits.
    @inline(__always) func prefetchSlot(_ hash: UInt32) {
        strata_prefetch(index + Self.home(hash, indexCapacity))
    }

    /// Starts loading the first record the probe for `hash` meets — its header, key and the
    /// start of its value (192 bytes) — and the headers of the next two the probe may have to
    /// compare (linear probing at up to 3/4 full meets 1.5–2.5 records per hit), once the slot
    /// itself has had time to arrive (the lock held). Waits only if the slot's line has not.
    @inline(__always) func prefetchRecord(_ hash: UInt32) {
        var i = Self.home(hash, indexCapacity)
        let r = index[i]
        guard r != 0 else { return }
        let p = ptr(r)
        strata_prefetch(p)
        strata_prefetch(p + 64)
        strata_prefetch(p + 128)
        for _ in 0..<2 {
            i = nextSlot(i)
            let n = index[i]
            if n == 0 { return }
            strata_prefetch(ptr(n))
        }
    }

    func slotOf(_ ref: UInt32) -> Int {
        var i = Self.home(u32(ptr(ref), Self.oHash), indexCapacity)
        while index[i] != ref { i = nextSlot(i) }
        return i
    }

    func removeSlot(_ slot: Int) {
        var i = slot
        var j = slot
        index[i] = 0
        while true {
            j = nextSlot(j)
            let r = index[j]
            if r == 0 { return }
            let k = Self.home(u32(ptr(r), Self.oHash), indexCapacity)
            // r may stay at j if its home k lies cyclically in (i, j].
            let stays = i <= j ? (i < k && k <= j) : (i < k || k <= j)
            if stays { continue }
            index[i] = r
            index[j] = 0
            i = j
        }
    }

    /// Keeps the index at most 3/4 full, growing it by half (so it holds 4/3 to 2 slots per record).
    func growIndexIfNeeded() {
        guard (count + 1) * 4 > indexCapacity * 3 else { return }
        let newCap = indexCapacity + indexCapacity / 2
        let newIndex = UnsafeMutablePointer<UInt32>.allocate(capacity: newCap)
        newIndex.initialize(repeating: 0, count: newCap)
        for i in 0..<indexCapacity where index[i] != 0 {
            let r = index[i]
            var j = Self.home(u32(ptr(r), Self.oHash), newCap)
            while newIndex[j] != 0 { j = j + 1 == newCap ? 0 : j + 1 }
            newIndex[j] = r
        }
        index.deallocate()
        index = newIndex
        indexCapacity = newCap
    }
}
