import CPNG
import CWebP

// The one file that knows libpng's and libwebp's C APIs.

/// Header inspection, full-decode validation and encoding for PNG and WebP; header-only for
/// GIF and JPEG (no decoder for them is in the stack). Every decode is refused before any
/// pixel memory is allocated when the header claims more than `pixelLimit` pixels.
///
/// The work of a PNG decode is bounded by its header, not by its data: the bytes its IDAT
/// stream must inflate to (rows of a filter byte and packed pixels, from IHDR) must be at most
/// `decodeLimit`, and the stream is inflated once (zlib, 64 KiB at a time, output discarded)
/// before libpng sees it — a stream that inflates past what the header needs (a decompression
/// bomb: libpng would inflate it all) is refused as corrupt after at most 64 KiB too many.
/// So a PNG costs two inflates of at most `decodeLimit` bytes and one conversion to RGBA
/// (≈ 0.3 s of CPU at the default 128 MiB, 2 vCPU EPYC; see RELIABILITY.md). A WebP's work is
/// bounded by its pixels.
public enum ImageCodec {
    public static let defaultPixelLimit = 25_000_000
    /// Bytes a PNG's pixel data may inflate to (128 MiB: 25 MP of 8-bit RGBA fits, 25 MP of
    /// 16-bit RGBA does not).
    public static let defaultDecodeLimit = 128 << 20

    /// Format, dimensions, alpha, animation and frame count from the headers only.
    public static func inspect(_ bytes: [UInt8], pixelLimit: Int = defaultPixelLimit) throws(ImageError) -> ImageInfo {
        guard let format = ImageSniffer.sniff(bytes) else { throw ImageError(.notAnImage, "not a PNG, WebP, GIF or JPEG image") }
        // PNG's IHDR sits at a fixed place: check its claim before libpng sees the file.
        if format == .png || format == .apng, bytes.count >= 24 {
            // The first chunk must be IHDR (an Apple CgBI chunk or an IDAT there is no PNG a
            // reader takes; its bytes are no dimensions).
            guard bytes[12] == 0x49, bytes[13] == 0x48, bytes[14] == 0x44, bytes[15] == 0x52 else {
                throw ImageError(.corrupt, "PNG's first chunk is \(PNGChunks.typeName(bytes, 12)), not IHDR")
            }
            let w = Int(bytes[16]) << 24 | Int(bytes[17]) << 16 | Int(bytes[18]) << 8 | Int(bytes[19])
            let h = Int(bytes[20]) << 24 | Int(bytes[21]) << 16 | Int(bytes[22]) << 8 | Int(bytes[23])
            // (Found by fuzzing: two 32-bit sides overflow Int when multiplied.)
            let (pixels, overflow) = w.multipliedReportingOverflow(by: h)
            if overflow || pixels > pixelLimit {
                throw ImageError(.tooManyPixels, "\(format) claims \(w)×\(h) pixels; the limit is \(pixelLimit)")
            }
        }
        let info: ImageInfo
        switch format {
        case .png, .apng: info = try pngHeader(bytes, format)
        case .webpLossy, .webpLossless, .webpAnimated: info = try webpHeader(bytes)
        case .gif: info = try gifHeader(bytes)
        case .jpeg: info = try jpegHeader(bytes)
        }
        if info.width <= 0 || info.height <= 0 { throw ImageError(.corrupt, "\(format) header has no dimensions") }
        if info.pixels > pixelLimit {
            throw ImageError(.tooManyPixels, "\(format) claims \(info.width)×\(info.height) pixels; the limit is \(pixelLimit)")
        }
        return info
    }

    /// Inspects and, for PNG and WebP, fully decodes (so a truncated or corrupt file is
    /// refused); GIF and JPEG are checked for their header and trailer.
    @discardableResult
    public static func validate(_ bytes: [UInt8], pixelLimit: Int = defaultPixelLimit,
                                decodeLimit: Int = defaultDecodeLimit) throws(ImageError) -> ImageInfo {
        let info = try inspect(bytes, pixelLimit: pixelLimit)
        switch info.format {
        case .png, .apng:
            _ = try decodePNG(bytes, info, decodeLimit: decodeLimit)
            // libpng's reader stops after the image data: a file cut after it decodes. Its
            // chunks must reach IEND (bytes after it are ignored, as by other readers).
            guard try PNGChunks.scan(bytes).endsWithIEND else {
                throw ImageError(.truncated, "PNG ends before its IEND chunk: truncated")
            }
            if info.format == .apng { try PNGChunks.checkAnimation(bytes, width: info.width, height: info.height) }
        case .webpLossy, .webpLossless, .webpAnimated:
            if info.format == .webpAnimated {
                // Animated WebP: the demuxer must accept every frame (first-frame decode is the variant source).
                try checkAnimatedWebP(bytes)
            } else {
                var w: Int32 = 0, h: Int32 = 0
                guard let px = bytes.withUnsafeBufferPointer({ WebPDecodeRGBA($0.baseAddress, $0.count, &w, &h) }) else {
                    throw ImageError(.corrupt, "WebP data does not decode (truncated or corrupt)")
                }
                WebPFree(px)
            }
        case .gif:
            guard gifBlocks(bytes).trailer else { throw ImageError(.truncated, "GIF ends before its trailer (0x3B): truncated") }
        case .jpeg:
            // The end-of-image marker after the last start of scan (bytes after it are ignored;
            // an EXIF thumbnail's own marker comes before the image's scans). Entropy-coded data
            // never holds FF D9 (an FF in it is followed by 00 or a restart marker).
            var lastScan = -1, lastEnd = -1
            var i = 2
            while i + 1 < bytes.count {
                if bytes[i] == 0xFF { if bytes[i + 1] == 0xDA { lastScan = i } else if bytes[i + 1] == 0xD9 { lastEnd = i } }
                i += 1
            }
            guard lastEnd >= 0, lastEnd > lastScan else {
                throw ImageError(.truncated, "JPEG has no end-of-image marker (FFD9) after its last scan: truncated")
            }
        }
        return info
    }

