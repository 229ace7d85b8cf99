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

    /// Image inspection and validation under a small pixel limit.
    public static func image(_ data: [UInt8]) {
        _ = ImageSniffer.sniff(data)
        _ = try? ImageCodec.inspect(data, pixelLimit: 1 << 20)
        _ = try? ImageCodec.validate(data, pixelLimit: 1 << 20)
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
