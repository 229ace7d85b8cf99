/// memcached's text protocol (memcached's doc/protocol.txt; the mapping onto Strata is
/// proto-spec/MEMCACHED.md). Pure: bytes in, commands out, no I/O.

/// A storage command's verb.
public enum MemcachedStoreVerb: String, Sendable, Equatable, CaseIterable {
    case set, add, replace, append, prepend, cas
}

/// set/add/replace/append/prepend/cas with its data block.
public struct MemcachedStore: Sendable, Equatable {
    public var verb: MemcachedStoreVerb
    public var key: [UInt8]
    public var flags: UInt32
    /// As sent: 0 = no expiry, ≤ 30 days relative seconds, else absolute Unix seconds,
    /// negative = already expired (`MemcachedExpiry`).
    public var exptime: Int64
    public var value: [UInt8]
    /// The CAS unique of `cas` (nil for the other verbs).
    public var casUnique: UInt64?
    public var noreply: Bool

    public init(verb: MemcachedStoreVerb, key: [UInt8], flags: UInt32 = 0, exptime: Int64 = 0, value: [UInt8],
                casUnique: UInt64? = nil, noreply: Bool = false) {
        self.verb = verb; self.key = key; self.flags = flags; self.exptime = exptime
        self.value = value; self.casUnique = casUnique; self.noreply = noreply
    }
}

/// One text-protocol command, fully parsed and validated (keys ≤ 250 bytes, no control bytes).
public enum MemcachedCommand: Sendable, Equatable {
    /// get/gets (`cas`: gets).
    case get(keys: [[UInt8]], cas: Bool)
    /// gat/gats: fetch and give a new expiry.
    case gat(exptime: Int64, keys: [[UInt8]], cas: Bool)
    case store(MemcachedStore)
    case delete(key: [UInt8], noreply: Bool)
    case arithmetic(key: [UInt8], delta: UInt64, increment: Bool, noreply: Bool)
    case touch(key: [UInt8], exptime: Int64, noreply: Bool)
    case flushAll(delay: Int64, noreply: Bool)
    /// `stats` with its arguments (empty: the general statistics).
    case stats(args: [String])
    case version
    case verbosity(noreply: Bool)
    case quit
    /// mg, ms, md, ma, mn, me (MemcachedMeta.swift).
    case meta(MemcachedMeta)
    /// A `set` (or an `ms` in any mode: `meta`) whose length is over the value limit, refused
    /// from its line: its data block (`swallow` bytes) is dropped as it arrives, and the key's
    /// older value is removed — as memcached does, so a set that failed never leaves the
    /// value it meant to replace readable. Answered `SERVER_ERROR object too large for cache`.
    case tooLarge(key: [UInt8], swallow: Int, meta: Bool, noreply: Bool = false)

    /// Whether the command ended in `noreply`: nothing is sent for it, errors included (as memcached).
    public var noreply: Bool {
        switch self {
        case .store(let s): return s.noreply
        case .delete(_, let n), .arithmetic(_, _, _, let n), .touch(_, _, let n), .flushAll(_, let n), .verbosity(let n): return n
        case .tooLarge(_, _, _, let n): return n
        default: return false
        }
    }

    /// The name counted in the listener's statistics.
    public var name: String {
        switch self {
        case .get(_, let cas): return cas ? "gets" : "get"
        case .gat(_, _, let cas): return cas ? "gats" : "gat"
        case .store(let s): return s.verb.rawValue
        case .delete: return "delete"
        case .arithmetic(_, _, let inc, _): return inc ? "incr" : "decr"
        case .touch: return "touch"
        case .flushAll: return "flush_all"
        case .stats: return "stats"
        case .version: return "version"
        case .verbosity: return "verbosity"
        case .quit: return "quit"
        case .meta(let m): return m.verb.rawValue
        case .tooLarge(_, _, let meta, _): return meta ? "ms" : "set"
        }
    }