    // MARK: PNG

    /// The IEND chunk every PNG ends with: length 0, "IEND", its CRC.
    static let iendChunk: [UInt8] = [0, 0, 0, 0, 0x49, 0x45, 0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82]

    private static func pngHeader(_ bytes: [UInt8], _ format: ImageFormat) throws(ImageError) -> ImageInfo {
        var image = png_image()
        image.version = png_uint_32(strata_PNG_IMAGE_VERSION)
        // The header is read from a copy without the text and ICC chunks (libpng inflates them
        // while it reads up to the image data: 1 GB of zTXt took 3 s here after the decode
        // stopped seeing them), pinned while libpng holds it.
        let header = PNGChunks.headerCopy(bytes)
        let ok = header.withUnsafeBytes { png_image_begin_read_from_memory(&image, $0.baseAddress, $0.count) }
        defer { png_image_free(&image) }
        guard ok != 0 else { throw ImageError(.corrupt, "PNG header: \(message(&image))") }
        let alpha = image.format & png_uint_32(strata_PNG_FORMAT_FLAG_ALPHA) != 0
        let frames = format == .apng ? max(1, PNGChunks.frameControls(bytes) ?? PNGChunks.animationFrames(bytes) ?? 1) : 1
        return ImageInfo(format: format, width: Int(image.width), height: Int(image.height), hasAlpha: alpha,
                         animated: format == .apng, frameCount: frames)
    }

    /// Decodes to RGBA (the first frame of an APNG), after `checkPNGWork`.
    static func decodePNG(_ original: [UInt8], _ info: ImageInfo, decodeLimit: Int) throws(ImageError) -> [UInt8] {
        try checkPNGWork(original, decodeLimit: decodeLimit)
        // libpng sees only the chunks that make the pixels: text and ICC chunks inflate on
        // read (a 1 MB file of zTXt chunks inflated to ~1 GB took 6 s of CPU), and others are
        // nothing to it. A 16-bit image without colour-space chunks is read as sRGB (libpng's
        // simplified reader takes such data as linear light and brightened mid-grey 128 to 186).
        let bytes = try PNGChunks.decodable(original)
        var image = png_image()
        image.version = png_uint_32(strata_PNG_IMAGE_VERSION)
        defer { png_image_free(&image) }
        // libpng reads the memory it was given until the image is freed: both calls run while
        // the buffer is pinned (a copy made here is otherwise released after its last use —
        // a decode read freed memory: "bad adaptive filter value" for a valid PNG).
        var pixels: [UInt8] = []
        let failure: String? = bytes.withUnsafeBytes { src in
            guard png_image_begin_read_from_memory(&image, src.baseAddress, src.count) != 0 else { return "PNG: \(message(&image))" }
            image.format = png_uint_32(strata_PNG_FORMAT_RGBA)
            pixels = [UInt8](repeating: 0, count: Int(image.width) * Int(image.height) * 4)
            let done = pixels.withUnsafeMutableBytes { png_image_finish_read(&image, nil, $0.baseAddress, 0, nil) }
            return done != 0 ? nil : "PNG does not decode (truncated or corrupt): \(message(&image))"
        }
        if let failure { throw ImageError(.corrupt, failure) }
        return pixels
    }

