import CPNG
import CWebP

// The one file that knows libpng's and libwebp's C APIs.

/// Header inspection, full-decode validation and encoding for PNG and WebP; header-only for
/// GIF and JPEG (no decoder for them is in the stack). Every decode is refused before any
/// pixel memory is allocated when the header claims more than `pixelLimit` pixels.
public enum ImageCodec {
    public static let defaultPixelLimit = 25_000_000

    /// Format, dimensions, alpha, animation and frame count from the headers only.
    public static func inspect(_ bytes: [UInt8], pixelLimit: Int = defaultPixelLimit) throws(ImageError) -> ImageInfo {
        guard let format = ImageSniffer.sniff(bytes) else { throw ImageError(.notAnImage, "not a PNG, WebP, GIF or JPEG image") }
        // PNG's IHDR sits at a fixed place: check its claim before libpng sees the file.
        if format == .png || format == .apng, bytes.count >= 24 {
            let w = Int(bytes[16]) << 24 | Int(bytes[17]) << 16 | Int(bytes[18]) << 8 | Int(bytes[19])
            let h = Int(bytes[20]) << 24 | Int(bytes[21]) << 16 | Int(bytes[22]) << 8 | Int(bytes[23])
            if w * h > pixelLimit {
                throw ImageError(.tooManyPixels, "\(format) claims \(w)×\(h) = \(w * h) pixels; the limit is \(pixelLimit)")
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
            throw ImageError(.tooManyPixels, "\(format) claims \(info.width)×\(info.height) = \(info.pixels) pixels; the limit is \(pixelLimit)")
        }
        return info
    }

    /// Inspects and, for PNG and WebP, fully decodes (so a truncated or corrupt file is
    /// refused); GIF and JPEG are checked for their header and trailer.
    @discardableResult
    public static func validate(_ bytes: [UInt8], pixelLimit: Int = defaultPixelLimit) throws(ImageError) -> ImageInfo {
        let info = try inspect(bytes, pixelLimit: pixelLimit)
        switch info.format {
        case .png, .apng:
            _ = try decodePNG(bytes, info)
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
            guard bytes.last == 0x3B else { throw ImageError(.truncated, "GIF has no trailer (0x3B): truncated") }
        case .jpeg:
            guard bytes.count >= 4, bytes[bytes.count - 2] == 0xFF, bytes[bytes.count - 1] == 0xD9 else {
                throw ImageError(.truncated, "JPEG has no end-of-image marker (FFD9): truncated")
            }
        }
        return info
    }

    // MARK: PNG

    private static func pngHeader(_ bytes: [UInt8], _ format: ImageFormat) throws(ImageError) -> ImageInfo {
        var image = png_image()
        image.version = png_uint_32(strata_PNG_IMAGE_VERSION)
        let ok = bytes.withUnsafeBytes { png_image_begin_read_from_memory(&image, $0.baseAddress, $0.count) }
        defer { png_image_free(&image) }
        guard ok != 0 else { throw ImageError(.corrupt, "PNG header: \(message(&image))") }
        let alpha = image.format & png_uint_32(strata_PNG_FORMAT_FLAG_ALPHA) != 0
        let frames = format == .apng ? max(1, PNGChunks.animationFrames(bytes) ?? 1) : 1
        return ImageInfo(format: format, width: Int(image.width), height: Int(image.height), hasAlpha: alpha,
                         animated: format == .apng, frameCount: frames)
    }

    /// Decodes to RGBA (the first frame of an APNG).
    static func decodePNG(_ bytes: [UInt8], _ info: ImageInfo) throws(ImageError) -> [UInt8] {
        var image = png_image()
        image.version = png_uint_32(strata_PNG_IMAGE_VERSION)
        let ok = bytes.withUnsafeBytes { png_image_begin_read_from_memory(&image, $0.baseAddress, $0.count) }
        guard ok != 0 else { png_image_free(&image); throw ImageError(.corrupt, "PNG: \(message(&image))") }
        image.format = png_uint_32(strata_PNG_FORMAT_RGBA)
        var pixels = [UInt8](repeating: 0, count: Int(image.width) * Int(image.height) * 4)
        let done = pixels.withUnsafeMutableBytes { png_image_finish_read(&image, nil, $0.baseAddress, 0, nil) }
        defer { png_image_free(&image) }
        guard done != 0 else { throw ImageError(.corrupt, "PNG does not decode (truncated or corrupt): \(message(&image))") }
        return pixels
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
            throw ImageError(status == VP8_STATUS_NOT_ENOUGH_DATA ? .truncated : .corrupt, "WebP header does not parse (status \(status.rawValue))")
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
        // Count image descriptors (0x2C), skipping color tables, extensions and data sub-blocks.
        var at = 13
        if b[10] & 0x80 != 0 { at += 3 << (Int(b[10] & 7) + 1) }
        var frames = 0
        var alpha = false
        func skipSubBlocks(_ i: inout Int) {
            while i < b.count { let n = Int(b[i]); i += 1; if n == 0 { return }; i += n }
        }
        while at < b.count {
            switch b[at] {
            case 0x21: // extension
                if at + 1 < b.count && b[at + 1] == 0xF9 && at + 3 < b.count && b[at + 3] & 1 != 0 { alpha = true }
                at += 2
                skipSubBlocks(&at)
            case 0x2C: // image descriptor
                frames += 1
                guard at + 10 <= b.count else { at = b.count; break }
                let packed = b[at + 9]
                at += 10
                if packed & 0x80 != 0 { at += 3 << (Int(packed & 7) + 1) }
                at += 1 // LZW minimum code size
                skipSubBlocks(&at)
            default:
                at = b.count
            }
        }
        return ImageInfo(format: .gif, width: w, height: h, hasAlpha: alpha, animated: frames > 1, frameCount: max(1, frames))
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