    /// The position of `name` in `names` (a counter's index), without making the String.
    public var nameIndex: Int {
        switch self {
        case .get(_, let cas): return cas ? 1 : 0
        case .gat(_, _, let cas): return cas ? 3 : 2
        case .store(let s):
            switch s.verb {
            case .set: return 4
            case .add: return 5
            case .replace: return 6
            case .append: return 7
            case .prepend: return 8
            case .cas: return 9
            }
        case .delete: return 10
        case .arithmetic(_, _, let inc, _): return inc ? 11 : 12
        case .touch: return 13
        case .flushAll: return 14
        case .stats: return 15
        case .version: return 16
        case .verbosity: return 17
        case .quit: return 18
        case .meta(let m):
            switch m.verb {
            case .get: return 19
            case .set: return 20
            case .delete: return 21
            case .arithmetic: return 22
            case .noop: return 23
            case .debug: return 24
            }
        case .tooLarge(_, _, let meta, _): return meta ? 20 : 4
        }
    }

    /// Every name `name` can return, in a fixed order (for counters indexed by command).
    public static let names = ["get", "gets", "gat", "gats", "set", "add", "replace", "append", "prepend", "cas",
                               "delete", "incr", "decr", "touch", "flush_all", "stats", "version", "verbosity", "quit",
                               "mg", "ms", "md", "ma", "mn", "me"]
}

/// What the parser found at the front of the input.
public enum MemcachedParse: Sendable, Equatable {
    /// No complete command yet; nothing consumed.
    case needMore
    case command(MemcachedCommand, consumed: Int)
    /// A line to answer with (`ERROR`, `CLIENT_ERROR …`, `SERVER_ERROR …`, without CRLF).
    /// `consumed` bytes are dropped, then `swallow` more as they arrive (the data block of a
    /// refused storage command); `close`: the connection cannot continue (line too long).
    /// `noreply`: the line ended in `noreply` — the error is counted, not sent, as memcached
    /// does (a proxy sharing the connection expects no answer to it).
    case error(String, consumed: Int, swallow: Int, close: Bool, noreply: Bool = false)

    /// The input bytes this parse used (0 for `needMore`).
    public var consumedBytes: Int {
        switch self {
        case .needMore: return 0
        case .command(_, let n), .error(_, let n, _, _, _): return n
        }
    }
}

/// The text-protocol parser. A short read returns `.needMore` and consumes nothing; a line is
/// refused once it passes `maxLine` bytes without a newline (retrieval lines may be
/// `maxRetrievalLine` long: many keys), and a storage command's length is checked against
/// `maxValue` before its data block is waited for, so nothing is allocated from a claimed size.
/// Cost: one scan for the newline, one pass to split the line, one copy per key and value.
public struct MemcachedParser: Sendable {
    public static let maxKey = 250
    public var maxLine: Int
    public var maxRetrievalLine: Int
    public var maxValue: Int

    public init(maxValue: Int, maxLine: Int = 2048, maxRetrievalLine: Int = 64 << 10) {
        self.maxValue = maxValue
        self.maxLine = maxLine
        self.maxRetrievalLine = maxRetrievalLine
    }

    static let badFormat = "CLIENT_ERROR bad command line format"
    /// `stats <group>` accepted (answered empty but for `reset`).
    public static let statsGroups: Set<String> = ["settings", "items", "slabs", "sizes", "conns", "reset"]

