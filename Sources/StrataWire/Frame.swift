/// One frame: the 32-byte header's fields and the four body parts (PROTOCOL.md §2).
///
/// A value type with the parts as separate arrays: simple to build and to test. Encoding
/// writes the header and parts into one contiguous `[UInt8]`.
public struct Frame: Sendable, Equatable {
    public var magic: UInt8
    public var protocolVersion: UInt8 = Wire.version
    /// The raw opcode; `Opcode(rawValue:)` is nil for codes this build does not know.
    public var opcode: UInt8
    public var flags: UInt8 = 0
    public var status: UInt16 = 0
    public var tiers: UInt8 = 0
    public var requestID: UInt32 = 0
    public var cas: UInt64 = 0
    /// Responses: `ResponseFlags` bits (the header's last word); requests: 0, ignored.
    public var responseFlags: UInt32 = 0
    public var extras: [UInt8] = []
    public var namespace: [UInt8] = []
    public var key: [UInt8] = []
    public var value: [UInt8] = []

    public init(magic: UInt8, opcode: UInt8, requestID: UInt32 = 0) {
        self.magic = magic
        self.opcode = opcode
        self.requestID = requestID
    }

    /// A request frame.
    public static func request(_ op: Opcode, id: UInt32) -> Frame { Frame(magic: Wire.requestMagic, opcode: op.rawValue, requestID: id) }

    /// A response to `request` (same opcode, flags and id).
    public static func response(to request: Frame, status: Status = .ok) -> Frame {
        var f = Frame(magic: Wire.responseMagic, opcode: request.opcode, requestID: request.requestID)
        f.flags = request.flags
        f.status = status.rawValue
        return f
    }

    public var isRequest: Bool { magic == Wire.requestMagic }
    public var op: Opcode? { Opcode(rawValue: opcode) }
    public var statusCode: Status { Status(rawValue: status) }
    public var requestFlags: RequestFlags { RequestFlags(rawValue: flags) }
    public var bodyLength: Int { extras.count + namespace.count + key.count + value.count }

    /// Why this frame cannot be encoded — a length past its header field (the body's 32 bits,
    /// the namespace's 8, the key's and extras' 16) — or nil. `encode` would truncate such a
    /// length and send a frame that means something else: senders check first.
    public var unencodable: String? {
        if bodyLength > Int(UInt32.max) { return "the frame's body is \(bodyLength) bytes; a frame carries at most \(UInt32.max) (its length is 32 bits)" }
        if namespace.count > Int(UInt8.max) { return "the namespace is \(namespace.count) bytes; a frame carries at most 255" }
        if key.count > Int(UInt16.max) || extras.count > Int(UInt16.max) { return "the key or extras are over 65535 bytes" }
        return nil
    }

    /// The encoded size.
    public var encodedSize: Int { Wire.headerSize + bodyLength }

    /// Appends the encoded frame to `out`. Lengths must be within the field sizes (the
    /// encoder's callers check the protocol's limits first).
    public func encode(into out: inout [UInt8]) {
        out.reserveForAppending(encodedSize)
        encodeHead(into: &out)
        out.append(contentsOf: value)
    }

    /// Appends everything but the value (header, extras, namespace, key): a sender may then
    /// send `value` from its own array instead of copying it.
    public func encodeHead(into out: inout [UInt8]) {
        out.append(magic)
        out.append(protocolVersion)
        out.append(opcode)
        out.append(flags)
        out.appendBE(status)
        out.append(tiers)
        out.append(UInt8(truncatingIfNeeded: namespace.count))
        out.appendBE(UInt16(truncatingIfNeeded: key.count))
        out.appendBE(UInt16(truncatingIfNeeded: extras.count))
        out.appendBE(UInt32(truncatingIfNeeded: bodyLength))
        out.appendBE(requestID)
        out.appendBE(cas)
        out.appendBE(responseFlags)
        out.append(contentsOf: extras)
        out.append(contentsOf: namespace)
        out.append(contentsOf: key)
    }

    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        encode(into: &out)
        return out
    }
}

extension Array where Element == UInt8 {
    @inlinable mutating func appendBE(_ v: UInt16) { append(UInt8(v >> 8)); append(UInt8(v & 0xFF)) }
    @inlinable mutating func appendBE(_ v: UInt32) {
        append(UInt8(v >> 24)); append(UInt8((v >> 16) & 0xFF)); append(UInt8((v >> 8) & 0xFF)); append(UInt8(v & 0xFF))
    }
    @inlinable mutating func appendBE(_ v: UInt64) { appendBE(UInt32(v >> 32)); appendBE(UInt32(v & 0xFFFF_FFFF)) }
    @inlinable mutating func appendBE(_ v: Int64) { appendBE(UInt64(bitPattern: v)) }
}
