/// memcached's meta commands (mg, ms, md, ma, mn, me): the line's flags, parsed; the base64
/// used by the `b` flag. Pure. What each flag does is the server's (MemcachedMeta in
/// StrataServer; proto-spec/MEMCACHED.md §7).

/// A meta command: its verb, key (decoded when `b` is among the flags), flags in the order
/// sent (each a letter and the token after it, possibly empty) and, for `ms`, the data block.
public struct MemcachedMeta: Sendable, Equatable {
    public enum Verb: String, Sendable, Equatable {
        case get = "mg", set = "ms", delete = "md", arithmetic = "ma", noop = "mn", debug = "me"
    }

    public var verb: Verb
    public var key: [UInt8]
    public var flags: [Flag]
    public var value: [UInt8]

    public struct Flag: Sendable, Equatable {
        public var letter: UInt8
        public var token: [UInt8]
        public init(_ letter: Character, _ token: String = "") {
            self.letter = letter.asciiValue!
            self.token = Array(token.utf8)
        }
        init(letter: UInt8, token: [UInt8]) { self.letter = letter; self.token = token }
    }

    public init(verb: Verb, key: [UInt8], flags: [Flag] = [], value: [UInt8] = []) {
        self.verb = verb; self.key = key; self.flags = flags; self.value = value
    }

    public func has(_ letter: Character) -> Bool { flags.contains { $0.letter == letter.asciiValue! } }

    /// The token of the first `letter` flag, if present.
    public func token(_ letter: Character) -> [UInt8]? { flags.first { $0.letter == letter.asciiValue! }?.token }

    /// The token of `letter` as a number: nil when absent, .invalid when not digits (with an
    /// optional '-', or a '+' as memcached's `strtol` takes) fitting 64 bits.
    public func number(_ letter: Character) -> MetaNumber {
        guard var t = token(letter) else { return .absent }
        if t.count > 1 && t[0] == 0x2B && t[1] >= 0x30 && t[1] <= 0x39 { t.removeFirst() } // "+5"
        return t.withUnsafeBytes { b in
            if let v = MemcachedParser.int64(b, 0..<t.count) { return .value(v) }
            if let u = MemcachedParser.uint64(b, 0..<t.count) { return .unsigned(u) }
            return .invalid
        }
    }
}

public enum MetaNumber: Equatable, Sendable {
    case absent, invalid
    case value(Int64)
    /// Only above Int64.max (a 64-bit delta or initial value).
    case unsigned(UInt64)

    public var uint64: UInt64? {
        switch self {
        case .value(let v): return v >= 0 ? UInt64(v) : nil
        case .unsigned(let u): return u
        default: return nil
        }
    }
}

extension MemcachedParser {
    /// The longest opaque (`O`) token, as memcached's.
    public static let maxOpaque = 32

