import StrataCore

/// One durable write as the durability log holds it (DESIGN.md "Durability"): everything the
/// disk tier's row needs, so the applier can fill SQLite from the log alone and a replay after
/// a crash is exact.
///
/// Layout on disk (big-endian), PROTOCOL-style so a tool in another language can read a
/// segment; see ARCHITECTURE.md "The durability log":
///
/// ```
/// u32 body length | u32 length check | u64 XXH64(body, seed: the record's log position) | body
/// body: u8 kind | u8 ns length | ns | …
///   1 put:        u16 key length | key | u64 version | i64 expiry (µs, 0 never) | u32 flags
///                 | u8 marks | u8 encoding (0 raw, 1 zstd) | u32 raw size | u16 ext length
///                 | ext | stored value bytes (the rest of the body)
///   2 delete:     u16 key length | key            (an unversioned remove: the row goes)
///   3 flush ns:   (nothing more)                  (every item of the namespace goes)
///   4 flush all:  ns length 0                     (every item goes)
/// ```
///
/// The length check is the low 32 bits of XXH64 of the four length bytes, seeded with the
/// position: a flipped length is damage, never mistaken for a write cut short by a crash (a
/// torn write leaves a prefix of the record, so its header, once whole, verifies). Both
/// checksums are seeded with the record's position in the log, so a record copied or left at
/// another position does not verify. Encoding and decoding are pure.
public enum LogRecord: Equatable, Sendable {
    case put(LogPut)
    case delete(namespace: [UInt8], key: [UInt8])
    case flushNamespace([UInt8])
    case flushAll

    /// Bytes before the body: length, length check and body checksum.
    public static let headerBytes = 16
    /// The largest body a record may claim; anything above is damage, not a record (the item
    /// limit is 32 MiB by default, configurable up to 1 GiB).
    public static let maxBodyBytes = (1 << 30) + (64 << 10)

    static let kindPut: UInt8 = 1, kindDelete: UInt8 = 2, kindFlushNamespace: UInt8 = 3, kindFlushAll: UInt8 = 4

    /// The namespace the record belongs to (empty for FLUSH ALL).
    public var namespace: [UInt8] {
        switch self {
        case .put(let p): return p.namespace
        case .delete(let ns, _), .flushNamespace(let ns): return ns
        case .flushAll: return []
        }
    }

    /// Appends the record, as it would stand at log position `position`, to `out`.
    public func encode(at position: UInt64, into out: inout [UInt8]) {
        let start = out.count
        out.append(contentsOf: [UInt8](repeating: 0, count: Self.headerBytes))
        switch self {
        case .put(let p):
            out.append(Self.kindPut)
            Self.appendNamespaceAndKey(p.namespace, p.key, into: &out)
            out.appendBE(p.version)
            out.appendBE(UInt64(bitPattern: p.expiry))
            out.appendBE(p.flags)
            out.append(p.marks)
            out.append(p.encoding)
            out.appendBE(p.rawSize)
            out.appendBE(UInt16(p.extended.count))
            out.append(contentsOf: p.extended)
            out.append(contentsOf: p.stored)
        case let .delete(ns, key):
            out.append(Self.kindDelete)
            Self.appendNamespaceAndKey(ns, key, into: &out)
        case .flushNamespace(let ns):
            out.append(Self.kindFlushNamespace)
            out.append(UInt8(ns.count))
            out.append(contentsOf: ns)
        case .flushAll:
            out.append(Self.kindFlushAll)
            out.append(0)
        }
        let bodyLength = out.count - start - Self.headerBytes
        let sum = out.withUnsafeBytes { XXH64.hash(UnsafeRawBufferPointer(rebasing: $0[(start + Self.headerBytes)...]), seed: position) }
        out.storeBE(UInt32(bodyLength), at: start)
        out.storeBE(Self.lengthCheck(UInt32(bodyLength), position: position), at: start + 4)
        out.storeBE(sum, at: start + 8)
    }

