import StrataCore

/// A log segment's header and the pure scan of a segment's bytes (no I/O: the files are read
/// by `DurabilityLog`). A segment is a file `log/<start position, 20 digits>.seg`:
///
/// ```
/// "STRATLOG" | u32 format (1) | u32 0 | u64 start position | u64 XXH64 of the 24 bytes before
/// then records (LogRecord) back to back; a record at file offset o has position start + o − 32.
/// Positions count record bytes only, so they run on across segments without a gap: a
/// segment's start is the position of its first record, the end of the one before.
/// ```
public enum LogSegment {
    public static let headerBytes = 32
    public static let magic: [UInt8] = Array("STRATLOG".utf8)
    public static let format: UInt32 = 1

    /// The header of a segment that starts at log position `start`.
    public static func header(start: UInt64) -> [UInt8] {
        var h = magic
        h.appendBE(format)
        h.appendBE(UInt32(0))
        h.appendBE(start)
        let sum = XXH64.hash(h)
        h.appendBE(sum)
        return h
    }

    /// The file name of the segment starting at `start`.
    public static func fileName(start: UInt64) -> String {
        let digits = String(start)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits + ".seg"
    }

    /// The start position a segment file name stands for; nil for any other name.
    public static func start(fromFileName name: String) -> UInt64? {
        guard name.hasSuffix(".seg"), name.count == 24 else { return nil }
        return UInt64(name.prefix(20))
    }

    /// How a scan of one segment ended.
    public enum End: Equatable, Sendable {
        /// Every byte belongs to a whole record that verifies.
        case clean
        /// The bytes stop inside a record (or end in zeros where a record should start): a
        /// write cut short by a crash. Everything before `offset` is good; truncate there.
        case tornTail(offset: Int)
        /// A whole record at `offset` does not verify or parse (damage, not a crash): nothing
        /// from there on can be trusted.
        case damaged(offset: Int, reason: String)
        /// The segment header is missing or wrong.
        case badHeader(String)
    }

    /// The records of a segment's `bytes`, which the caller expects to start at `start`, in
    /// order with their positions, and how the scan ended. `visit` is called for each record;
    /// returning false stops the scan (reported as clean up to that record).
    public static func scan(_ bytes: UnsafeRawBufferPointer, expectedStart start: UInt64,
                            _ visit: (UInt64, LogRecord) -> Bool) -> End {
        guard bytes.count >= headerBytes else {
            // A crash between creating the file and writing its header.
            return bytes.allSatisfy({ $0 == 0 }) ? .tornTail(offset: 0) : .badHeader("the segment is \(bytes.count) bytes, shorter than its header")
        }
        guard Array(bytes[0..<8]) == magic else { return .badHeader("the segment does not start with STRATLOG") }
        let head = UnsafeRawBufferPointer(rebasing: bytes[0..<24])
        guard XXH64.hash(head) == bytes.loadBE64(24) else { return .badHeader("the segment header's checksum does not match") }
        guard bytes.loadBE32(8) == format else { return .badHeader("segment format \(bytes.loadBE32(8)) is not one this build reads (1)") }
        guard bytes.loadBE64(16) == start else { return .badHeader("the segment says it starts at \(bytes.loadBE64(16)), its name says \(start)") }
        var offset = headerBytes
        while offset < bytes.count {
            let position = start + UInt64(offset - headerBytes)
            switch LogRecord.decode(bytes, offset: offset, position: position) {
            case .record(let r, let size):
                if !visit(position, r) { return .clean }
                offset += size
            case .truncated:
                return .tornTail(offset: offset)
            case .damaged(let reason):
                // Zeros from here to the end are space the file system gave a write that never
                // landed (a crash), not damage.
                if bytes[offset...].allSatisfy({ $0 == 0 }) { return .tornTail(offset: offset) }
                return .damaged(offset: offset, reason: reason)
            }
        }
        return .clean
    }
}
