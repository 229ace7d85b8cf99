import CPNG
import CWebP

// With Codecs+Variants.swift and Codecs+PNGChunks.swift, the only files that know libpng's
// and libwebp's C APIs.

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
            // PNG's sides are 31-bit (its spec; libpng's own message for them was about an
            // unsigned integer, an outside review, img2).
            guard w <= 0x7FFF_FFFF, h <= 0x7FFF_FFFF else {
                throw ImageError(.tooManyPixels, "PNG's IHDR gives \(w)×\(h) pixels; PNG allows sides of at most 2147483647")
            }
            // (Found by fuzzing: two 32-bit sides overflow Int when multiplied.)
            let (pixels, overflow) = w.multipliedReportingOverflow(by: h)
            if overflow || pixels > pixelLimit {
                // IMAGE_INFO reads headers with no pixel limit (Int.max): only a product past
                // Int's range gets here then.
                let limit = pixelLimit == Int.max ? "more than this node can count" : "the limit is \(pixelLimit)"
                throw ImageError(.tooManyPixels, "\(format.displayName) claims \(w)×\(h) pixels; \(limit)")
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
            throw ImageError(.tooManyPixels, "\(format.displayName) claims \(info.width)×\(info.height) pixels; the limit is \(pixelLimit)")
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
            if info.format == .apng { try PNGChunks.checkAnimation(bytes, width: info.width, height: info.height) }
        case .webpLossy, .webpLossless:
            try checkWebPDecodes(bytes)
        case .webpAnimated:
            // The demuxer must accept every frame's structure, and the first frame (a variant's
            // source) must decode: a corrupt one passed before (an outside review, img1).
            try checkAnimatedWebP(bytes)
            guard let first = firstWebPFrame(bytes) else { throw ImageError(.corrupt, "animated WebP has no first frame") }
            try checkWebPDecodes(first.bytes)
        case .gif:
            let blocks = gifBlocks(bytes)
            guard blocks.trailer else { throw ImageError(.truncated, "GIF ends before its trailer (0x3B): truncated") }
            guard blocks.frames > 0 else { throw ImageError(.corrupt, "GIF has no image (no image descriptor before its trailer)") }
        case .jpeg:
            try checkJPEGStructure(bytes)
        }
        return info
    }

    // MARK: PNG

    /// The IEND chunk every PNG ends with: length 0, "IEND", its CRC.
    static let iendChunk: [UInt8] = [0, 0, 0, 0, 0x49, 0x45, 0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82]

    /// The longest side libpng reads (its built-in user limit, which its simplified API, the
    /// one used here, cannot raise): a PNG with a longer side has its facts reported from its
    /// IHDR but is not decoded — validation refuses it and it cannot be resized.
    public static let pngMaxSide = 1_000_000

    private static func pngHeader(_ bytes: [UInt8], _ format: ImageFormat) throws(ImageError) -> ImageInfo {
        var image = png_image()
        image.version = png_uint_32(strata_PNG_IMAGE_VERSION)
        // The header is read from a copy without the text and ICC chunks (libpng inflates them
        // while it reads up to the image data: 1 GB of zTXt took 3 s here after the decode
        // stopped seeing them), pinned while libpng holds it.
        var header = PNGChunks.headerCopy(bytes)
        // A side past libpng's limit: libpng checks the rest of the header with the sides
        // clamped, and the facts are IHDR's (an outside review, img3: a valid 1,000,001 × 2 PNG
        // was reported as no image, "Invalid IHDR data").
        let sides = PNGChunks.ihdrSides(bytes)
        if let s = sides, s.width > pngMaxSide || s.height > pngMaxSide {
            PNGChunks.clampIHDR(&header, maxSide: pngMaxSide)
        }
        let ok = header.withUnsafeBytes { png_image_begin_read_from_memory(&image, $0.baseAddress, $0.count) }
        defer { png_image_free(&image) }
        guard ok != 0 else { throw ImageError(.corrupt, "PNG header: \(message(&image))") }
        let alpha = image.format & png_uint_32(strata_PNG_FORMAT_FLAG_ALPHA) != 0
        let frames = format == .apng ? PNGChunks.frameControls(bytes) ?? PNGChunks.animationFrames(bytes) ?? 1 : 1
        return ImageInfo(format: format, width: sides?.width ?? Int(image.width), height: sides?.height ?? Int(image.height),
                         hasAlpha: alpha, animated: format == .apng, frameCount: frames)
    }

    /// Decodes to RGBA (the first frame of an APNG), after `checkPNGWork`.
    static func decodePNG(_ original: [UInt8], _ info: ImageInfo, decodeLimit: Int) throws(ImageError) -> [UInt8] {
        // libpng's reader stops after the image data: a file cut after it decodes. Its chunks
        // must reach IEND (bytes after it are ignored, as by other readers) — for a variant as
        // for validation (an outside review, img1: a PNG validation refused was resized).
        guard try PNGChunks.scan(original).endsWithIEND else {
            throw ImageError(.truncated, "PNG ends before its IEND chunk: truncated")
        }
        guard info.width <= pngMaxSide && info.height <= pngMaxSide else {
            throw ImageError(.tooManyPixels, "PNG is \(info.width)×\(info.height) pixels: a side over \(pngMaxSide) is more than the PNG decoder (libpng) reads")
        }
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
        // Saturating: a header of 2^31 × 2^31 16-bit RGBA pixels is 2^65 bytes, which trapped
        // (an outside review crashed the node with a 68-byte PNG); Int.max is over every limit.
        func rows(_ pw: Int, _ ph: Int) -> Int {
            guard pw > 0 && ph > 0 else { return 0 }
            let (n, overflow) = ph.multipliedReportingOverflow(by: 1 + (pw * bits + 7) / 8)
            return overflow ? Int.max : n
        }
        guard b[28] == 1 else { return rows(w, h) }
        // Adam7: (x0, y0, dx, dy) of the seven passes.
        let passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
        return passes.reduce(0) { total, p in
            let (n, overflow) = total.addingReportingOverflow(rows((w - p.0 + p.2 - 1) / p.2, (h - p.1 + p.3 - 1) / p.3))
            return overflow ? Int.max : n
        }
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

    /// Decodes one WebP bitstream (a still image, or an animation's frame) and drops the
    /// pixels: libwebp's buffer of 4 bytes per pixel is the cost.
    private static func checkWebPDecodes(_ bytes: [UInt8]) throws(ImageError) {
        var w: Int32 = 0, h: Int32 = 0
        guard let px = bytes.withUnsafeBufferPointer({ WebPDecodeRGBA($0.baseAddress, $0.count, &w, &h) }) else {
            throw ImageError(.corrupt, "WebP data does not decode (truncated or corrupt)")
        }
        WebPFree(px)
    }

    /// An animated WebP's first frame: its bitstream and its offset on the canvas.
    static func firstWebPFrame(_ bytes: [UInt8]) -> (bytes: [UInt8], x: Int, y: Int)? {
        bytes.withUnsafeBufferPointer { p in
            var data = WebPData(bytes: p.baseAddress, size: p.count)
            guard let demux = WebPDemux(&data) else { return nil }
            defer { WebPDemuxDelete(demux) }
            var iter = WebPIterator()
            guard WebPDemuxGetFrame(demux, 1, &iter) != 0 else { return nil }
            defer { WebPDemuxReleaseIterator(&iter) }
            return (Array(UnsafeBufferPointer(start: iter.fragment.bytes, count: iter.fragment.size)), Int(iter.x_offset), Int(iter.y_offset))
        }
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
                         frameCount: blocks.frames)
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

    /// A JPEG's segments walked by their lengths from SOI: at least one scan (SOS, then its
    /// entropy-coded data up to the next marker) and an end-of-image marker after the last scan
    /// (bytes after it are ignored). Walking the structure, not searching for the bytes, so an
    /// EXIF thumbnail or a comment holding FF DA / FF D9 does not stand in for the image's own
    /// (an outside review, img2: 443 of 590 cuts in a photo's header passed the search).
    static func checkJPEGStructure(_ b: [UInt8]) throws(ImageError) {
        var at = 2, scans = 0
        while true {
            guard at + 1 < b.count else {
                throw ImageError(.truncated, scans == 0 ? "JPEG ends before its first scan: truncated"
                                                       : "JPEG has no end-of-image marker (FFD9) after its last scan: truncated")
            }
            guard b[at] == 0xFF else { throw ImageError(.corrupt, "JPEG marker expected at byte \(at)") }
            let marker = b[at + 1]
            switch marker {
            case 0xFF: at += 1 // fill byte
            case 0xD9:
                guard scans > 0 else { throw ImageError(.corrupt, "JPEG has no scan (no start-of-scan marker FFDA): no image data") }
                return
            case 0x01, 0xD0...0xD8: at += 2 // markers without a length
            default:
                guard at + 3 < b.count else { throw ImageError(.truncated, "JPEG ends inside a segment header: truncated") }
                let len = Int(b[at + 2]) << 8 | Int(b[at + 3])
                guard len >= 2 else { throw ImageError(.corrupt, "JPEG segment FF\(String(marker, radix: 16, uppercase: true)) has length \(len)") }
                at += 2 + len
                if marker == 0xDA {
                    scans += 1
                    // Entropy-coded data: an FF in it is followed by 00 (a stuffed byte) or a
                    // restart marker; any other FF starts the next segment.
                    while at + 1 < b.count && !(b[at] == 0xFF && b[at + 1] != 0 && !(0xD0...0xD7).contains(b[at + 1])) { at += 1 }
                }
            }
        }
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
