import CZstd
import StrataCore

// The one file that knows zstd's C API.

/// zstd compression with pooled contexts (a context costs ~1 MiB to create; reusing one makes a
/// small compression a few µs). Thread-safe: each call borrows a context from the pool.
public final class Zstd: @unchecked Sendable {
    private let lock = Lock()
    private var cctxs: [OpaquePointer] = []
    private var dctxs: [OpaquePointer] = []
    public let level: Int32

    public init(level: Int32 = 1) { self.level = level }

    deinit {
        for c in cctxs { ZSTD_freeCCtx(c) }
        for d in dctxs { ZSTD_freeDCtx(d) }
    }

    /// Compresses `input`; nil when the result would not be smaller than `maxOutput` bytes.
    public func compress(_ input: UnsafeRawBufferPointer, maxOutput: Int) -> [UInt8]? {
        compressed(maxOutput: maxOutput) { ctx, out in ZSTD_compressCCtx(ctx, out, maxOutput, input.baseAddress, input.count, level) }
    }

    /// Runs one compression on a pooled context into a new array of at most `maxOutput` bytes;
    /// nil when zstd fails (the output would not fit).
    fileprivate func compressed(maxOutput: Int, _ run: (OpaquePointer, UnsafeMutableRawPointer?) -> Int) -> [UInt8]? {
        guard maxOutput > 0 else { return nil }
        let ctx: OpaquePointer? = lock.withLock { cctxs.popLast() } ?? ZSTD_createCCtx()
        guard let ctx else { return nil }
        defer { lock.withLock { cctxs.append(ctx) } }
        var written = 0
        let out = [UInt8](unsafeUninitializedCapacity: maxOutput) { buf, count in
            let r = run(ctx, buf.baseAddress)
            if ZSTD_isError(r) != 0 { count = 0; written = -1 } else { count = r; written = r }
        }
        return written > 0 ? out : nil
    }

    /// Decompresses a frame that must expand to exactly `expectedSize` bytes. The output is
    /// bounded by `expectedSize` (recorded beside the item), never by what the frame claims.
    public func decompress(_ input: UnsafeRawBufferPointer, expectedSize: Int) -> [UInt8]? {
        guard expectedSize >= 0 else { return nil }
        let ctx: OpaquePointer? = lock.withLock { dctxs.popLast() } ?? ZSTD_createDCtx()
        guard let ctx else { return nil }
        defer { lock.withLock { dctxs.append(ctx) } }
        var ok = false
        let out = [UInt8](unsafeUninitializedCapacity: max(expectedSize, 1)) { buf, count in
            let r = ZSTD_decompressDCtx(ctx, buf.baseAddress, expectedSize, input.baseAddress, input.count)
            if ZSTD_isError(r) == 0 && r == expectedSize { count = r; ok = true } else { count = 0 }
        }
        return ok ? out : nil
    }

    public static var libraryVersion: String { String(cString: ZSTD_versionString()) }
}

/// A trained zstd dictionary, ready to compress and decompress with (digested once: a
/// compression with it costs what a plain small compression costs). Immutable; frees its C
/// state when released. `id` is written into every frame compressed with it.
public final class ZstdDictionary: @unchecked Sendable {
    public let id: UInt32
    fileprivate let cdict: OpaquePointer
    fileprivate let ddict: OpaquePointer
    /// The dictionary's own bytes.
    public let size: Int
    /// What its digested compression and decompression states hold in memory.
    public let memoryBytes: Int

    private init(id: UInt32, cdict: OpaquePointer, ddict: OpaquePointer, size: Int) {
        (self.id, self.cdict, self.ddict, self.size) = (id, cdict, ddict, size)
        memoryBytes = ZSTD_sizeof_CDict(cdict) + ZSTD_sizeof_DDict(ddict)
    }

    deinit {
        ZSTD_freeCDict(cdict)
        ZSTD_freeDDict(ddict)
    }

