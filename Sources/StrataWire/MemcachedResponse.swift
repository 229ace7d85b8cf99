/// The text protocol's answers, appended to an output buffer (no `String` per value), and its
/// expiry rule. Pure.
public enum MemcachedResponse {
    static let crlf: [UInt8] = [13, 10]

    /// `<line>\r\n`.
    public static func line(_ s: String, into out: inout [UInt8]) {
        out.append(contentsOf: s.utf8)
        out.append(contentsOf: crlf)
    }

    /// `VALUE <key> <flags> <bytes>[ <cas unique>]\r\n<data>\r\n` (`END` is the caller's).
    public static func value(key: [UInt8], flags: UInt32, data: [UInt8], cas: UInt64?, into out: inout [UInt8]) {
        key.withUnsafeBytes { k in data.withUnsafeBytes { d in value(key: k, flags: flags, data: d, cas: cas, into: &out) } }
    }

    /// The same, from bytes in place (the memory tier's record, while its lock is held).
    public static func value(key: UnsafeRawBufferPointer, flags: UInt32, data: UnsafeRawBufferPointer, cas: UInt64?, into out: inout [UInt8]) {
        out.reserveForAppending(key.count + data.count + 64)
        out.append(contentsOf: "VALUE ".utf8)
        out.append(contentsOf: key)
        out.append(0x20)
        appendDecimal(UInt64(flags), into: &out)
        out.append(0x20)
        appendDecimal(UInt64(data.count), into: &out)
        if let c = cas {
            out.append(0x20)
            appendDecimal(c, into: &out)
        }
        out.append(contentsOf: crlf)
        out.append(contentsOf: data)
        out.append(contentsOf: crlf)
    }

    public static let end: [UInt8] = Array("END\r\n".utf8)

    public static func appendDecimal(_ v: UInt64, into out: inout [UInt8]) {
        if v == 0 { out.append(0x30); return }
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var n = 0
        var x = v
        withUnsafeMutableBytes(of: &digits) { d in
            while x > 0 { d[n] = UInt8(x % 10) + 0x30; x /= 10; n += 1 }
            for i in stride(from: n - 1, through: 0, by: -1) { out.append(d[i]) }
        }
    }
}

/// memcached's exptime: 0 = never; 1…2,592,000 (30 days) = seconds from now; larger = an
/// absolute Unix time (in the past: already expired); negative = already expired.
public enum MemcachedExpiry: Equatable, Sendable {
    case never
    case expired
    /// Absolute Unix time in seconds.
    case at(unixSeconds: Int64)

    public static let relativeLimit: Int64 = 2_592_000

    public static func resolve(_ exptime: Int64, nowUnixSeconds now: Int64) -> MemcachedExpiry {
        if exptime == 0 { return .never }
        if exptime < 0 { return .expired }
        if exptime <= relativeLimit { return .at(unixSeconds: now + exptime) }
        return exptime <= now ? .expired : .at(unixSeconds: exptime)
    }
}