    /// The bytes a PNG's IDAT stream inflates to by its IHDR (each row of each pass: a filter
    /// byte and the packed pixels); nil when IHDR is missing or invalid.
    static func pngRawBytes(_ b: [UInt8]) -> Int? {
        guard b.count >= 33, b[12] == 0x49, b[13] == 0x48, b[14] == 0x44, b[15] == 0x52 else { return nil }
        let w = Int(b[16]) << 24 | Int(b[17]) << 16 | Int(b[18]) << 8 | Int(b[19])
        let h = Int(b[20]) << 24 | Int(b[21]) << 16 | Int(b[22]) << 8 | Int(b[23])
        let channels: Int
        switch b[25] { case 0, 3: channels = 1; case 2: channels = 3; case 4: channels = 2; case 6: channels = 4; default: return nil }
        let bits = channels * Int(b[24])
        guard w > 0, h > 0, bits > 0, w <= 1 << 31, h <= 1 << 31 else { return nil }
        func rows(_ pw: Int, _ ph: Int) -> Int { pw > 0 && ph > 0 ? ph * (1 + (pw * bits + 7) / 8) : 0 }
        guard b[28] == 1 else { return rows(w, h) }
        // Adam7: (x0, y0, dx, dy) of the seven passes.
        let passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
        return passes.reduce(0) { $0 + rows((w - $1.0 + $1.2 - 1) / $1.2, (h - $1.1 + $1.3 - 1) / $1.3) }
    }

    /// What decoding `bytes` costs by their headers alone, in bytes: a PNG's pixel data
    /// inflated, a WebP's RGBA pixels, 0 for GIF and JPEG (never decoded); nil when not an
    /// image or the header does not parse. Never runs libpng (cheap enough for an event loop).
    public static func declaredDecodeBytes(_ bytes: [UInt8]) -> Int? {
        switch ImageSniffer.sniff(bytes) {
        case .png?, .apng?: return pngRawBytes(bytes)
        case .webpLossy?, .webpLossless?, .webpAnimated?:
            var f = WebPBitstreamFeatures()
            let status = bytes.withUnsafeBufferPointer { WebPGetFeatures($0.baseAddress, $0.count, &f) }
            guard status == VP8_STATUS_OK else { return nil }
            return Int(f.width) * Int(f.height) * 4
        case .gif?, .jpeg?: return 0
        case nil: return nil
        }
    }

    /// Refuses a PNG whose decode would cost more than its header allows: pixel data past
    /// `decodeLimit` bytes (`tooManyPixels`), or an IDAT stream that inflates past what IHDR
    /// needs (`corrupt`; found after at most 64 KiB too many). A stream that ends early or is
    /// damaged is left to libpng, which reports it.
    static func checkPNGWork(_ bytes: [UInt8], decodeLimit: Int) throws(ImageError) {
        guard let expected = pngRawBytes(bytes) else { throw ImageError(.corrupt, "PNG has no valid IHDR") }
        if expected > decodeLimit {
            throw ImageError(.tooManyPixels, "PNG pixel data is \(expected) bytes decoded; the limit is \(decodeLimit)")
        }
        var z = z_stream()
        guard strata_inflateInit(&z) == Z_OK else { throw ImageError(.corrupt, "zlib cannot start") }
        defer { inflateEnd(&z) }
        var inflated = 0
        var ended = false, failed = false, seenIDAT = false
        var out = [UInt8](repeating: 0, count: 64 << 10)
        bytes.withUnsafeBufferPointer { src in
            out.withUnsafeMutableBufferPointer { o in
                PNGChunks.forEach(bytes) { type, data, len in
                    guard type == "IDAT" else { return !seenIDAT } // IDAT chunks are consecutive
                    seenIDAT = true
                    z.next_in = UnsafeMutablePointer(mutating: src.baseAddress! + data)
                    z.avail_in = UInt32(len)
                    while z.avail_in > 0 && !ended && !failed && inflated <= expected {
                        z.next_out = o.baseAddress
                        z.avail_out = UInt32(o.count)
                        let r = inflate(&z, Z_NO_FLUSH)
                        inflated += o.count - Int(z.avail_out)
                        if r == Z_STREAM_END { ended = true } else if r != Z_OK { failed = true }
                    }
                    return !ended && !failed && inflated <= expected
                }
            }
        }
        if inflated > expected {
            throw ImageError(.corrupt, "PNG pixel data inflates past the \(expected) bytes its header needs (a decompression bomb)")
        }
    }

    private static func message(_ image: inout png_image) -> String {
        withUnsafeBytes(of: &image.message) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    }

    /// PNG bytes for `rgba` (width × height × 4).
    public static func encodePNG(rgba: [UInt8], width: Int, height: Int) -> [UInt8]? {
        guard rgba.count == width * height * 4 else { return nil }
        var image = png_image()
        image.version = png_uint_32(strata_PNG_IMAGE_VERSION)
        image.width = png_uint_32(width)
        image.height = png_uint_32(height)
        image.format = png_uint_32(strata_PNG_FORMAT_RGBA)
        var size: png_alloc_size_t = 0
        let probe = rgba.withUnsafeBytes { png_image_write_to_memory(&image, nil, &size, 0, $0.baseAddress, 0, nil) }
        guard probe != 0, size > 0 else { return nil }
        var out = [UInt8](repeating: 0, count: Int(size))
        let ok = out.withUnsafeMutableBytes { o in rgba.withUnsafeBytes { png_image_write_to_memory(&image, o.baseAddress, &size, 0, $0.baseAddress, 0, nil) } }
        guard ok != 0 else { return nil }
        return Array(out.prefix(Int(size)))
    }

