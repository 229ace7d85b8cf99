import CPNG
import CWebP

// Resized variants (IMAGE_VARIANT): the spec, decoding to RGBA, cropping, scaling and
// encoding (libpng, libwebp — with Codecs.swift and Codecs+PNGChunks.swift the only files
// that know their C APIs).

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
    /// A WebP variant's sides are at most 16383 pixels (WebP's own limit): a larger box is
    /// capped there (an outside review, img3: "WebP encoding failed" past it).
    public func clamped(width: Int, height: Int) -> VariantSpec {
        var s = self
        let side = format == .webp ? Self.webpMaxSide : Int.max
        s.maxWidth = min(maxWidth, max(1, width), side)
        s.maxHeight = min(maxHeight, max(1, height), side)
        return s
    }

    /// The longest side a WebP holds (its bitstream stores sides in 14 bits).
    public static let webpMaxSide = 16383

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
            guard let f = firstWebPFrame(bytes) else { throw ImageError(.corrupt, "animated WebP has no first frame") }
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
