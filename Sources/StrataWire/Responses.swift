// Response bodies (PROTOCOL.md §7): builders for the server, parsers for clients.

/// GET's optional metadata block (flag WANT_META).
public struct MetaBlock: Equatable, Sendable {
    public var tiersPresent: UInt8
    /// 0 raw, 1 zstd, 255 not on disk.
    public var encoding: UInt8
    public var storedSize: UInt32
    public init(tiersPresent: UInt8, encoding: UInt8, storedSize: UInt32) {
        self.tiersPresent = tiersPresent; self.encoding = encoding; self.storedSize = storedSize
    }
}

/// An item as GET returns it.
public struct ItemPayload: Equatable, Sendable {
    public var value: [UInt8]
    public var flags: UInt32
    /// µs since the epoch; 0 = never.
    public var expiresAt: Int64
    public var extended: [UInt8]
    public var version: UInt64
    /// The tier that answered (1 memory, 2 disk).
    public var tier: UInt8
    public var meta: MetaBlock?
    /// Marked stale by INVALIDATE (response flag STALE).
    public var stale = false
    /// A negative entry (status NEGATIVE): `value` is the failed load's message.
    public var negative = false
    /// The node flagged the answer UNVERIFIED (§7.19): it has not caught up with the key's
    /// other replicas since it started, paused or lost contact, so a newer version may exist.
    public var unverified = false
    public init(value: [UInt8], flags: UInt32, expiresAt: Int64, extended: [UInt8], version: UInt64, tier: UInt8, meta: MetaBlock? = nil,
                stale: Bool = false, negative: Bool = false, unverified: Bool = false) {
        self.value = value; self.flags = flags; self.expiresAt = expiresAt; self.extended = extended
        self.version = version; self.tier = tier; self.meta = meta; self.stale = stale; self.negative = negative
        self.unverified = unverified
    }
}

/// META's answer (§7.10).
public struct MetaInfo: Equatable, Sendable {
    public var tiersPresent: UInt8
    public var encoding: UInt8
    public var size: UInt32
    public var storedSize: Int64
    public var expiresAt: Int64
    public var version: UInt64
    public var flags: UInt32
    public var extendedSize: UInt32
    /// 0 = not an image; else PROTOCOL.md §7.10's image format codes.
    public var imageFormat: UInt8 = 0
    public var imageWidth: UInt32 = 0
    public var imageHeight: UInt32 = 0
    /// Bit 0: has alpha; bit 1: animated.
    public var imageFlags: UInt8 = 0
    public var imageFrames: UInt16 = 0
    public init(tiersPresent: UInt8, encoding: UInt8, size: UInt32, storedSize: Int64, expiresAt: Int64,
                version: UInt64, flags: UInt32, extendedSize: UInt32, imageFormat: UInt8 = 0,
                imageWidth: UInt32 = 0, imageHeight: UInt32 = 0, imageFlags: UInt8 = 0, imageFrames: UInt16 = 0) {
        self.imageWidth = imageWidth; self.imageHeight = imageHeight; self.imageFlags = imageFlags; self.imageFrames = imageFrames
        self.tiersPresent = tiersPresent; self.encoding = encoding; self.size = size; self.storedSize = storedSize
        self.expiresAt = expiresAt; self.version = version; self.flags = flags; self.extendedSize = extendedSize
        self.imageFormat = imageFormat
    }
}

/// One MGET entry (nil in the list = not found).
public struct MGetItem: Equatable, Sendable {
    public var flags: UInt32
    public var expiresAt: Int64
    public var version: UInt64
    public var value: [UInt8]
    public init(flags: UInt32, expiresAt: Int64, version: UInt64, value: [UInt8]) {
        self.flags = flags; self.expiresAt = expiresAt; self.version = version; self.value = value
    }
}

public enum Responses {
    /// A status-only response, with an optional CAS (version) field.
    public static func status(to req: Frame, _ status: Status, cas: UInt64 = 0) -> Frame {
        var f = Frame.response(to: req, status: status)
        f.cas = cas
        return f
    }

    /// An error response carrying a message.
    public static func error(to req: Frame, _ status: Status, _ message: String) -> Frame {
        var f = Frame.response(to: req, status: status)
        f.value = messageBytes(message)
        return f
    }

    /// A message's UTF-8 bytes, at most 1024 (§6), cut where a character starts so the
    /// message stays valid UTF-8.
    public static func messageBytes(_ message: String) -> [UInt8] {
        var bytes = Array(message.utf8)
        guard bytes.count > 1024 else { return bytes }
        var end = 1024
        while end > 0 && bytes[end] & 0xC0 == 0x80 { end -= 1 } // bytes[end] continues a character
        bytes.removeSubrange(end...)
        return bytes
    }