    // MARK: WebP

    private static func webpHeader(_ bytes: [UInt8]) throws(ImageError) -> ImageInfo {
        var f = WebPBitstreamFeatures()
        let status = bytes.withUnsafeBufferPointer { WebPGetFeatures($0.baseAddress, $0.count, &f) }
        guard status == VP8_STATUS_OK else {
            let why: String
            switch status {
            case VP8_STATUS_NOT_ENOUGH_DATA: why = "truncated"
            case VP8_STATUS_BITSTREAM_ERROR: why = "the bitstream is corrupt"
            case VP8_STATUS_UNSUPPORTED_FEATURE: why = "a feature libwebp does not support"
            case VP8_STATUS_INVALID_PARAM: why = "an invalid parameter"
            default: why = "libwebp status \(status.rawValue)"
            }
            throw ImageError(status == VP8_STATUS_NOT_ENOUGH_DATA ? .truncated : .corrupt, "WebP header does not parse: \(why)")
        }
        var frames = 1
        if f.has_animation != 0 { frames = try webpFrameCount(bytes) }
        let kind: ImageFormat = f.has_animation != 0 ? .webpAnimated : (f.format == 2 ? .webpLossless : .webpLossy)
        return ImageInfo(format: kind, width: Int(f.width), height: Int(f.height), hasAlpha: f.has_alpha != 0,
                         animated: f.has_animation != 0, frameCount: frames)
    }

    private static func webpFrameCount(_ bytes: [UInt8]) throws(ImageError) -> Int {
        let n: Int? = bytes.withUnsafeBufferPointer { p in
            var data = WebPData(bytes: p.baseAddress, size: p.count)
            guard let demux = WebPDemux(&data) else { return nil }
            defer { WebPDemuxDelete(demux) }
            return Int(WebPDemuxGetI(demux, WEBP_FF_FRAME_COUNT))
        }
        guard let count = n else { throw ImageError(.corrupt, "animated WebP does not demux") }
        return count
    }

    private static func checkAnimatedWebP(_ bytes: [UInt8]) throws(ImageError) {
        let ok: Bool = bytes.withUnsafeBufferPointer { p in
            var data = WebPData(bytes: p.baseAddress, size: p.count)
            guard let demux = WebPDemux(&data) else { return false }
            defer { WebPDemuxDelete(demux) }
            return WebPDemuxGetI(demux, WEBP_FF_FRAME_COUNT) > 0
        }
        if !ok { throw ImageError(.corrupt, "animated WebP does not demux (truncated or corrupt)") }
    }

    /// WebP bytes for `rgba`: lossy at `quality` (0–100), or lossless when `quality` is nil.
    public static func encodeWebP(rgba: [UInt8], width: Int, height: Int, quality: Float? = 80) -> [UInt8]? {
        guard rgba.count == width * height * 4 else { return nil }
        var out: UnsafeMutablePointer<UInt8>?
        let size = rgba.withUnsafeBufferPointer { p -> Int in
            if let q = quality { return WebPEncodeRGBA(p.baseAddress, Int32(width), Int32(height), Int32(width * 4), q, &out) }
            return WebPEncodeLosslessRGBA(p.baseAddress, Int32(width), Int32(height), Int32(width * 4), &out)
        }
        guard size > 0, let o = out else { return nil }
        defer { WebPFree(o) }
        return Array(UnsafeBufferPointer(start: o, count: size))
    }

    // MARK: GIF and JPEG (headers only)

    private static func gifHeader(_ b: [UInt8]) throws(ImageError) -> ImageInfo {
        guard b.count >= 13 else { throw ImageError(.truncated, "GIF shorter than its header") }
        let w = Int(b[6]) | Int(b[7]) << 8, h = Int(b[8]) | Int(b[9]) << 8
        let blocks = gifBlocks(b)
        return ImageInfo(format: .gif, width: w, height: h, hasAlpha: blocks.alpha, animated: blocks.frames > 1,
                         frameCount: max(1, blocks.frames))
    }

