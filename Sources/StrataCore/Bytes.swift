/// Little helpers over `[UInt8]` used by codecs and tests.
extension Array where Element == UInt8 {
    /// The UTF-8 bytes of `s`.
    @inlinable public init(utf8 s: String) { self = Array(s.utf8) }

    /// Lower-case hex, two digits per byte.
    public var hexString: String {
        let digits: [UInt8] = Swift.Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(count * 2)
        for b in self {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0xF)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses hex text; whitespace is ignored. Nil on any other character or an odd count.
    public init?(hex: String) {
        var out: [UInt8] = []
        var high: UInt8? = nil
        for c in hex.utf8 {
            let v: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): v = c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): v = c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): v = c - UInt8(ascii: "A") + 10
            case UInt8(ascii: " "), UInt8(ascii: "\n"), UInt8(ascii: "\t"), UInt8(ascii: "\r"): continue
            default: return nil
            }
            if let h = high { out.append(h << 4 | v); high = nil } else { high = v }
        }
        if high != nil { return nil }
        self = out
    }
}

/// Parses sizes such as `512`, `64KiB`, `256MiB`, `4GiB` (also `KB`/`MB`/`GB`/`K`/`M`/`G`,
/// all binary). Nil when malformed or negative.
public func parseByteSize(_ text: String) -> Int? {
    let units: [(String, Int)] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10),
                                  ("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10),
                                  ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10), ("B", 1)]
    var number = Substring(text)
    var multiplier = 1
    for (suffix, m) in units where text.hasSuffix(suffix) {
        number = text.dropLast(suffix.count)
        multiplier = m
        break
    }
    guard let n = Int(number), n >= 0 else { return nil }
    let (r, overflow) = n.multipliedReportingOverflow(by: multiplier)
    return overflow ? nil : r
}