    public func parse(_ buf: UnsafeRawBufferPointer) -> MemcachedParse {
        let limit = Self.isRetrieval(buf) ? maxRetrievalLine : maxLine
        guard let nl = Self.newline(in: buf, limit: limit) else {
            if buf.count > limit { return .error("CLIENT_ERROR line too long", consumed: buf.count, swallow: 0, close: true) }
            return .needMore
        }
        let lineEnd = nl > 0 && buf[nl - 1] == 13 ? nl - 1 : nl
        let tokens = Self.split(UnsafeRawBufferPointer(rebasing: buf[0..<lineEnd]))
        let lineBytes = nl + 1
        guard let first = tokens.first else { return .error("ERROR", consumed: lineBytes, swallow: 0, close: false) }
        func line(_ r: Range<Int>) -> [UInt8] { Array(buf[r]) }
        func text(_ r: Range<Int>) -> String { String(decoding: buf[r], as: UTF8.self) }
        func done(_ c: MemcachedCommand) -> MemcachedParse { .command(c, consumed: lineBytes) }
        // `noreply`: the command's own `noreply` (memcached's handlers take the last token as
        // it before they validate the rest, and then send no error either).
        func fail(_ m: String, noreply: Bool = false) -> MemcachedParse { .error(m, consumed: lineBytes, swallow: 0, close: false, noreply: noreply) }
        let noreply = tokens.count > 1 && Self.equals(buf, tokens.last!, "noreply")
        // As memcached's handlers: a last token `noreply` silences the command's errors even
        // where it stands in an argument's place (`incr k noreply`).
        let lastIsNoreply = noreply
        let name = text(first)
        switch name {
        case "get", "gets":
            guard tokens.count >= 2 else { return fail("ERROR") }
            var keys: [[UInt8]] = []
            keys.reserveCapacity(tokens.count - 1)
            for t in tokens.dropFirst() {
                guard Self.validKey(buf, t) else { return fail(Self.badFormat) }
                keys.append(line(t))
            }
            return done(.get(keys: keys, cas: name == "gets"))
        case "gat", "gats":
            guard tokens.count >= 3 else { return fail("ERROR") }
            guard let e = Self.int64(buf, tokens[1], plus: true) else { return fail("CLIENT_ERROR invalid exptime argument") }
            var keys: [[UInt8]] = []
            for t in tokens.dropFirst(2) {
                guard Self.validKey(buf, t) else { return fail(Self.badFormat) }
                keys.append(line(t))
            }
            return done(.gat(exptime: e, keys: keys, cas: name == "gats"))
        case "set", "add", "replace", "append", "prepend", "cas":
            let verb = MemcachedStoreVerb(rawValue: name)!
            let fixed = verb == .cas ? 6 : 5
            // The wrong number of words: where its data block ends cannot be known, so nothing
            // after it can be trusted to be a command (`set k 0 0 9 junk x` then `flush_all`
            // as its value would flush): ERROR, and the connection closes.
            guard tokens.count == fixed || tokens.count == fixed + 1 else {
                return .error("ERROR", consumed: lineBytes, swallow: 0, close: true)
            }
            // A refused line whose length is a number drops its data block too: the value must
            // not be run as commands (memcached runs it; a value of `flush_all` would flush).
            let claimed = Self.int64(buf, tokens[4])
            let noreply = tokens.count == fixed + 1 && noreply
            func refuse() -> MemcachedParse {
                // No length to go by (negative, not a number, past 2^63): where the block ends
                // cannot be known, so nothing after it can be trusted to be a command: close.
                guard let l = claimed, l >= 0 else { return .error(Self.badFormat, consumed: lineBytes, swallow: 0, close: true) }
                return .error(Self.badFormat, consumed: lineBytes, swallow: Self.blockBytes(l), close: false, noreply: lastIsNoreply)
            }
            guard let length = claimed, length >= 0, Self.validKey(buf, tokens[1]),
                  let flags = Self.unsigned(buf, tokens[2]), flags <= UInt64(UInt32.max) else { return refuse() }
            guard let exptime = Self.int64(buf, tokens[3], plus: true) else { return refuse() }
            var cas: UInt64?
            if verb == .cas {
                guard let c = Self.unsigned(buf, tokens[5]) else { return refuse() }
                cas = c
            }
            let data: Range<Int>
            switch dataBlock(buf, lineBytes: lineBytes, length: length, unlink: verb == .set ? (line(tokens[1]), false) : nil, noreply: noreply) {
            case .ready(let r): data = r
            case .answer(let p): return p
            }
            let s = MemcachedStore(verb: verb, key: line(tokens[1]), flags: UInt32(flags), exptime: exptime,
                                   value: line(data), casUnique: cas, noreply: noreply)
            return .command(.store(s), consumed: data.upperBound + 2)
        case "delete":
            // delete <key> [0] [noreply]: a hold time other than 0 is refused, as by memcached;
            // no key, or more than three arguments, is not a delete command at all (ERROR).
            guard tokens.count >= 2 && tokens.count <= 4 else { return fail("ERROR") }
            let holdZero = tokens.count > 2 && Self.equals(buf, tokens[2], "0")
            let noreply = tokens.count > 2 && noreply
            let valid = tokens.count == 2 || (tokens.count == 3 && (holdZero || noreply)) || (tokens.count == 4 && holdZero && noreply)
            guard valid else { return fail("CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]", noreply: noreply) }
            guard Self.validKey(buf, tokens[1]) else { return fail(Self.badFormat, noreply: noreply) }
            return done(.delete(key: line(tokens[1]), noreply: noreply))
        case "incr", "decr":
            guard tokens.count == 3 || tokens.count == 4 else { return fail("ERROR") }
            let noreply = tokens.count == 4 && noreply
            guard Self.validKey(buf, tokens[1]) else { return fail(Self.badFormat, noreply: lastIsNoreply) }
            guard let d = Self.delta(buf, tokens[2]) else { return fail("CLIENT_ERROR invalid numeric delta argument", noreply: lastIsNoreply) }
            return done(.arithmetic(key: line(tokens[1]), delta: d, increment: name == "incr", noreply: tokens.count == 4 && noreply))
        case "touch":
            guard tokens.count == 3 || tokens.count == 4 else { return fail("ERROR") }
            let noreply = tokens.count == 4 && noreply
            guard Self.validKey(buf, tokens[1]) else { return fail(Self.badFormat, noreply: lastIsNoreply) }
            guard let e = Self.int64(buf, tokens[2], plus: true) else { return fail("CLIENT_ERROR invalid exptime argument", noreply: lastIsNoreply) }
            return done(.touch(key: line(tokens[1]), exptime: e, noreply: tokens.count == 4 && noreply))
        case "flush_all":
            guard tokens.count <= 3 else { return fail("ERROR") }
            var delay: Int64 = 0
            let args = tokens.count - 1 - (noreply ? 1 : 0)
            if args == 1 {
                guard let d = Self.int64(buf, tokens[1], plus: true), d >= 0, d <= Int64(1) << 31 else { return fail(Self.badFormat, noreply: noreply) }
                delay = d
            } else if args > 1 { return fail("ERROR") }
            return done(.flushAll(delay: delay, noreply: noreply))
        case "stats":
            let args = tokens.dropFirst().map(text)
            // The general statistics, or a group memcached has; anything else (noreply too) is ERROR.
            guard args.isEmpty || (args.count == 1 && Self.statsGroups.contains(args[0])) else { return fail("ERROR") }
            return done(.stats(args: args))
        case "version":
            // As memcached 1.6: any arguments are ignored (memccapable checks this).
            return done(.version)
        case "verbosity":
            guard tokens.count == 2 || tokens.count == 3 else { return fail("ERROR") }
            // verbosity <level> [noreply]: the level a number, as memcached's safe_strtoul.
            let levelOmitted = tokens.count == 2 && noreply // `verbosity noreply`
            guard levelOmitted || (Self.unsigned(buf, tokens[1]).map { $0 <= UInt64(UInt32.max) }) == true else { return fail(Self.badFormat, noreply: noreply) }
            return done(.verbosity(noreply: noreply))
        case "quit":
            return done(.quit)
        case "mg", "ms", "md", "ma", "mn", "me":
            return parseMeta(MemcachedMeta.Verb(rawValue: name)!, buf, tokens, lineBytes: lineBytes)
        default:
            return fail("ERROR")
        }
    }

