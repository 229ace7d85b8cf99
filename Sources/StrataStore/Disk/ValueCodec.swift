import StrataCore

/// How a value's bytes are stored on disk.
public enum ValueEncoding: UInt8, Sendable, CustomStringConvertible {
    case raw = 0
    case zstd = 1
    public var description: String { self == .raw ? "raw" : "zstd" }
}

/// Chooses and applies the disk encoding of values: zstd when it saves at least 10 %, raw
/// otherwise; bytes that are already compressed (PNG, WebP, JPEG, GIF, zstd frames, known by
/// their magic bytes) are stored raw without trying. Pure apart from the pooled zstd contexts.
public struct ValueCodec: Sendable {
    /// Values shorter than this are stored raw: the frame overhead eats the saving. zstd level 1
    /// shrank ~120 B JSON documents by 8 % on average (bench/RESULTS.md, "Memory-tier
    /// compression"), short of the 10 % `encode` asks for, and a failed attempt cost ~1 µs of
    /// the event loop's CPU per 100 B durable set (was 64 until 2026-12-01).
    public static let minimumCompressibleSize = 128
    let zstd: Zstd

    public init(level: Int32 = 1) { zstd = Zstd(level: level) }

    /// True for bytes that start like PNG, WebP, JPEG, GIF or a zstd frame.
    public static func isAlreadyCompressed(_ b: UnsafeRawBufferPointer) -> Bool {
        func at(_ i: Int) -> UInt8 { b[i] }
        if b.count >= 8, at(0) == 0x89, at(1) == 0x50, at(2) == 0x4E, at(3) == 0x47,
           at(4) == 0x0D, at(5) == 0x0A, at(6) == 0x1A, at(7) == 0x0A { return true }            // PNG
        if b.count >= 12, at(0) == 0x52, at(1) == 0x49, at(2) == 0x46, at(3) == 0x46,
           at(8) == 0x57, at(9) == 0x45, at(10) == 0x42, at(11) == 0x50 { return true }          // RIFF....WEBP
        if b.count >= 3, at(0) == 0xFF, at(1) == 0xD8, at(2) == 0xFF { return true }             // JPEG
        if b.count >= 6, at(0) == 0x47, at(1) == 0x49, at(2) == 0x46, at(3) == 0x38,
           at(4) == 0x37 || at(4) == 0x39, at(5) == 0x61 { return true }                          // GIF87a / GIF89a
        if b.count >= 4, at(0) == 0x28, at(1) == 0xB5, at(2) == 0x2F, at(3) == 0xFD { return true } // zstd
        return false
    }

    /// The bytes to store and their encoding.
    public func encode(_ value: [UInt8]) -> (ValueEncoding, [UInt8]) {
        value.withUnsafeBytes { raw in
            guard raw.count >= Self.minimumCompressibleSize, !Self.isAlreadyCompressed(raw) else {
                return (.raw, value)
            }
            // At least 10 % smaller, or not worth the CPU on every read.
            let budget = raw.count - raw.count / 10
            if let packed = zstd.compress(raw, maxOutput: budget), packed.count <= budget {
                return (.zstd, packed)
            }
            return (.raw, value)
        }
    }

    /// The original bytes, or nil when the stored bytes do not decode to exactly `size` bytes.
    public func decode(_ encoding: ValueEncoding, _ stored: UnsafeRawBufferPointer, size: Int) -> [UInt8]? {
        switch encoding {
        case .raw:
            return stored.count == size ? [UInt8](stored) : nil
        case .zstd:
            return zstd.decompress(stored, expectedSize: size)
        }
    }
}

/// The per-item checksum kept on disk: XXH64 over the key, the metadata and the stored bytes.
enum ItemChecksum {
    /// `marks`: the item's `ItemMarks` (a tombstone alone hashes as it did before marks existed).
    static func compute(key: [UInt8], flags: UInt32, expiry: Int64, version: UInt64, marks: UInt8,
                        encoding: ValueEncoding, size: Int, extended: [UInt8],
                        stored: UnsafeRawBufferPointer) -> Int64 {
        var header = [UInt64](repeating: 0, count: 6)
        header[0] = UInt64(flags) | UInt64(encoding.rawValue) << 32 | UInt64(marks) << 40
        header[1] = UInt64(bitPattern: expiry)
        header[2] = version
        header[3] = UInt64(bitPattern: Int64(size)) // a damaged row's size may be negative: it must fail the checksum, not trap
        header[4] = UInt64(extended.count)
        header[5] = UInt64(key.count)
        var h = header.withUnsafeBytes { XXH64.hash($0) }
        h = XXH64.hash(key, seed: h)
        h = XXH64.hash(extended, seed: h)
        h = XXH64.hash(stored, seed: h)
        return Int64(bitPattern: h)
    }
}
