// Typed requests and responses (PROTOCOL.md §7): what each operation's extras, key and
// value mean. `Request.parse` is what a server uses; `Request.frame` (Messages+Encoding.swift)
// what a client sends.

/// The 9-byte expiry field (PROTOCOL.md §7).
public enum WireExpiry: Equatable, Sendable {
    case storeDefault
    case never
    case seconds(Int64)
    case at(unixMicros: Int64)

    func encode(into out: inout [UInt8]) {
        switch self {
        case .storeDefault: out.append(0); out.appendBE(Int64(0))
        case .never: out.append(1); out.appendBE(Int64(0))
        case .seconds(let s): out.append(2); out.appendBE(s)
        case .at(let t): out.append(3); out.appendBE(t)
        }
    }

    static func read(_ r: inout ExtrasReader) throws(WireError) -> WireExpiry {
        let kind = try r.u8()
        // The kind is checked as soon as it is read (PROTOCOL.md §2.2), before the value's bytes
        // (an outside review, px2: an unknown kind in extras cut short was MALFORMED).
        guard kind <= 3 else { throw WireError(.invalidArgument, "unknown expiry kind \(kind)") }
        let value = try r.i64()
        switch kind {
        case 0: return .storeDefault
        case 1: return .never
        case 2:
            guard value >= 1 && value <= Int64(Int32.max) + 1 else { throw WireError(.invalidArgument, "TTL \(value) s is out of range 1…2^31") }
            return .seconds(value)
        case 3:
            guard value > 0 else { throw WireError(.invalidArgument, "absolute expiry must be positive µs since the epoch") }
            return .at(unixMicros: value)
        default: throw WireError(.invalidArgument, "unknown expiry kind \(kind)")
        }
    }
}

/// Reads big-endian fields from a frame's extras (or, `part: "value"`, its value); every read
/// is bounds-checked, and errors name the part read.
struct ExtrasReader {
    let bytes: [UInt8]
    var at = 0
    let what: String
    let part: String
    init(_ bytes: [UInt8], _ what: String, part: String = "extras") { self.bytes = bytes; self.what = what; self.part = part }

    mutating func take(_ n: Int) throws(WireError) -> ArraySlice<UInt8> {
        guard at + n <= bytes.count else { throw WireError(.malformed, "\(what): \(part) too short (\(bytes.count) bytes)") }
        defer { at += n }
        return bytes[at..<at + n]
    }
    mutating func u8() throws(WireError) -> UInt8 { try take(1).first! }
    mutating func u16() throws(WireError) -> UInt16 { try take(2).reduce(0) { $0 << 8 | UInt16($1) } }
    mutating func u32() throws(WireError) -> UInt32 { try take(4).reduce(0) { $0 << 8 | UInt32($1) } }
    mutating func u64() throws(WireError) -> UInt64 { try take(8).reduce(0) { $0 << 8 | UInt64($1) } }
    mutating func i64() throws(WireError) -> Int64 { Int64(bitPattern: try u64()) }
    func end() throws(WireError) {
        guard at == bytes.count else { throw WireError(.malformed, "\(what): \(bytes.count - at) unexpected bytes at the end of the \(part)") }
    }
    var rest: [UInt8] { Array(bytes[at...]) }
}

/// SET modes; `lease` stores only while the header's CAS field (the lease token) holds the
/// key's lease, then releases it.
public enum SetModeCode: UInt8, Sendable { case set = 0, add = 1, replace = 2, cas = 3, lease = 4 }

public struct GetRequest: Equatable, Sendable {
    public var namespace: [UInt8] = []
    public var key: [UInt8]
    public var tiers: UInt8 = 0
    public var touch: WireExpiry? = nil
    public var wantMeta = false
    /// Ask for the key's lease on a miss, a stale hit, or a hit within `refreshAheadMillis`
    /// of its expiry (PROTOCOL.md §7.4.1).
    public var lease = false
    public var refreshAheadMillis: UInt32 = 0
    public init(key: [UInt8], namespace: [UInt8] = [], tiers: UInt8 = 0, touch: WireExpiry? = nil, wantMeta: Bool = false,
                lease: Bool = false, refreshAheadMillis: UInt32 = 0) {
        self.key = key; self.namespace = namespace; self.tiers = tiers; self.touch = touch; self.wantMeta = wantMeta
        self.lease = lease; self.refreshAheadMillis = refreshAheadMillis
    }
}