    /// The commonest command, `get <key>\r\n` or `gets <key>\r\n` with one valid key (CRLF or
    /// a bare LF), recognised at the front of `buf` without allocating: the key's range in
    /// `buf`, whether it is `gets`, and the bytes the line takes. Nil for anything else — more
    /// keys, extra spaces, a bad key, an incomplete line — which `parse` then decides. Where it
    /// answers, `parse` gives `.command(.get(keys: [buf[key]], cas: cas), consumed: consumed)`.
    /// Cost: one pass over the line.
    public static func singleGet(_ buf: UnsafeRawBufferPointer) -> (key: Range<Int>, cas: Bool, consumed: Int)? {
        guard buf.count >= 6, buf[0] == 0x67, buf[1] == 0x65, buf[2] == 0x74 else { return nil } // "get"
        let cas = buf[3] == 0x73 // "gets"
        let start = cas ? 5 : 4
        guard buf[start - 1] == 0x20 else { return nil }
        var i = start
        let end = min(buf.count, start + maxKey + 1)
        while i < end {
            let c = buf[i]
            if c < 0x21 || c == 0x7F { break }
            i += 1
        }
        guard i > start, i - start <= maxKey, i < buf.count else { return nil }
        if buf[i] == 10 { return (start..<i, cas, i + 1) }
        guard buf[i] == 13, i + 1 < buf.count, buf[i + 1] == 10 else { return nil }
        return (start..<i, cas, i + 2)
    }