    /// Walks a GIF's blocks: image descriptors (0x2C) counted, colour tables, extensions and
    /// data sub-blocks skipped, until the trailer (0x3B; `trailer` true — bytes after it are
    /// ignored), the end of the bytes or a byte that starts no block.
    static func gifBlocks(_ b: [UInt8]) -> (frames: Int, alpha: Bool, trailer: Bool) {
        guard b.count >= 13 else { return (0, false, false) }
        var at = 13
        if b[10] & 0x80 != 0 { at += 3 << (Int(b[10] & 7) + 1) }
        var frames = 0
        var alpha = false
        // False when the sub-blocks run past the end.
        func skipSubBlocks(_ i: inout Int) -> Bool {
            while i < b.count { let n = Int(b[i]); i += 1; if n == 0 { return true }; i += n }
            return false
        }
        while at < b.count {
            switch b[at] {
            case 0x21: // extension
                if at + 1 < b.count && b[at + 1] == 0xF9 && at + 3 < b.count && b[at + 3] & 1 != 0 { alpha = true }
                at += 2
                guard skipSubBlocks(&at) else { return (frames, alpha, false) }
            case 0x2C: // image descriptor
                frames += 1
                guard at + 10 <= b.count else { return (frames, alpha, false) }
                let packed = b[at + 9]
                at += 10
                if packed & 0x80 != 0 { at += 3 << (Int(packed & 7) + 1) }
                at += 1 // LZW minimum code size
                guard skipSubBlocks(&at) else { return (frames, alpha, false) }
            case 0x3B:
                return (frames, alpha, true)
            default:
                return (frames, alpha, false)
            }
        }
        return (frames, alpha, false)
    }

    private static func jpegHeader(_ b: [UInt8]) throws(ImageError) -> ImageInfo {
        var at = 2
        while at + 4 <= b.count {
            guard b[at] == 0xFF else { throw ImageError(.corrupt, "JPEG marker expected at byte \(at)") }
            let marker = b[at + 1]
            if marker == 0xD8 || (marker >= 0xD0 && marker <= 0xD7) || marker == 0x01 || marker == 0xFF { at += 1; continue }
            let len = Int(b[at + 2]) << 8 | Int(b[at + 3])
            // SOF0–SOF15 except DHT (C4), JPG (C8), DAC (CC) carry the dimensions.
            if marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC {
                guard at + 9 <= b.count else { break }
                let h = Int(b[at + 5]) << 8 | Int(b[at + 6]), w = Int(b[at + 7]) << 8 | Int(b[at + 8])
                return ImageInfo(format: .jpeg, width: w, height: h, hasAlpha: false, animated: false, frameCount: 1)
            }
            at += 2 + len
        }
        throw ImageError(.truncated, "JPEG ends before its frame header")
    }
}

// MARK: Variants

/// How to derive a resized variant. Its canonical text (`w=…,h=…,fit=…,fmt=…,q=…`) is part of
/// the variant's key, so equal specs share one stored variant (SDWebImage's transformer keys).
public struct VariantSpec: Sendable, Equatable {
    public enum Fit: String, Sendable { case contain, cover }
    public enum Format: String, Sendable { case webp, png }
    public var maxWidth: Int
    public var maxHeight: Int
    public var fit: Fit = .contain
    public var format: Format = .webp
    /// WebP quality 0–100; nil = lossless (ignored for PNG).
    public var quality: Int? = 80
    public init(maxWidth: Int, maxHeight: Int, fit: Fit = .contain, format: Format = .webp, quality: Int? = 80) {
        self.maxWidth = maxWidth; self.maxHeight = maxHeight; self.fit = fit; self.format = format; self.quality = quality
    }
    /// The same box no larger than a `width` × `height` image: the variant made is the same
    /// (images are never enlarged, and `cover` fills a box larger than the image on one side
    /// by cropping only the other), and so is its stored copy.
    public func clamped(width: Int, height: Int) -> VariantSpec {
        var s = self
        s.maxWidth = min(maxWidth, max(1, width))
        s.maxHeight = min(maxHeight, max(1, height))
        return s
    }

    public var canonical: String {
        "w=\(maxWidth),h=\(maxHeight),fit=\(fit.rawValue),fmt=\(format.rawValue)"
            + (format == .webp ? ",q=\(quality.map(String.init) ?? "lossless")" : "")
    }
}

