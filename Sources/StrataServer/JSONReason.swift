import Foundation

/// Why JSONSerialization refused `bytes`: its reason, with the line and column (1-based) of
/// the character it names — "Invalid value around character 8." becomes "Invalid value around
/// character 8 (line 1, column 9)". Used for the config file and the credentials file.
public func jsonErrorReason(_ error: Error, in bytes: [UInt8]) -> String {
    let reason = ((error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String) ?? error.localizedDescription
    guard let r = reason.range(of: "character "), let n = Int(reason[r.upperBound...].prefix { $0.isNumber }), n <= bytes.count else {
        return reason
    }
    var line = 1, column = 1
    for b in bytes.prefix(n) { if b == 10 { line += 1; column = 1 } else { column += 1 } }
    let trimmed = reason.hasSuffix(".") ? String(reason.dropLast()) : reason
    return "\(trimmed) (line \(line), column \(column))"
}

/// The first key that appears twice in one object of `bytes` (already valid JSON), decoded, with
/// its line; nil when there is none. JSONSerialization keeps the last of a duplicate key
/// silently — in a credentials file `"role": "readonly", "role": "admin"` made an admin (an
/// outside review, sec4) — so files whose meaning must be unambiguous are checked with this.
public func jsonDuplicateKey(in bytes: [UInt8]) -> (key: String, line: Int)? {
    var objects: [Set<String>] = [] // the keys seen in each open object; nil entries for arrays
    var inObject: [Bool] = []
    var i = 0, line = 1
    var expectKey = false
    while i < bytes.count {
        let c = bytes[i]
        switch c {
        case UInt8(ascii: "\n"): line += 1
        case UInt8(ascii: "{"): objects.append([]); inObject.append(true); expectKey = true
        case UInt8(ascii: "["): inObject.append(false); expectKey = false
        case UInt8(ascii: "}"): objects.removeLast(); inObject.removeLast(); expectKey = false
        case UInt8(ascii: "]"): inObject.removeLast(); expectKey = false
        case UInt8(ascii: ","): expectKey = inObject.last ?? false
        case UInt8(ascii: "\""):
            let (text, end) = jsonString(bytes, from: i)
            if expectKey, !objects.isEmpty {
                if objects[objects.count - 1].contains(text) { return (text, line) }
                objects[objects.count - 1].insert(text)
            }
            expectKey = false
            i = end
            continue
        default: break
        }
        i += 1
    }
    return nil
}

/// The string starting at the quote at `start`, its escapes decoded, and the index past its
/// closing quote.
private func jsonString(_ bytes: [UInt8], from start: Int) -> (String, Int) {
    var units: [UInt16] = []
    var i = start + 1
    func hex(_ at: Int) -> UInt16? {
        guard at + 4 <= bytes.count, let v = UInt16(String(decoding: bytes[at..<at + 4], as: UTF8.self), radix: 16) else { return nil }
        return v
    }
    var raw: [UInt8] = []
    func flushRaw() { units.append(contentsOf: String(decoding: raw, as: UTF8.self).utf16); raw = [] }
    while i < bytes.count && bytes[i] != UInt8(ascii: "\"") {
        if bytes[i] == UInt8(ascii: "\\"), i + 1 < bytes.count {
            flushRaw()
            let e = bytes[i + 1]
            i += 2
            switch e {
            case UInt8(ascii: "b"): units.append(8)
            case UInt8(ascii: "f"): units.append(12)
            case UInt8(ascii: "n"): units.append(10)
            case UInt8(ascii: "r"): units.append(13)
            case UInt8(ascii: "t"): units.append(9)
            case UInt8(ascii: "u"):
                if let v = hex(i) { units.append(v); i += 4 }
            default: units.append(UInt16(e)) // \" \\ \/
            }
        } else {
            raw.append(bytes[i])
            i += 1
        }
    }
    flushRaw()
    return (String(decoding: units, as: UTF16.self), i + 1)
}