    // MARK: Bytes

    /// A storage command's data block after its line: its range once all of it (and its
    /// CRLF) is in `buf`, or what to answer now — needMore, a value over `maxValue` refused from
    /// the claimed length alone (the block is dropped as it arrives), a block not ending in CRLF.
    enum DataBlock { case ready(Range<Int>), answer(MemcachedParse) }

    /// The bytes a data block of `length` takes with its CRLF (what a refused command drops).
    static func blockBytes(_ length: Int64) -> Int {
        length > Int64(Int.max - 2) ? Int.max : Int(length) + 2
    }

    /// `unlink`: the key a set (or an ms) means to write — over the limit, it is
    /// refused as `MemcachedCommand.tooLarge`, which removes the key's older value.
    /// `noreply`: a text command's (its errors are counted, not sent).
    func dataBlock(_ buf: UnsafeRawBufferPointer, lineBytes: Int, length: Int64, unlink: (key: [UInt8], meta: Bool)? = nil,
                   noreply: Bool = false) -> DataBlock {
        guard length <= Int64(maxValue) else {
            let drop = Self.blockBytes(length)
            if let unlink { return .answer(.command(.tooLarge(key: unlink.key, swallow: drop, meta: unlink.meta, noreply: noreply), consumed: lineBytes)) }
            return .answer(.error("SERVER_ERROR object too large for cache", consumed: lineBytes, swallow: drop, close: false, noreply: noreply))
        }
        let n = Int(length)
        guard buf.count >= lineBytes + n + 2 else { return .answer(.needMore) }
        guard buf[lineBytes + n] == 13 && buf[lineBytes + n + 1] == 10 else {
            return .answer(.error("CLIENT_ERROR bad data chunk", consumed: lineBytes + n + 2, swallow: 0, close: false, noreply: noreply))
        }
        return .ready(lineBytes..<(lineBytes + n))
    }

    static func isRetrieval(_ buf: UnsafeRawBufferPointer) -> Bool {
        // "get " "gets " "gat " "gats "
        guard buf.count >= 4, buf[0] == 0x67 else { return false }
        return (buf[1] == 0x65 || buf[1] == 0x61) && buf[2] == 0x74 && (buf[3] == 0x20 || buf[3] == 0x73)
    }

