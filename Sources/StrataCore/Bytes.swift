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

/// Parses sizes such as `512`, `64KiB`, `256MiB`, `4GiB`, `2TiB` (also `KB`/`MB`/`GB`/`TB`/`K`/
/// `M`/`G`/`T`, all binary; units in any case). Nil when malformed, negative or past Int.
public func parseByteSize(_ text: String) -> Int? {
    let units: [(String, Int)] = [("tib", 1 << 40), ("gib", 1 << 30), ("mib", 1 << 20), ("kib", 1 << 10),
                                  ("tb", 1 << 40), ("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10),
                                  ("t", 1 << 40), ("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10), ("b", 1)]
    var number = Substring(text)
    var multiplier = 1
    let lower = text.lowercased()
    for (suffix, m) in units where lower.hasSuffix(suffix) {
        number = text.dropLast(suffix.count)
        multiplier = m
        break
    }
    guard let n = Int(number), n >= 0 else { return nil }
    let (r, overflow) = n.multipliedReportingOverflow(by: multiplier)
    return overflow ? nil : r
}

/// A key for a message: its first 64 bytes as UTF-8 in single quotes, `…` when longer.
public func quotedKey(_ k: [UInt8]) -> String {
    "'" + String(decoding: k.prefix(64), as: UTF8.self) + (k.count > 64 ? "…" : "") + "'"
}

/// A namespace (or other name) for a message: its text when it is UTF-8 without control
/// characters, else `0x` and its bytes in hex — so two names that differ in bytes never read
/// the same (an outside review, px2: invalid UTF-8 became U+FFFD in FORBIDDEN messages).
public func printableName(_ bytes: [UInt8]) -> String {
    if let s = String(validating: bytes, as: UTF8.self), !s.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
        return s
    }
    return "0x" + bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
}