extension ImageCodec {
    /// A resized variant of a PNG or WebP (the first frame of an animation): `contain` keeps
    /// the aspect ratio inside the box, `cover` fills the box and crops the centre; images are
    /// never enlarged (a box larger than the image is the image's size: `clamped`). Decoding
    /// is refused past `pixelLimit`.
    public static func variant(_ bytes: [UInt8], _ requested: VariantSpec, pixelLimit: Int = defaultPixelLimit,
                               decodeLimit: Int = defaultDecodeLimit) throws(ImageError) -> (bytes: [UInt8], width: Int, height: Int) {
        guard requested.maxWidth > 0, requested.maxHeight > 0 else {
            throw ImageError(.corrupt, "variant box \(requested.maxWidth)×\(requested.maxHeight) is empty")
        }
        let info = try inspect(bytes, pixelLimit: pixelLimit)
        let spec = requested.clamped(width: info.width, height: info.height)
        let rgba = try decodeRGBA(bytes, info, decodeLimit: decodeLimit)
        // The import below reads width × height pixels: never more than were decoded.
        guard rgba.count == info.width * info.height * 4 else {
            throw ImageError(.corrupt, "decoded \(rgba.count / 4) pixels for a \(info.width)×\(info.height) image")
        }
        let w = Double(info.width), h = Double(info.height)
        let bw = Double(spec.maxWidth), bh = Double(spec.maxHeight)
        var cropX = 0, cropY = 0, cropW = info.width, cropH = info.height
        var scale: Double
        switch spec.fit {
        case .contain:
            scale = min(1, min(bw / w, bh / h))
        case .cover:
            scale = min(1, max(bw / w, bh / h))
            cropW = min(info.width, Int((bw / scale).rounded()))
            cropH = min(info.height, Int((bh / scale).rounded()))
            cropX = (info.width - cropW) / 2
            cropY = (info.height - cropH) / 2
        }
        let tw = max(1, Int((Double(cropW) * scale).rounded())), th = max(1, Int((Double(cropH) * scale).rounded()))
        var pic = WebPPicture()
        guard WebPPictureInit(&pic) != 0 else { throw ImageError(.corrupt, "libwebp version mismatch") }
        defer { WebPPictureFree(&pic) }
        pic.use_argb = 1
        pic.width = Int32(info.width)
        pic.height = Int32(info.height)
        let imported = rgba.withUnsafeBufferPointer { WebPPictureImportRGBA(&pic, $0.baseAddress, Int32(info.width * 4)) }
        guard imported != 0 else { throw ImageError(.corrupt, "cannot import pixels") }
        if cropW != info.width || cropH != info.height {
            guard WebPPictureCrop(&pic, Int32(cropX), Int32(cropY), Int32(cropW), Int32(cropH)) != 0 else {
                throw ImageError(.corrupt, "cannot crop")
            }
        }
        if tw != cropW || th != cropH {
            guard WebPPictureRescale(&pic, Int32(tw), Int32(th)) != 0 else { throw ImageError(.corrupt, "cannot rescale") }
        }
        switch spec.format {
        case .webp:
            var config = WebPConfig()
            guard WebPConfigInit(&config) != 0 else { throw ImageError(.corrupt, "libwebp version mismatch") }
            if let q = spec.quality { config.quality = Float(max(0, min(100, q))) } else { config.lossless = 1 }
            var writer = WebPMemoryWriter()
            WebPMemoryWriterInit(&writer)
            defer { WebPMemoryWriterClear(&writer) }
            pic.writer = WebPMemoryWrite
            let ok = withUnsafeMutablePointer(to: &writer) { wp -> Int32 in
                pic.custom_ptr = UnsafeMutableRawPointer(wp)
                return WebPEncode(&config, &pic)
            }
            guard ok != 0, let mem = writer.mem else { throw ImageError(.corrupt, "WebP encoding failed") }
            return (Array(UnsafeBufferPointer(start: mem, count: writer.size)), tw, th)
        case .png:
            // The picture holds ARGB words; PNG wants RGBA bytes.
            var out = [UInt8](repeating: 0, count: tw * th * 4)
            for y in 0..<th {
                for x in 0..<tw {
                    let v = pic.argb[y * Int(pic.argb_stride) + x]
                    let o = (y * tw + x) * 4
                    out[o] = UInt8((v >> 16) & 0xFF); out[o + 1] = UInt8((v >> 8) & 0xFF)
                    out[o + 2] = UInt8(v & 0xFF); out[o + 3] = UInt8(v >> 24)
                }
            }
            guard let png = encodePNG(rgba: out, width: tw, height: th) else { throw ImageError(.corrupt, "PNG encoding failed") }
            return (png, tw, th)
        }
    }

    /// RGBA pixels of a PNG (first frame) or a WebP (first frame).
    static func decodeRGBA(_ bytes: [UInt8], _ info: ImageInfo, decodeLimit: Int = defaultDecodeLimit) throws(ImageError) -> [UInt8] {
        switch info.format {
        case .png, .apng:
            return try decodePNG(bytes, info, decodeLimit: decodeLimit)
        case .webpLossy, .webpLossless:
            return try decodeWebPFrame(bytes)
        case .webpAnimated:
            // The first frame is a rectangle of the canvas (libwebp's encoder crops frames to
            // what changed: a sticker's first frame is often smaller than the canvas): it is
            // placed at its offset on a transparent canvas, clipped to it.
            let frame: (bytes: [UInt8], x: Int, y: Int)? = bytes.withUnsafeBufferPointer { p in
                var data = WebPData(bytes: p.baseAddress, size: p.count)
                guard let demux = WebPDemux(&data) else { return nil }
                defer { WebPDemuxDelete(demux) }
                var iter = WebPIterator()
                guard WebPDemuxGetFrame(demux, 1, &iter) != 0 else { return nil }
                defer { WebPDemuxReleaseIterator(&iter) }
                return (Array(UnsafeBufferPointer(start: iter.fragment.bytes, count: iter.fragment.size)), Int(iter.x_offset), Int(iter.y_offset))
            }
            guard let f = frame else { throw ImageError(.corrupt, "animated WebP has no first frame") }
            let (px, fw, fh) = try decodeWebPFrameSized(f.bytes)
            if f.x == 0 && f.y == 0 && fw == info.width && fh == info.height { return px }
            var canvas = [UInt8](repeating: 0, count: info.width * info.height * 4)
            let w = max(0, min(fw, info.width - f.x)), h = max(0, min(fh, info.height - f.y))
            if w > 0 {
                for row in 0..<h {
                    let src = row * fw * 4, dst = ((f.y + row) * info.width + f.x) * 4
                    canvas.replaceSubrange(dst..<dst + w * 4, with: px[src..<src + w * 4])
                }
            }
            return canvas
        case .gif, .jpeg:
            throw ImageError(.notAnImage, "\(info.format) cannot be resized: variants are made of PNG and WebP images only")
        }
    }