    /// The record's encoding at `position` (a convenience for tests and tools).
    public func encoded(at position: UInt64) -> [UInt8] {
        var out: [UInt8] = []
        encode(at: position, into: &out)
        return out
    }

    static func lengthCheck(_ length: UInt32, position: UInt64) -> UInt32 {
        let b: [UInt8] = [UInt8(length >> 24), UInt8((length >> 16) & 0xFF), UInt8((length >> 8) & 0xFF), UInt8(length & 0xFF)]
        return UInt32(truncatingIfNeeded: XXH64.hash(b, seed: position))
    }

    private static func appendNamespaceAndKey(_ ns: [UInt8], _ key: [UInt8], into out: inout [UInt8]) {
        out.append(UInt8(ns.count))
        out.append(contentsOf: ns)
        out.appendBE(UInt16(key.count))
        out.append(contentsOf: key)
    }

    /// What `decode` found at an offset.
    public enum Decoded: Equatable, Sendable {
        /// A whole record that verifies, and its total size (header + body).
        case record(LogRecord, size: Int)
        /// The bytes end inside the record (or its header): a torn tail if this is the log's end.
        case truncated
        /// The record is whole but does not verify or does not parse; the reason says which.
        case damaged(String)
    }

    /// Decodes the record that starts at `offset` of `bytes`, which stands at log position
    /// `position`. Never reads past `bytes.count`, never allocates from an unchecked length.
    public static func decode(_ bytes: UnsafeRawBufferPointer, offset: Int, position: UInt64) -> Decoded {
        let available = bytes.count - offset
        guard available >= headerBytes else { return .truncated }
        let rawLength = bytes.loadBE32(offset)
        guard bytes.loadBE32(offset + 4) == lengthCheck(rawLength, position: position) else {
            return .damaged("the record header's check does not match")
        }
        let length = Int(rawLength)
        guard length >= 2 && length <= maxBodyBytes else { return .damaged("record length \(length) is out of range") }
        guard available - headerBytes >= length else { return .truncated }
        let bodyStart = offset + headerBytes
        let body = UnsafeRawBufferPointer(rebasing: bytes[bodyStart..<(bodyStart + length)])
        guard XXH64.hash(body, seed: position) == bytes.loadBE64(offset + 8) else { return .damaged("checksum mismatch") }
        guard let record = parseBody(body) else { return .damaged("the body does not parse") }
        return .record(record, size: headerBytes + length)
    }

    /// The body's fields; nil when they are inconsistent (a checksum collision or a bug).
    static func parseBody(_ b: UnsafeRawBufferPointer) -> LogRecord? {
        var r = BodyReader(b)
        guard let kind = r.u8(), let nsLength = r.u8(), nsLength <= 64, let ns = r.bytes(Int(nsLength)) else { return nil }
        switch kind {
        case kindPut:
            guard let keyLength = r.u16(), let key = r.bytes(Int(keyLength)), let version = r.u64(), let expiry = r.u64(),
                  let flags = r.u32(), let marks = r.u8(), let encoding = r.u8(), encoding <= 1, let rawSize = r.u32(),
                  let extLength = r.u16(), let ext = r.bytes(Int(extLength)) else { return nil }
            let stored = r.bytes(r.remaining) ?? []
            return .put(LogPut(namespace: ns, key: key, version: version, expiry: Int64(bitPattern: expiry), flags: flags,
                               marks: marks, encoding: encoding, rawSize: rawSize, extended: ext, stored: stored))
        case kindDelete:
            guard let keyLength = r.u16(), let key = r.bytes(Int(keyLength)), r.remaining == 0 else { return nil }
            return .delete(namespace: ns, key: key)
        case kindFlushNamespace:
            return r.remaining == 0 ? .flushNamespace(ns) : nil
        case kindFlushAll:
            return r.remaining == 0 && ns.isEmpty ? .flushAll : nil
        default:
            return nil
        }
    }
}