public struct SetRequest: Equatable, Sendable {
    public var namespace: [UInt8] = []
    public var key: [UInt8]
    public var value: [UInt8]
    public var mode: SetModeCode = .set
    /// For mode `.cas`: the version the item must have.
    public var casVersion: UInt64 = 0
    public var expiry: WireExpiry = .storeDefault
    public var flags: UInt32 = 0
    /// Caller-supplied version (0 = the node assigns one).
    public var version: UInt64 = 0
    public var extended: [UInt8] = []
    public var tiers: UInt8 = 0
    public var writeBehind = false
    /// Refuse the value if it is a PNG or WebP that does not decode (or any image whose header
    /// is bad or claims too many pixels).
    public var validateImage = false
    /// Store a negative entry: the value is the message of a failed load.
    public var negative = false
    /// Store the item already marked stale (replicating or repairing a stale item).
    public var stale = false
    /// Flag VERIFIED_ONLY: decided only on a node that has verified the key with its other
    /// replicas; else UNVERIFIED and nothing stored (PROTOCOL.md §7.5, §7.19).
    public var verifiedOnly = false
    public init(key: [UInt8], value: [UInt8], namespace: [UInt8] = []) { self.key = key; self.value = value; self.namespace = namespace }
}

/// IMAGE VARIANT's spec (PROTOCOL.md §7.16).
public struct VariantRequest: Equatable, Sendable {
    public var namespace: [UInt8] = []
    public var key: [UInt8]
    public var maxWidth: UInt16
    public var maxHeight: UInt16
    /// 0 contain, 1 cover.
    public var fit: UInt8 = 0
    /// 0 WebP, 1 PNG.
    public var format: UInt8 = 0
    /// 0–100, or 255 for lossless WebP.
    public var quality: UInt8 = 80
    public init(key: [UInt8], maxWidth: UInt16, maxHeight: UInt16, namespace: [UInt8] = []) {
        self.key = key; self.maxWidth = maxWidth; self.maxHeight = maxHeight; self.namespace = namespace
    }
}

public struct CounterRequest: Equatable, Sendable {
    public var namespace: [UInt8] = []
    public var key: [UInt8]
    public var delta: UInt64
    public var initial: UInt64? = nil
    public var expiry: WireExpiry = .storeDefault
    public var tiers: UInt8 = 0
    public var decrement = false
    /// The caller's version for the result (0: the node assigns one); not newer than the
    /// stored version → SUPERSEDED (PROTOCOL.md §7.11).
    public var version: UInt64 = 0
    /// Flag VERIFIED_ONLY: decided only on a node that has verified the key with its other
    /// replicas; else UNVERIFIED and nothing done (PROTOCOL.md §7.19).
    public var verifiedOnly = false
    public init(key: [UInt8], delta: UInt64, namespace: [UInt8] = [], decrement: Bool = false) {
        self.key = key; self.delta = delta; self.namespace = namespace; self.decrement = decrement
    }
}

/// What a STATS request with a group asks for (PROTOCOL.md §7.13.1).
public enum NamespaceStatsQuery: Equatable, Sendable {
    /// Key `namespace`: the namespace in the namespace field (empty = the default namespace).
    case one([UInt8])
    /// Key `namespaces`: the busiest namespaces, up to the node's limit, and the rest summed.
    case top

    /// The key field that names each group.
    public static let oneKey = Array("namespace".utf8)
    public static let topKey = Array("namespaces".utf8)
}

/// A request, decoded from (or encoded to) a frame.
public enum Request: Equatable, Sendable {
    case hello(minVersion: UInt8, maxVersion: UInt8, token: [UInt8])
    case ping
    case quit
    case get(GetRequest)
    case mget(namespace: [UInt8], keys: [[UInt8]], tiers: UInt8)
    case set(SetRequest)
    case delete(namespace: [UInt8], key: [UInt8], tiers: UInt8, version: UInt64?, writeBehind: Bool)
    /// `version`: the caller's version for the result (0: the node assigns one), §7.8.
    case touch(namespace: [UInt8], key: [UInt8], tiers: UInt8, expiry: WireExpiry, version: UInt64 = 0, verifiedOnly: Bool = false)
    case exists(namespace: [UInt8], key: [UInt8], tiers: UInt8)
    case counter(CounterRequest)
    case meta(namespace: [UInt8], key: [UInt8], tiers: UInt8)
    case scan(namespace: [UInt8], cursor: [UInt8], limit: UInt32)
    /// `tiers`: the tier mask (0 = both; PROTOCOL.md §7.12).
    case flush(namespace: [UInt8], all: Bool, tiers: UInt8 = 0, version: UInt64? = nil)
    case stats
    /// STATS with a group in the key field (PROTOCOL.md §7.13.1): one namespace's counters,
    /// or the busiest namespaces'.
    case namespaceStats(NamespaceStatsQuery)
    case imageInfo(namespace: [UInt8], key: [UInt8])
    case imageVariant(VariantRequest)
    /// Mark the key stale (optionally with a caller version, as a replica gets it).
    case invalidate(namespace: [UInt8], key: [UInt8], tiers: UInt8, version: UInt64?)
    /// Give back a lease without filling the key.
    case release(namespace: [UInt8], key: [UInt8], token: UInt64)
    /// Anti-entropy between nodes (§7.19): bucket digests, or the entries of some buckets.
    case syncDigest(SyncRequest)
    case syncKeys(SyncRequest)
    /// Hinted handoff between nodes (§7.19): which of these writes the answering node lacks.
    case syncCheck(SyncCheck)