    /// Trains a dictionary of at most `capacity` bytes from `samples` (zstd's dictionary
    /// builder: ~100 × the capacity of samples is its advice; a few hundred small values do),
    /// numbered `id` (nonzero) instead of the random id the builder picks. Nil when the
    /// samples are too few or too alike to train on. Costs tens of milliseconds and ~6 MB of
    /// scratch memory for ~128 KiB of samples: run it off the event loops.
    public static func train(samples: [[UInt8]], capacity: Int, id: UInt32, level: Int32) -> ZstdDictionary? {
        guard id != 0, capacity >= 256, samples.count >= 8 else { return nil }
        let joined = samples.flatMap { $0 }
        let sizes = samples.map { $0.count }
        var dict = [UInt8](repeating: 0, count: capacity)
        let n = dict.withUnsafeMutableBytes { d in
            joined.withUnsafeBytes { s in
                sizes.withUnsafeBufferPointer { z in
                    ZDICT_trainFromBuffer(d.baseAddress, capacity, s.baseAddress, z.baseAddress, UInt32(samples.count))
                }
            }
        }
        guard ZDICT_isError(n) == 0, n >= 8 else { return nil }
        dict.removeLast(capacity - n)
        // The header: magic (4 bytes), then the dictionary id, little-endian.
        guard dict.withUnsafeBytes({ $0.loadUnaligned(as: UInt32.self) }) == UInt32(ZSTD_MAGIC_DICTIONARY) else { return nil }
        dict.withUnsafeMutableBytes { $0.storeBytes(of: id.littleEndian, toByteOffset: 4, as: UInt32.self) }
        return dict.withUnsafeBytes { d -> ZstdDictionary? in
            guard let c = ZSTD_createCDict(d.baseAddress, d.count, level) else { return nil }
            guard let dd = ZSTD_createDDict(d.baseAddress, d.count) else { ZSTD_freeCDict(c); return nil }
            return ZstdDictionary(id: id, cdict: c, ddict: dd, size: d.count)
        }
    }
}

extension Zstd {
    /// Compresses `input` with `dictionary` into a frame that records the content size and the
    /// dictionary's id; nil when the frame would not be smaller than `maxOutput` bytes.
    public func compress(_ input: UnsafeRawBufferPointer, dictionary: ZstdDictionary, maxOutput: Int) -> [UInt8]? {
        compressed(maxOutput: maxOutput) { ctx, out in
            ZSTD_compress_usingCDict(ctx, out, maxOutput, input.baseAddress, input.count, dictionary.cdict)
        }
    }

    /// The content size a frame's header records and the dictionary id it names (0: none);
    /// nil when the header is not a zstd frame's or records no size. Reads the header only.
    public static func frameInfo(_ frame: UnsafeRawBufferPointer) -> (contentSize: Int, dictionaryID: UInt32)? {
        let size = ZSTD_getFrameContentSize(frame.baseAddress, frame.count)
        guard size != ZSTD_CONTENTSIZE_UNKNOWN, size != ZSTD_CONTENTSIZE_ERROR, size <= UInt64(Int.max) else { return nil }
        return (Int(size), ZSTD_getDictID_fromFrame(frame.baseAddress, frame.count))
    }
}

/// One decompression context (not thread-safe: the owner serialises its calls, e.g. under a
/// lock it already holds). ~100 KiB once created.
public final class ZstdDecoder: @unchecked Sendable {
    private let ctx: OpaquePointer?
    public init() { ctx = ZSTD_createDCtx() }
    deinit { if let ctx { ZSTD_freeDCtx(ctx) } }

    /// Decompresses `frame` with `dictionary` into `out`, which must be exactly the frame's
    /// content size; false when the frame does not expand to exactly `out.count` bytes.
    public func decompress(_ frame: UnsafeRawBufferPointer, dictionary: ZstdDictionary, into out: UnsafeMutableRawBufferPointer) -> Bool {
        guard let ctx else { return false }
        let r = ZSTD_decompress_usingDDict(ctx, out.baseAddress, out.count, frame.baseAddress, frame.count, dictionary.ddict)
        return ZSTD_isError(r) == 0 && r == out.count
    }
}