    static func newline(in buf: UnsafeRawBufferPointer, limit: Int) -> Int? {
        let n = min(buf.count, limit + 1)
        guard n > 0, let base = buf.baseAddress else { return nil }
        guard let p = memchr(base, 10, n) else { return nil }
        return base.distance(to: UnsafeRawPointer(p))
    }

    /// Tokens separated by one or more spaces (as memcached: tabs are not separators).
    static func split(_ line: UnsafeRawBufferPointer) -> [Range<Int>] {
        var out: [Range<Int>] = []
        var start = -1
        for i in 0..<line.count {
            if line[i] == 0x20 {
                if start >= 0 { out.append(start..<i); start = -1 }
            } else if start < 0 { start = i }
        }
        if start >= 0 { out.append(start..<line.count) }
        return out
    }

    static func equals(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>, _ s: StaticString) -> Bool {
        guard r.count == s.utf8CodeUnitCount else { return false }
        let p = s.utf8Start
        for i in 0..<r.count where buf[r.lowerBound + i] != p[i] { return false }
        return true
    }

    /// 1…250 bytes, none a control byte (the space cannot occur: it separates tokens).
    static func validKey(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>) -> Bool {
        guard r.count >= 1 && r.count <= maxKey else { return false }
        for i in r where buf[i] < 0x21 || buf[i] == 0x7F { return false }
        return true
    }

    /// Decimal digits only, fitting in 64 bits.
    static func uint64(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>) -> UInt64? {
        guard !r.isEmpty, r.count <= 20 else { return nil }
        var v: UInt64 = 0
        for i in r {
            let c = buf[i]
            guard c >= 0x30 && c <= 0x39 else { return nil }
            let (m, o1) = v.multipliedReportingOverflow(by: 10)
            let (s, o2) = m.addingReportingOverflow(UInt64(c - 0x30))
            if o1 || o2 { return nil }
            v = s
        }
        return v
    }

    /// An incr/decr delta as memcached's `strtoull` takes it: an optional '+', then decimal
    /// digits (leading zeros allowed, any number of them), at most 2^64 − 1.
    static func delta(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>) -> UInt64? {
        var start = r.lowerBound
        if start < r.upperBound && buf[start] == 0x2B { start += 1 }
        while start < r.upperBound - 1 && buf[start] == 0x30 { start += 1 }
        return uint64(buf, start..<r.upperBound)
    }

    /// A number as memcached's `safe_strtoul` takes it (flags, a CAS unique, a verbosity
    /// level): an optional '+', then decimal digits; "-" followed only by zeros is 0.
    static func unsigned(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>) -> UInt64? {
        guard !r.isEmpty else { return nil }
        if buf[r.lowerBound] == 0x2B { return uint64(buf, (r.lowerBound + 1)..<r.upperBound) }
        if buf[r.lowerBound] == 0x2D { return uint64(buf, (r.lowerBound + 1)..<r.upperBound) == 0 ? 0 : nil }
        return uint64(buf, r)
    }

    /// An optional '-' (or, with `plus`, '+': memcached's `safe_strtol` for exptimes and a
    /// flush delay; never for a data block's length) then decimal digits, fitting in a signed
    /// 64-bit integer.
    static func int64(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>, plus: Bool = false) -> Int64? {
        guard !r.isEmpty else { return nil }
        if plus && buf[r.lowerBound] == 0x2B {
            guard r.count > 1, buf[r.lowerBound + 1] != 0x2D, buf[r.lowerBound + 1] != 0x2B else { return nil }
            return int64(buf, (r.lowerBound + 1)..<r.upperBound)
        }
        if buf[r.lowerBound] == 0x2D {
            guard let m = uint64(buf, (r.lowerBound + 1)..<r.upperBound), m <= UInt64(Int64.max) + 1 else { return nil }
            return m == UInt64(Int64.max) + 1 ? Int64.min : -Int64(m)
        }
        guard let v = uint64(buf, r), v <= UInt64(Int64.max) else { return nil }
        return Int64(v)
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