    /// A meta line (tokens already split; `lineBytes` includes the newline). Keys follow the
    /// text protocol's rules, or with `b` are base64 of 1…250 bytes of anything.
    func parseMeta(_ verb: MemcachedMeta.Verb, _ buf: UnsafeRawBufferPointer, _ tokens: [Range<Int>], lineBytes: Int) -> MemcachedParse {
        // A refused `ms` drops its data block when its length is a number, so the value is never
        // run as commands (a value of `flush_all` after a bad key or flag would flush).
        let blockBytes: Int = {
            guard verb == .set, tokens.count >= 3, let l = Self.int64(buf, tokens[2]), l >= 0 else { return 0 }
            return Self.blockBytes(l)
        }()
        func fail(_ m: String) -> MemcachedParse { .error(m, consumed: lineBytes, swallow: blockBytes, close: false) }
        if verb == .noop { return .command(.meta(MemcachedMeta(verb: .noop, key: [])), consumed: lineBytes) }
        guard tokens.count >= 2 else { return fail("ERROR") } // no key: a wrong number of tokens, as memcached
        let flagStart = verb == .set ? 3 : 2
        guard tokens.count >= flagStart else { return fail("CLIENT_ERROR bad command line format") }
        var flags: [MemcachedMeta.Flag] = []
        var seen: UInt64 = 0 // one bit per letter (A–Z, a–z), as memcached refuses a flag sent twice
        for t in tokens.dropFirst(flagStart) {
            let letter = buf[t.lowerBound]
            guard (letter >= 0x41 && letter <= 0x5A) || (letter >= 0x61 && letter <= 0x7A) else { return fail("CLIENT_ERROR invalid flag") }
            let bit: UInt64 = 1 << (letter <= 0x5A ? UInt64(letter - 0x41) : UInt64(letter - 0x61 + 26))
            guard seen & bit == 0 else { return fail("CLIENT_ERROR duplicate flag") }
            seen |= bit
            if letter == 0x4F && t.count - 1 > Self.maxOpaque { return fail("CLIENT_ERROR opaque token too long") }
            flags.append(.init(letter: letter, token: Array(buf[(t.lowerBound + 1)..<t.upperBound])))
        }
        var key = Array(buf[tokens[1]])
        if flags.contains(where: { $0.letter == 0x62 }) { // b: the key is base64
            guard let k = Base64.decode(key), !k.isEmpty, k.count <= Self.maxKey else { return fail("CLIENT_ERROR error decoding key") }
            key = k
        } else if !Self.validKey(buf, tokens[1]) {
            return fail("CLIENT_ERROR bad command line format")
        }
        guard verb == .set else { return .command(.meta(MemcachedMeta(verb: verb, key: key, flags: flags)), consumed: lineBytes) }
        // No length to go by: the block's end cannot be known, so the connection closes.
        guard let length = Self.int64(buf, tokens[2]), length >= 0 else {
            return .error("CLIENT_ERROR bad data chunk", consumed: lineBytes, swallow: 0, close: true)
        }
        // Over the limit, an ms in any mode removes the older value (as memcached's does).
        switch dataBlock(buf, lineBytes: lineBytes, length: length, unlink: (key, true)) {
        case .answer(let p): return p
        case .ready(let data):
            return .command(.meta(MemcachedMeta(verb: .set, key: key, flags: flags, value: Array(buf[data]))), consumed: data.upperBound + 2)
        }
    }
}

/// Standard base64 (RFC 4648, with padding), for meta keys sent with `b`.
public enum Base64 {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    public static func encode(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var i = 0
        while i < bytes.count {
            let b0 = UInt32(bytes[i]), b1 = i + 1 < bytes.count ? UInt32(bytes[i + 1]) : 0, b2 = i + 2 < bytes.count ? UInt32(bytes[i + 2]) : 0
            let n = b0 << 16 | b1 << 8 | b2
            out.append(alphabet[Int(n >> 18 & 63)])
            out.append(alphabet[Int(n >> 12 & 63)])
            out.append(i + 1 < bytes.count ? alphabet[Int(n >> 6 & 63)] : 0x3D)
            out.append(i + 2 < bytes.count ? alphabet[Int(n & 63)] : 0x3D)
            i += 3
        }
        return out
    }

    /// nil unless `text` is padded base64 of whole 4-character groups.
    public static func decode(_ text: [UInt8]) -> [UInt8]? {
        guard text.count % 4 == 0 else { return nil }
        func value(_ c: UInt8) -> UInt32? {
            switch c {
            case 0x41...0x5A: return UInt32(c - 0x41)
            case 0x61...0x7A: return UInt32(c - 0x61 + 26)
            case 0x30...0x39: return UInt32(c - 0x30 + 52)
            case 0x2B: return 62
            case 0x2F: return 63
            default: return nil
            }
        }
        var out: [UInt8] = []
        var i = 0
        while i < text.count {
            let pad = (text[i + 3] == 0x3D ? 1 : 0) + (text[i + 2] == 0x3D ? 1 : 0)
            guard pad == 0 || i + 4 == text.count, pad < 2 || text[i + 3] == 0x3D else { return nil }
            guard let a = value(text[i]), let b = value(text[i + 1]) else { return nil }
            let c = pad >= 2 ? 0 : value(text[i + 2]), d = pad >= 1 ? 0 : value(text[i + 3])
            guard let c, let d else { return nil }
            let n = a << 18 | b << 12 | c << 6 | d
            out.append(UInt8(n >> 16 & 0xFF))
            if pad < 2 { out.append(UInt8(n >> 8 & 0xFF)) }
            if pad < 1 { out.append(UInt8(n & 0xFF)) }
            i += 4
        }
        return out
    }
}