/// A put record's fields: one item state, its value as the disk tier stores it.
public struct LogPut: Equatable, Sendable {
    public var namespace: [UInt8]
    public var key: [UInt8]
    public var version: UInt64
    /// Absolute expiry in µs since the epoch; 0 = never.
    public var expiry: Int64
    public var flags: UInt32
    /// `ItemMarks` bits (tombstone, stale, negative).
    public var marks: UInt8
    /// `ValueEncoding` raw value of `stored`.
    public var encoding: UInt8
    /// The value's size before encoding.
    public var rawSize: UInt32
    public var extended: [UInt8]
    /// The value as stored (compressed when `encoding` says so).
    public var stored: [UInt8]

    public init(namespace: [UInt8], key: [UInt8], version: UInt64, expiry: Int64, flags: UInt32, marks: UInt8,
                encoding: UInt8, rawSize: UInt32, extended: [UInt8], stored: [UInt8]) {
        self.namespace = namespace; self.key = key; self.version = version; self.expiry = expiry; self.flags = flags
        self.marks = marks; self.encoding = encoding; self.rawSize = rawSize; self.extended = extended; self.stored = stored
    }
}

/// Reads big-endian fields from a record body; every read is bounds-checked (nil past the end).
private struct BodyReader {
    let b: UnsafeRawBufferPointer
    var at = 0
    init(_ b: UnsafeRawBufferPointer) { self.b = b }
    var remaining: Int { b.count - at }
    mutating func u8() -> UInt8? {
        guard remaining >= 1 else { return nil }
        defer { at += 1 }
        return b[at]
    }
    mutating func u16() -> UInt16? {
        guard remaining >= 2 else { return nil }
        defer { at += 2 }
        return UInt16(b[at]) << 8 | UInt16(b[at + 1])
    }
    mutating func u32() -> UInt32? {
        guard remaining >= 4 else { return nil }
        defer { at += 4 }
        return b.loadBE32(at)
    }
    mutating func u64() -> UInt64? {
        guard remaining >= 8 else { return nil }
        defer { at += 8 }
        return b.loadBE64(at)
    }
    mutating func bytes(_ n: Int) -> [UInt8]? {
        guard n >= 0, remaining >= n else { return nil }
        defer { at += n }
        return Array(b[at..<(at + n)])
    }
}

extension UnsafeRawBufferPointer {
    func loadBE32(_ at: Int) -> UInt32 {
        UInt32(self[at]) << 24 | UInt32(self[at + 1]) << 16 | UInt32(self[at + 2]) << 8 | UInt32(self[at + 3])
    }
    func loadBE64(_ at: Int) -> UInt64 { UInt64(loadBE32(at)) << 32 | UInt64(loadBE32(at + 4)) }
}

extension Array where Element == UInt8 {
    mutating func appendBE(_ v: UInt16) { append(UInt8(v >> 8)); append(UInt8(v & 0xFF)) }
    mutating func appendBE(_ v: UInt32) { for s in stride(from: 24, through: 0, by: -8) { append(UInt8((v >> UInt32(s)) & 0xFF)) } }
    mutating func appendBE(_ v: UInt64) { for s in stride(from: 56, through: 0, by: -8) { append(UInt8((v >> UInt64(s)) & 0xFF)) } }
    mutating func storeBE(_ v: UInt32, at i: Int) { for k in 0..<4 { self[i + k] = UInt8((v >> UInt32(24 - 8 * k)) & 0xFF) } }
    mutating func storeBE(_ v: UInt64, at i: Int) { for k in 0..<8 { self[i + k] = UInt8((v >> UInt64(56 - 8 * k)) & 0xFF) } }
}

extension LogRecord {
    /// Bytes the record takes in the log (header + body).
    var encodedSize: Int {
        switch self {
        case .put(let p): return LogRecord.headerBytes + 1 + 1 + p.namespace.count + 2 + p.key.count + 8 + 8 + 4 + 1 + 1 + 4 + 2 + p.extended.count + p.stored.count
        case let .delete(ns, key): return LogRecord.headerBytes + 1 + 1 + ns.count + 2 + key.count
        case .flushNamespace(let ns): return LogRecord.headerBytes + 2 + ns.count
        case .flushAll: return LogRecord.headerBytes + 2
        }
    }
}