    /// An error for a frame whose header could not be trusted (§2.2).
    public static func error(_ e: WireError) -> Frame {
        var f = Frame(magic: Wire.responseMagic, opcode: e.opcode, requestID: e.requestID)
        f.status = e.status.rawValue
        f.value = messageBytes(e.message)
        return f
    }

    public static func hello(to req: Frame, version: UInt8, authenticated: Bool, startVersion: UInt64, server: String) -> Frame {
        var f = Frame.response(to: req)
        f.extras = [version, authenticated ? 1 : 0]
        f.extras.appendBE(startVersion)
        f.value = Array(server.utf8)
        return f
    }

    /// A GET answer: OK, or NEGATIVE for a negative entry; STALE set for a stale item.
    public static func get(to req: Frame, _ item: ItemPayload) -> Frame {
        var f = Frame.response(to: req, status: item.negative ? .negative : .ok)
        if item.stale { f.responseFlags |= ResponseFlags.stale.rawValue }
        f.cas = item.version
        f.tiers = item.tier
        f.extras.appendBE(item.flags)
        f.extras.appendBE(item.expiresAt)
        f.extras.appendBE(UInt16(item.extended.count))
        f.extras.append(contentsOf: item.extended)
        if let m = item.meta {
            f.extras.append(m.tiersPresent)
            f.extras.append(m.encoding)
            f.extras.appendBE(m.storedSize)
        }
        f.value = item.value
        return f
    }

    public static func mget(to req: Frame, _ items: [MGetItem?]) -> Frame {
        var f = Frame.response(to: req)
        for item in items {
            guard let i = item else { f.value.append(0); continue }
            f.value.append(1)
            f.value.appendBE(i.flags)
            f.value.appendBE(i.expiresAt)
            f.value.appendBE(i.version)
            f.value.appendBE(UInt32(i.value.count))
            f.value.append(contentsOf: i.value)
        }
        return f
    }

    public static func counter(to req: Frame, value: UInt64, version: UInt64) -> Frame {
        var f = Frame.response(to: req)
        f.cas = version
        f.extras.appendBE(value)
        return f
    }

    public static func meta(to req: Frame, _ m: MetaInfo) -> Frame {
        var f = Frame.response(to: req)
        f.cas = m.version
        f.extras.append(m.tiersPresent)
        f.extras.append(m.encoding)
        f.extras.appendBE(m.size)
        f.extras.appendBE(m.storedSize)
        f.extras.appendBE(m.expiresAt)
        f.extras.appendBE(m.version)
        f.extras.appendBE(m.flags)
        f.extras.appendBE(m.extendedSize)
        f.extras.append(m.imageFormat)
        f.extras.appendBE(m.imageWidth)
        f.extras.appendBE(m.imageHeight)
        f.extras.append(m.imageFlags)
        f.extras.appendBE(m.imageFrames)
        return f
    }

    public static func scan(to req: Frame, keys: [[UInt8]], next: [UInt8]?) -> Frame {
        var f = Frame.response(to: req)
        f.extras.appendBE(UInt32(keys.count))
        f.key = next ?? []
        for k in keys { f.value.appendBE(UInt16(k.count)); f.value.append(contentsOf: k) }
        return f
    }

    /// IMAGE INFO: u8 format, u32 width, u32 height, u8 flags (bit 0 alpha, bit 1 animated), u16 frames.
    public static func imageInfo(to req: Frame, format: UInt8, width: UInt32, height: UInt32, flags: UInt8, frames: UInt16, version: UInt64) -> Frame {
        var f = Frame.response(to: req)
        f.cas = version
        f.extras.append(format); f.extras.appendBE(width); f.extras.appendBE(height)
        f.extras.append(flags); f.extras.appendBE(frames)
        return f
    }

    /// IMAGE VARIANT: the variant's bytes; extras u16 width, u16 height, u8 cached (1 = served
    /// from a stored variant); CAS = the original's version.
    /// IMAGE_VARIANT's answer; `stale`: the original was invalidated (response flag STALE).
    public static func imageVariant(to req: Frame, bytes: [UInt8], width: UInt16, height: UInt16, cached: Bool, version: UInt64,
                                    stale: Bool = false) -> Frame {
        var f = Frame.response(to: req)
        if stale { f.responseFlags |= ResponseFlags.stale.rawValue }
        f.cas = version
        f.extras.appendBE(width); f.extras.appendBE(height); f.extras.append(cached ? 1 : 0)
        f.value = bytes
        return f
    }

