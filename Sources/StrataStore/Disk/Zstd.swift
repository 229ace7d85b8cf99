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
        guard maxOutput > 0 else { return nil }
        let ctx: OpaquePointer? = lock.withLock { cctxs.popLast() } ?? ZSTD_createCCtx()
        guard let ctx else { return nil }
        defer { lock.withLock { cctxs.append(ctx) } }
        var written = 0
        let out = [UInt8](unsafeUninitializedCapacity: maxOutput) { buf, count in
            let r = ZSTD_compressCCtx(ctx, buf.baseAddress, maxOutput, input.baseAddress, input.count, level)
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