    // MARK: Parsing (server side)

    /// The typed request in `f`. Throws a non-fatal error (answer it, keep the connection)
    /// for an unknown opcode, an unsupported version or bad fields.
    public static func parse(_ f: Frame) throws(WireError) -> Request {
        func fail(_ s: Status, _ m: String) -> WireError { WireError(s, m, requestID: f.requestID, opcode: f.opcode) }
        guard let op = f.op else { throw fail(.unknownOpcode, "unknown opcode 0x\(String(f.opcode, radix: 16))") }
        guard f.protocolVersion == Wire.version else {
            throw fail(.unsupportedVersion, "protocol version \(f.protocolVersion) is not spoken here (only \(Wire.version))")
        }
        let stray = f.requestFlags.subtracting(RequestFlags.allowed(for: op))
        guard stray.isEmpty else {
            throw fail(.invalidArgument, "flag bits 0x\(String(stray.rawValue, radix: 16)) do not apply to \(op.name)")
        }
        guard f.tiers <= 3 else { throw fail(.invalidArgument, "tiers must be 0–3 (bit 0 memory, bit 1 disk)") }
        let flags = f.requestFlags
        func needKey() throws(WireError) {
            if f.key.isEmpty { throw fail(.invalidArgument, "\(op.name): key is empty") }
        }
        func noExtras() throws(WireError) {
            if !f.extras.isEmpty { throw fail(.malformed, "\(op.name) takes no extras, got \(f.extras.count) bytes") }
        }
        /// DELETE and INVALIDATE: no extras, or exactly a u64 caller version.
        func optionalVersion() throws(WireError) -> UInt64? {
            guard !f.extras.isEmpty else { return nil }
            var r = ExtrasReader(f.extras, op.name)
            let v = try r.u64()
            try r.end()
            return v
        }
        do throws(WireError) {
            switch op {
            case .hello:
                var r = ExtrasReader(f.extras, "hello")
                let lo = try r.u8(), hi = try r.u8()
                try r.end()
                return .hello(minVersion: lo, maxVersion: hi, token: f.value)
            case .ping: return .ping
            case .quit: return .quit
            case .stats:
                // Extras, namespace and value are ignored; the key names a group (§7.13.1).
                if f.key.isEmpty { return .stats }
                if f.key == NamespaceStatsQuery.oneKey { return .namespaceStats(.one(f.namespace)) }
                if f.key == NamespaceStatsQuery.topKey { return .namespaceStats(.top) }
                throw fail(.invalidArgument, "unknown stats group '\(String(decoding: f.key, as: UTF8.self))' (namespace or namespaces)")
            case .get:
                try needKey()
                var touch: WireExpiry? = nil
                let lease = flags.contains(.lease)
                var refresh: UInt32 = 0
                if !f.extras.isEmpty {
                    var r = ExtrasReader(f.extras, "get")
                    if lease { refresh = try r.u32() }
                    if r.at < f.extras.count { touch = try WireExpiry.read(&r) }
                    try r.end()
                }
                return .get(GetRequest(key: f.key, namespace: f.namespace, tiers: f.tiers, touch: touch, wantMeta: flags.contains(.wantMeta),
                                       lease: lease, refreshAheadMillis: refresh))
            case .mget:
                try noExtras()
                var r = ExtrasReader(f.value, "mget keys", part: "value")
                let n = Int(try r.u16())
                guard n <= Wire.maxMGetKeys else { throw fail(.invalidArgument, "mget of \(n) keys is over \(Wire.maxMGetKeys)") }
                var keys: [[UInt8]] = []
                keys.reserveCapacity(n)
                for _ in 0..<n {
                    let len = Int(try r.u16())
                    guard len >= 1 && len <= Wire.maxKey else { throw fail(.invalidArgument, "mget key length \(len) is out of range 1…\(Wire.maxKey)") }
                    keys.append(Array(try r.take(len)))
                }
                try r.end()
                return .mget(namespace: f.namespace, keys: keys, tiers: f.tiers)
            case .set:
                try needKey()
                var r = ExtrasReader(f.extras, "set")
                guard let mode = SetModeCode(rawValue: try r.u8()) else { throw fail(.invalidArgument, "unknown set mode") }
                var s = SetRequest(key: f.key, value: f.value, namespace: f.namespace)
                s.mode = mode
                s.expiry = try WireExpiry.read(&r)
                s.flags = try r.u32()
                s.version = try r.u64()
                s.extended = r.rest
                guard s.extended.count <= Wire.maxExtended else {
                    throw fail(.tooLarge, "extended data is \(s.extended.count) bytes; the limit is \(Wire.maxExtended)")
                }
                s.casVersion = f.cas
                s.tiers = f.tiers
                s.writeBehind = flags.contains(.writeBehind)
                s.validateImage = flags.contains(.validateImage)
                s.negative = flags.contains(.negative)
                s.stale = flags.contains(.stale)
                s.verifiedOnly = flags.contains(.verifiedOnly)
                return .set(s)
            case .delete:
                try needKey()
                // Version 0 means "the node assigns one", as in SET.
                let version = try optionalVersion().flatMap { $0 == 0 ? nil : $0 }
                return .delete(namespace: f.namespace, key: f.key, tiers: f.tiers, version: version, writeBehind: flags.contains(.writeBehind))
            case .touch:
                try needKey()
                var r = ExtrasReader(f.extras, "touch")
                let e = try WireExpiry.read(&r)
                let version = r.at < f.extras.count ? try r.u64() : 0
                try r.end()
                return .touch(namespace: f.namespace, key: f.key, tiers: f.tiers, expiry: e, version: version,
                              verifiedOnly: flags.contains(.verifiedOnly))
            case .exists:
                try needKey(); try noExtras()
                return .exists(namespace: f.namespace, key: f.key, tiers: f.tiers)
            case .incr, .decr:
                try needKey()
                var r = ExtrasReader(f.extras, op.name)
                var c = CounterRequest(key: f.key, delta: try r.u64(), namespace: f.namespace, decrement: op == .decr)
                let hasInitial = try r.u8()
                guard hasInitial <= 1 else { throw fail(.invalidArgument, "has initial must be 0 or 1, not \(hasInitial)") }
                let initial = try r.u64()
                c.initial = hasInitial != 0 ? initial : nil
                c.expiry = try WireExpiry.read(&r)
                if r.at < f.extras.count { c.version = try r.u64() }
                try r.end()
                c.tiers = f.tiers
                c.verifiedOnly = flags.contains(.verifiedOnly)
                return .counter(c)
            case .meta:
                try needKey(); try noExtras()
                return .meta(namespace: f.namespace, key: f.key, tiers: f.tiers)
            case .scan:
                var r = ExtrasReader(f.extras, "scan")
                let limit = try r.u32()
                guard limit >= 1 && limit <= Wire.maxScanLimit else { throw fail(.invalidArgument, "scan limit \(limit) is out of range 1…\(Wire.maxScanLimit)") }
                try r.end()
                return .scan(namespace: f.namespace, cursor: f.key, limit: limit)
            case .flush:
                let version = try optionalVersion()
                return .flush(namespace: f.namespace, all: flags.contains(.all), tiers: f.tiers, version: version)
            case .invalidate:
                try needKey()
                let version = try optionalVersion().flatMap { $0 == 0 ? nil : $0 } // 0: the node assigns, as in SET
                return .invalidate(namespace: f.namespace, key: f.key, tiers: f.tiers, version: version)
            case .release:
                try needKey(); try noExtras()
                return .release(namespace: f.namespace, key: f.key, token: f.cas)
            case .imageInfo:
                try needKey(); try noExtras()
                return .imageInfo(namespace: f.namespace, key: f.key)
            case .imageVariant:
                try needKey()
                // Each field is checked as it is read (§2.2: a bad field beats a bad size).
                var r = ExtrasReader(f.extras, "image_variant")
                func side() throws(WireError) -> UInt16 {
                    let n = try r.u16()
                    guard n > 0 else { throw fail(.invalidArgument, "variant width and height must be at least 1") }
                    return n
                }
                func choice(_ ok: (UInt8) -> Bool) throws(WireError) -> UInt8 {
                    let c = try r.u8()
                    guard ok(c) else { throw fail(.invalidArgument, "variant fit must be 0–1, format 0–1, quality 0–100 or 255") }
                    return c
                }
                var v = VariantRequest(key: f.key, maxWidth: try side(), maxHeight: try side(), namespace: f.namespace)
                v.fit = try choice { $0 <= 1 }
                v.format = try choice { $0 <= 1 }
                v.quality = try choice { $0 <= 100 || $0 == 255 }
                try r.end()
                return .imageVariant(v)
            case .syncDigest:
                return .syncDigest(try SyncRequest.parse(f, keys: false))
            case .syncKeys:
                return .syncKeys(try SyncRequest.parse(f, keys: true))
            case .syncCheck:
                return .syncCheck(try SyncCheck.parse(f))
            }
        } catch {
            throw WireError(error.status, error.message, fatal: error.fatal, requestID: f.requestID, opcode: f.opcode)
        }
    }
}