    public static func parseImageVariant(_ f: Frame) throws(WireError) -> (bytes: [UInt8], width: UInt16, height: UInt16, cached: Bool) {
        var r = ExtrasReader(f.extras, "image_variant response")
        let w = try r.u16(), h = try r.u16(), c = try r.u8()
        try r.end()
        return (f.value, w, h, c != 0)
    }

    public static func stats(to req: Frame, json: String) -> Frame {
        var f = Frame.response(to: req)
        f.value = Array(json.utf8)
        return f
    }

    // MARK: Parsers (client side)

    public static func parseHello(_ f: Frame) throws(WireError) -> (version: UInt8, authenticated: Bool, startVersion: UInt64, server: String) {
        var r = ExtrasReader(f.extras, "hello response")
        let v = try r.u8(), a = try r.u8()
        let start = try r.u64()
        return (v, a != 0, start, String(decoding: f.value, as: UTF8.self))
    }

    public static func parseGet(_ f: Frame) throws(WireError) -> ItemPayload {
        var r = ExtrasReader(f.extras, "get response")
        let flags = try r.u32()
        let expires = try r.i64()
        let extLen = Int(try r.u16())
        let ext = Array(try r.take(extLen))
        var meta: MetaBlock? = nil
        if r.at < f.extras.count {
            meta = MetaBlock(tiersPresent: try r.u8(), encoding: try r.u8(), storedSize: try r.u32())
        }
        try r.end()
        return ItemPayload(value: f.value, flags: flags, expiresAt: expires, extended: ext, version: f.cas, tier: f.tiers, meta: meta,
                           stale: f.responseFlags & ResponseFlags.stale.rawValue != 0, negative: f.statusCode == .negative,
                           unverified: f.responseFlags & ResponseFlags.unverified.rawValue != 0)
    }

    /// Adds lease information to a GET answer: the caller holds the lease (`token`), or another
    /// client is filling the key (`token` nil).
    public static func withLease(_ response: Frame, token: UInt64?) -> Frame {
        var f = response
        if let t = token {
            f.responseFlags |= ResponseFlags.lease.rawValue
            f.key = []
            f.key.appendBE(t)
        } else {
            f.responseFlags |= ResponseFlags.filling.rawValue
        }
        return f
    }

    /// What a GET answer says about the key's lease.
    public enum LeaseState: Equatable, Sendable {
        case none
        /// The caller holds the lease with this token and should fill (or refresh) the key.
        case granted(token: UInt64)
        /// Another client holds the lease.
        case filling
    }

    public static func leaseState(_ f: Frame) -> LeaseState {
        let flags = ResponseFlags(rawValue: f.responseFlags)
        if flags.contains(.lease), f.key.count == 8 {
            return .granted(token: f.key.reduce(0) { $0 << 8 | UInt64($1) })
        }
        return flags.contains(.filling) ? .filling : .none
    }

    public static func parseMGet(_ f: Frame, count: Int) throws(WireError) -> [MGetItem?] {
        var r = ExtrasReader(f.value, "mget response", part: "value")
        var out: [MGetItem?] = []
        for _ in 0..<count {
            if try r.u8() == 0 { out.append(nil); continue }
            let flags = try r.u32(), expires = try r.i64(), version = try r.u64()
            let n = Int(try r.u32())
            out.append(MGetItem(flags: flags, expiresAt: expires, version: version, value: Array(try r.take(n))))
        }
        try r.end()
        return out
    }

    public static func parseCounter(_ f: Frame) throws(WireError) -> UInt64 {
        var r = ExtrasReader(f.extras, "counter response")
        let v = try r.u64()
        try r.end()
        return v
    }

    public static func parseMeta(_ f: Frame) throws(WireError) -> MetaInfo {
        var r = ExtrasReader(f.extras, "meta response")
        let m = MetaInfo(tiersPresent: try r.u8(), encoding: try r.u8(), size: try r.u32(), storedSize: try r.i64(),
                         expiresAt: try r.i64(), version: try r.u64(), flags: try r.u32(), extendedSize: try r.u32(),
                         imageFormat: try r.u8(), imageWidth: try r.u32(), imageHeight: try r.u32(),
                         imageFlags: try r.u8(), imageFrames: try r.u16())
        try r.end()
        return m
    }

    public static func parseScan(_ f: Frame) throws(WireError) -> (keys: [[UInt8]], next: [UInt8]?) {
        var r = ExtrasReader(f.extras, "scan response")
        let n = Int(try r.u32())
        try r.end()
        var v = ExtrasReader(f.value, "scan keys", part: "value")
        var keys: [[UInt8]] = []
        for _ in 0..<n { keys.append(Array(try v.take(Int(try v.u16())))) }
        try v.end()
        return (keys, f.key.isEmpty ? nil : f.key)
    }
}
