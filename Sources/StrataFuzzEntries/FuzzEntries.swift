import StrataImage
import StrataStore
import StrataWire

/// The fuzzers' entry points (fuzz/ builds them with libFuzzer; the test suite replays the
/// saved corpus through the same functions). Each must return for any input without
/// crashing, trapping or allocating more than the limits allow.
public enum FuzzEntry {
    /// The server's view of a byte stream: frames off the front, each parsed as a request.
    public static func frames(_ data: [UInt8]) {
        let decoder = FrameDecoder(magic: Wire.requestMagic, maxBody: 1 << 20)
        var at = 0
        while at < data.count {
            let r: (frame: Frame, consumed: Int)?
            do { r = try decoder.decode(Array(data[at...])) } catch { return }
            guard let (f, used) = r, used > 0 else { return }
            if let req = try? Request.parse(f) { _ = req.frame(id: f.requestID).encoded() }
            at += used
        }
    }

    /// The memcached listener's view of a byte stream: commands (and errors) off the front as
    /// the connection takes them, a refused data block dropped, until more bytes are needed or
    /// the connection would close. Every step must consume at least one byte. Returns how many
    /// commands parsed.
    @discardableResult
    public static func memcachedText(_ data: [UInt8]) -> Int {
        let parser = MemcachedParser(maxValue: 4096, maxLine: 256, maxRetrievalLine: 1024)
        var at = 0
        var commands = 0
        while at < data.count {
            let p = data.withUnsafeBytes { parser.parse(UnsafeRawBufferPointer(rebasing: $0[at...])) }
            switch p {
            case .needMore: return commands
            case .command(_, let used):
                precondition(used > 0 && at + used <= data.count, "a memcached command consumed \(used) of \(data.count - at) bytes")
                at += used
                commands += 1
            case .error(_, let used, let swallow, let close, _):
                precondition(used > 0 && at + used <= data.count, "a memcached error consumed \(used) of \(data.count - at) bytes")
                if close { return commands }
                at += used
                at += min(swallow, data.count - at)
            }
        }
        return commands
    }

    /// Image inspection and validation under a small pixel limit.
    public static func image(_ data: [UInt8]) {
        _ = ImageSniffer.sniff(data)
        _ = try? ImageCodec.inspect(data, pixelLimit: 1 << 20)
        _ = try? ImageCodec.validate(data, pixelLimit: 1 << 20)
    }

    /// The durability log's record decoder and segment scan, on bytes read as the records of
    /// a segment starting at position 0. Every record that verifies must re-encode to exactly
    /// its bytes (the codec is a bijection on what it accepts); returns how many verified.
    @discardableResult
    public static func logRecords(_ data: [UInt8]) -> Int {
        var verified = 0
        data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                guard case .record(let r, let size) = LogRecord.decode(raw, offset: offset, position: UInt64(offset)) else { break }
                precondition(r.encoded(at: UInt64(offset)) == Array(data[offset..<(offset + size)]), "a log record did not round-trip")
                verified += 1
                offset += size
            }
        }
        let segment = LogSegment.header(start: 0) + data
        var scanned = 0
        let end = segment.withUnsafeBytes { LogSegment.scan($0, expectedStart: 0) { _, _ in scanned += 1; return true } }
        precondition(scanned == verified, "the scan and the decoder disagree")
        if case .clean = end { precondition(verified > 0 || data.isEmpty) }
        return verified
    }

    /// The disk tier's value decoding: zstd bounded by a claimed size taken from the input.
    public static func diskValue(_ data: [UInt8]) {
        guard data.count >= 2 else { return }
        let claimed = Int(data[0]) << 8 | Int(data[1])
        let body = Array(data.dropFirst(2))
        let codec = ValueCodec()
        body.withUnsafeBytes { b in
            _ = codec.decode(.zstd, b, size: claimed)
            _ = codec.decode(.raw, b, size: claimed)
        }
        _ = codec.encode(body)
    }
}
