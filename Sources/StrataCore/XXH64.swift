/// xxHash64 (Yann Collet's XXH64, the published algorithm, seedable).
///
/// Used for item checksums on disk and for hashing keys in the memory tier; the ring's hash
/// is fixed separately in proto-spec/RING.md. Pure, no allocation; ~several GB/s on long
/// inputs, a few ns on short keys.
public enum XXH64 {
    @usableFromInline static let p1: UInt64 = 0x9E37_79B1_85EB_CA87
    @usableFromInline static let p2: UInt64 = 0xC2B2_AE3D_27D4_EB4F
    @usableFromInline static let p3: UInt64 = 0x1656_67B1_9E37_79F9
    @usableFromInline static let p4: UInt64 = 0x85EB_CA77_C2B2_AE63
    @usableFromInline static let p5: UInt64 = 0x27D4_EB2F_1656_67C5

    @inline(__always) @usableFromInline
    static func rotl(_ x: UInt64, _ r: UInt64) -> UInt64 { (x << r) | (x >> (64 - r)) }

    @inline(__always) @usableFromInline
    static func round(_ acc: UInt64, _ input: UInt64) -> UInt64 {
        rotl(acc &+ input &* p2, 31) &* p1
    }

    @inline(__always) @usableFromInline
    static func merge(_ acc: UInt64, _ val: UInt64) -> UInt64 {
        (acc ^ round(0, val)) &* p1 &+ p4
    }

    /// Hashes `count` bytes at `base`.
    @inlinable
    public static func hash(_ base: UnsafeRawPointer?, count: Int, seed: UInt64 = 0) -> UInt64 {
        var h: UInt64
        var i = 0
        let n = count
        guard let p = base, n > 0 else {
            return avalanche(seed &+ p5)
        }
        if n >= 32 {
            var v1 = seed &+ p1 &+ p2
            var v2 = seed &+ p2
            var v3 = seed
            var v4 = seed &- p1
            while i + 32 <= n {
                v1 = round(v1, UInt64(littleEndian: p.loadUnaligned(fromByteOffset: i, as: UInt64.self)))
                v2 = round(v2, UInt64(littleEndian: p.loadUnaligned(fromByteOffset: i + 8, as: UInt64.self)))
                v3 = round(v3, UInt64(littleEndian: p.loadUnaligned(fromByteOffset: i + 16, as: UInt64.self)))
                v4 = round(v4, UInt64(littleEndian: p.loadUnaligned(fromByteOffset: i + 24, as: UInt64.self)))
                i += 32
            }
            h = rotl(v1, 1) &+ rotl(v2, 7) &+ rotl(v3, 12) &+ rotl(v4, 18)
            h = merge(h, v1); h = merge(h, v2); h = merge(h, v3); h = merge(h, v4)
        } else {
            h = seed &+ p5
        }
        h = h &+ UInt64(n)
        while i + 8 <= n {
            let k = round(0, UInt64(littleEndian: p.loadUnaligned(fromByteOffset: i, as: UInt64.self)))
            h ^= k
            h = rotl(h, 27) &* p1 &+ p4
            i += 8
        }
        if i + 4 <= n {
            h ^= UInt64(UInt32(littleEndian: p.loadUnaligned(fromByteOffset: i, as: UInt32.self))) &* p1
            h = rotl(h, 23) &* p2 &+ p3
            i += 4
        }
        while i < n {
            h ^= UInt64(p.load(fromByteOffset: i, as: UInt8.self)) &* p5
            h = rotl(h, 11) &* p1
            i += 1
        }
        return avalanche(h)
    }

    @inline(__always) @usableFromInline
    static func avalanche(_ x: UInt64) -> UInt64 {
        var h = x
        h ^= h >> 33
        h = h &* p2
        h ^= h >> 29
        h = h &* p3
        h ^= h >> 32
        return h
    }

    @inlinable
    public static func hash(_ bytes: [UInt8], seed: UInt64 = 0) -> UInt64 {
        bytes.withUnsafeBytes { hash($0.baseAddress, count: $0.count, seed: seed) }
    }

    @inlinable
    public static func hash(_ bytes: UnsafeRawBufferPointer, seed: UInt64 = 0) -> UInt64 {
        hash(bytes.baseAddress, count: bytes.count, seed: seed)
    }
}