    private static func decodeWebPFrame(_ bytes: [UInt8]) throws(ImageError) -> [UInt8] {
        try decodeWebPFrameSized(bytes).pixels
    }

    /// RGBA pixels of one WebP bitstream and the size they were decoded at.
    private static func decodeWebPFrameSized(_ bytes: [UInt8]) throws(ImageError) -> (pixels: [UInt8], width: Int, height: Int) {
        var w: Int32 = 0, h: Int32 = 0
        guard let px = bytes.withUnsafeBufferPointer({ WebPDecodeRGBA($0.baseAddress, $0.count, &w, &h) }) else {
            throw ImageError(.corrupt, "WebP data does not decode (truncated or corrupt)")
        }
        defer { WebPFree(px) }
        return (Array(UnsafeBufferPointer(start: px, count: Int(w) * Int(h) * 4)), Int(w), Int(h))
    }
}

// MARK: PNG chunks

extension PNGChunks {
    /// A chunk type for messages: its four letters, or hex when they are not letters.
    static func typeName(_ b: [UInt8], _ at: Int) -> String {
        let t = b[at..<at + 4]
        return t.allSatisfy({ ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) }) ? String(decoding: t, as: UTF8.self)
            : "0x" + t.map { String($0, radix: 16).leftPadded(2) }.joined()
    }

    /// Every chunk up to IEND (or the end of the bytes), each length and CRC checked:
    /// `chunks` holds (type, start of the chunk's length field, data length). `endsWithIEND`
    /// is false when the bytes end before an IEND chunk (what follows IEND is ignored).
    static func scan(_ b: [UInt8]) throws(ImageError) -> (chunks: [(type: String, at: Int, length: Int)], endsWithIEND: Bool) {
        var chunks: [(type: String, at: Int, length: Int)] = []
        var at = 8
        while at + 12 <= b.count {
            let len = Int(b[at]) << 24 | Int(b[at + 1]) << 16 | Int(b[at + 2]) << 8 | Int(b[at + 3])
            let type = typeName(b, at + 4)
            guard len <= b.count - at - 12 else { throw ImageError(.truncated, "PNG chunk \(type) ends past the file: truncated") }
            let stored = UInt32(b[at + 8 + len]) << 24 | UInt32(b[at + 9 + len]) << 16 | UInt32(b[at + 10 + len]) << 8 | UInt32(b[at + 11 + len])
            let crc = b.withUnsafeBufferPointer { p in UInt32(truncatingIfNeeded: crc32(0, p.baseAddress! + at + 4, uInt(len + 4))) }
            guard crc == stored else { throw ImageError(.corrupt, "PNG chunk \(type) at byte \(at) has a bad CRC") }
            chunks.append((type, at, len))
            if type == "IEND" { return (chunks, true) }
            at += 12 + len
        }
        return (chunks, false)
    }

    /// The chunks libpng needs for the pixels: IHDR, PLTE, tRNS, the colour-space chunks gAMA,
    /// cHRM, sRGB, the image data, IEND (added when missing). Without gAMA, sRGB or iCCP a
    /// 16-bit image gets an sRGB chunk (what other readers assume).
    static func decodable(_ b: [UInt8]) throws(ImageError) -> [UInt8] {
        let (chunks, _) = try scan(b)
        guard let first = chunks.first, first.type == "IHDR", first.length >= 13 else { throw ImageError(.corrupt, "PNG has no valid IHDR") }
        let keep: Set<String> = ["IHDR", "PLTE", "tRNS", "gAMA", "cHRM", "sRGB", "IDAT"]
        let sixteenBit = b[first.at + 8 + 8] == 16
        let colourSpace = chunks.contains { $0.type == "gAMA" || $0.type == "sRGB" || $0.type == "iCCP" }
        var out = Array(b[0..<8])
        out.reserveCapacity(b.count)
        for c in chunks where keep.contains(c.type) {
            out += b[c.at..<c.at + 12 + c.length]
            if c.type == "IHDR" && sixteenBit && !colourSpace {
                // sRGB, rendering intent 0 (perceptual), with its CRC.
                out += [0, 0, 0, 1, 0x73, 0x52, 0x47, 0x42, 0, 0xAE, 0xCE, 0x1C, 0xE9]
            }
        }
        out += ImageCodec.iendChunk
        return out
    }

    /// What libpng needs to read a PNG's header: the signature, the chunks before the image data
    /// that `decodable` keeps, then everything from the first IDAT on. Lenient (no CRC check,
    /// stops at a chunk that runs past the end), as a header read is.
    static func headerCopy(_ b: [UInt8]) -> [UInt8] {
        let keep: Set<String> = ["IHDR", "PLTE", "tRNS", "gAMA", "cHRM", "sRGB"]
        guard b.count >= 8 else { return b }
        var out = Array(b[0..<8])
        var at = 8
        while at + 8 <= b.count {
            let len = Int(b[at]) << 24 | Int(b[at + 1]) << 16 | Int(b[at + 2]) << 8 | Int(b[at + 3])
            // The image data, or a chunk cut by the end of the bytes: the rest as it is.
            if typeName(b, at + 4) == "IDAT" || len > b.count - at - 12 { break }
            if keep.contains(typeName(b, at + 4)) { out += b[at..<at + 12 + len] }
            at += 12 + len
        }
        if at < b.count { out += b[at...] }
        return out
    }

    /// The number of fcTL chunks (an APNG's frames), nil when there are none.
    static func frameControls(_ b: [UInt8]) -> Int? {
        var n = 0
        forEach(b) { type, _, _ in
            if type == "fcTL" { n += 1 }
            return type != "IEND"
        }
        return n > 0 ? n : nil
    }

    /// An APNG's structure (the APNG specification): acTL before the image data, its frame
    /// count equal to the fcTL chunks; fcTL and fdAT sequence numbers 0, 1, 2, … in file
    /// order; every frame non-empty, inside the canvas, and with image data (IDAT for a frame
    /// whose fcTL precedes it, fdAT chunks otherwise); an fcTL before IDAT covers the canvas.
    static func checkAnimation(_ b: [UInt8], width: Int, height: Int) throws(ImageError) {
        let (chunks, _) = try scan(b)
        func u32(_ i: Int) -> Int { Int(b[i]) << 24 | Int(b[i + 1]) << 16 | Int(b[i + 2]) << 8 | Int(b[i + 3]) }
        var declared: Int?, frames = 0, sequence = 0, seenIDAT = false
        var frameHasData = true
        for c in chunks {
            let d = c.at + 8
            switch c.type {
            case "acTL":
                guard !seenIDAT, c.length == 8 else { throw ImageError(.corrupt, "APNG acTL is misplaced or the wrong size") }
                declared = u32(d)
            case "fcTL":
                guard c.length == 26 else { throw ImageError(.corrupt, "APNG fcTL is \(c.length) bytes, not 26") }
                guard frameHasData else { throw ImageError(.corrupt, "APNG frame \(frames - 1) has no image data") }
                guard u32(d) == sequence else { throw ImageError(.corrupt, "APNG sequence number \(u32(d)) where \(sequence) was due") }
                sequence += 1
                let w = u32(d + 4), h = u32(d + 8), x = u32(d + 12), y = u32(d + 16)
                guard w > 0, h > 0, x + w <= width, y + h <= height else {
                    throw ImageError(.corrupt, "APNG frame \(frames) is \(w)×\(h) at (\(x), \(y)): empty or outside the \(width)×\(height) canvas")
                }
                if !seenIDAT && (x != 0 || y != 0 || w != width || h != height) {
                    throw ImageError(.corrupt, "APNG's first frame is the default image and must cover the canvas")
                }
                frames += 1
                frameHasData = false
            case "IDAT":
                if frames > 0 { frameHasData = true }
                seenIDAT = true
            case "fdAT":
                guard c.length >= 4, u32(d) == sequence else { throw ImageError(.corrupt, "APNG fdAT sequence number out of order (\(sequence) was due)") }
                guard seenIDAT, frames > 0 else { throw ImageError(.corrupt, "APNG fdAT before the image data or any fcTL") }
                sequence += 1
                frameHasData = true
            default:
                break
            }
        }
        guard let n = declared else { throw ImageError(.corrupt, "APNG has no acTL") }
        guard frameHasData else { throw ImageError(.corrupt, "APNG frame \(frames - 1) has no image data") }
        guard n == frames, n > 0 else { throw ImageError(.corrupt, "APNG acTL declares \(n) frames; the file holds \(frames)") }
    }
}

private extension String {
    func leftPadded(_ n: Int) -> String { count >= n ? self : String(repeating: "0", count: n - count) + self }
}
