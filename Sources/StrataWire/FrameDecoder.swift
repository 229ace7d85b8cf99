/// Incremental frame decoder (PROTOCOL.md §2.2). Pure: bytes in, frames out, no I/O.
///
/// `decode` looks at the bytes not yet consumed and returns a frame and how many bytes it
/// used, or nil when the frame is not complete yet (consuming nothing). The magic is checked
/// from the first byte, the rest of the header as soon as its 32 bytes are present, so an oversized or inconsistent frame is
/// refused before anything is allocated from its claimed lengths. Unknown opcodes and
/// protocol versions are not the decoder's business: the frame is well formed and the
/// dispatcher answers it.
public struct FrameDecoder: Sendable {
    /// Largest body accepted (extras + namespace + key + value).
    public var maxBody: Int
    /// `Wire.requestMagic` on a server, `Wire.responseMagic` on a client.
    public let magic: UInt8

    public init(magic: UInt8, maxBody: Int) {
        self.magic = magic
        self.maxBody = maxBody
    }

    /// Checks a complete header; returns the body length.
    public func checkHeader(_ h: UnsafeRawBufferPointer) throws(WireError) -> Int {
        let requestID = be32(h, 16)
        let opcode = h[2]
        guard h[0] == magic else {
            throw WireError(.malformed, "bad magic 0x\(String(h[0], radix: 16)) (expected 0x\(String(magic, radix: 16)))", fatal: true)
        }
        let nsLen = Int(h[7])
        let keyLen = Int(be16(h, 8))
        let extrasLen = Int(be16(h, 10))
        let body = Int(be32(h, 12))
        if body > maxBody {
            throw WireError(.tooLarge, "frame body of \(body) bytes is over the limit of \(maxBody)", fatal: true,
                            requestID: requestID, opcode: opcode)
        }
        if nsLen > Wire.maxNamespace {
            throw WireError(.malformed, "namespace length \(nsLen) is over \(Wire.maxNamespace)", fatal: true, requestID: requestID, opcode: opcode)
        }
        if keyLen > Wire.maxKey {
            throw WireError(.malformed, "key length \(keyLen) is over \(Wire.maxKey)", fatal: true, requestID: requestID, opcode: opcode)
        }
        if extrasLen + nsLen + keyLen > body {
            throw WireError(.malformed, "extras \(extrasLen) + namespace \(nsLen) + key \(keyLen) exceed body length \(body)",
                            fatal: true, requestID: requestID, opcode: opcode)
        }
        return body
    }

    /// One frame from the front of `bytes`, or nil if incomplete.
    public func decode(_ bytes: UnsafeRawBufferPointer) throws(WireError) -> (frame: Frame, consumed: Int)? {
        guard bytes.count >= Wire.headerSize else {
            // The magic is checked from the first byte: a client of another protocol that sends
            // a short line (memcached's `get foo`) is answered at once, not at the frame timeout.
            if let first = bytes.first, first != magic {
                throw WireError(.malformed, "bad magic 0x\(String(first, radix: 16)) (expected 0x\(String(magic, radix: 16)))", fatal: true)
            }
            return nil
        }
        let h = UnsafeRawBufferPointer(rebasing: bytes[0..<Wire.headerSize])
        let body = try checkHeader(h)
        let total = Wire.headerSize + body
        guard bytes.count >= total else { return nil }
        var f = Frame(magic: h[0], opcode: h[2], requestID: be32(h, 16))
        f.protocolVersion = h[1]
        f.flags = h[3]
        f.status = be16(h, 4)
        f.tiers = h[6]
        f.cas = be64(h, 20)
        if h[0] == Wire.responseMagic { f.responseFlags = be32(h, 28) }
        let nsLen = Int(h[7]), keyLen = Int(be16(h, 8)), extrasLen = Int(be16(h, 10))
        var at = Wire.headerSize
        f.extras = [UInt8](bytes[at..<at + extrasLen]); at += extrasLen
        f.namespace = [UInt8](bytes[at..<at + nsLen]); at += nsLen
        f.key = [UInt8](bytes[at..<at + keyLen]); at += keyLen
        f.value = [UInt8](bytes[at..<total])
        return (f, total)
    }

    /// Convenience over an array.
    public func decode(_ bytes: [UInt8]) throws(WireError) -> (frame: Frame, consumed: Int)? {
        let r: Result<(frame: Frame, consumed: Int)?, WireError> = bytes.withUnsafeBytes { b in
            do throws(WireError) { return .success(try decode(b)) } catch { return .failure(error) }
        }
        return try r.get()
    }
}

@inline(__always) func be16(_ b: UnsafeRawBufferPointer, _ i: Int) -> UInt16 { UInt16(b[i]) << 8 | UInt16(b[i + 1]) }
@inline(__always) func be32(_ b: UnsafeRawBufferPointer, _ i: Int) -> UInt32 {
    UInt32(b[i]) << 24 | UInt32(b[i + 1]) << 16 | UInt32(b[i + 2]) << 8 | UInt32(b[i + 3])
}
@inline(__always) func be64(_ b: UnsafeRawBufferPointer, _ i: Int) -> UInt64 { UInt64(be32(b, i)) << 32 | UInt64(be32(b, i + 4)) }
