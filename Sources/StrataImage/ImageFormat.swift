/// Image formats the node recognises by their magic bytes.
public enum ImageFormat: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    case png = 1, apng, webpLossy, webpLossless, webpAnimated, gif, jpeg

    /// A name usable in metric and stat names (`webp_lossy`).
    public var metricName: String { String(description.map { $0 == "-" ? "_" : $0 }) }

    /// The format's name in messages (`PNG`, `APNG`, `WebP`, `GIF`, `JPEG`).
    public var displayName: String {
        switch self {
        case .png: "PNG"
        case .apng: "APNG"
        case .webpLossy, .webpLossless, .webpAnimated: "WebP"
        case .gif: "GIF"
        case .jpeg: "JPEG"
        }
    }

    public var description: String {
        switch self {
        case .png: "png"
        case .apng: "apng"
        case .webpLossy: "webp-lossy"
        case .webpLossless: "webp-lossless"
        case .webpAnimated: "webp-animated"
        case .gif: "gif"
        case .jpeg: "jpeg"
        }
    }
}

/// What a header says about an image.
public struct ImageInfo: Sendable, Equatable {
    public var format: ImageFormat
    public var width: Int
    public var height: Int
    public var hasAlpha: Bool
    public var animated: Bool
    public var frameCount: Int
    /// width × height, saturating (a header can claim sides whose product overflows).
    public var pixels: Int {
        let (p, overflow) = width.multipliedReportingOverflow(by: height)
        return overflow ? Int.max : p
    }
}

/// Why an image was refused: a reason a person can act on.
public struct ImageError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable { case notAnImage, corrupt, truncated, tooManyPixels }
    public let kind: Kind
    public let message: String
    public init(_ kind: Kind, _ message: String) { self.kind = kind; self.message = message }
    public var description: String { message }
}

public enum ImageSniffer {
    /// The format by magic bytes (PNG vs APNG and the WebP kinds need a look at the chunks).
    public static func sniff(_ b: [UInt8]) -> ImageFormat? {
        if b.count >= 8 && b[0...7].elementsEqual([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) {
            return PNGChunks.hasAnimationControl(b) ? .apng : .png
        }
        // WebP's signature is RIFF, a size, WEBP: a value that starts with it and is cut short
        // or names no known first chunk is a (corrupt) WebP, which validation refuses — not a
        // value that is no image at all (an outside review, img3: a WebP cut to 12–15 bytes
        // was stored by a validating node).
        if b.count >= 12 && b[0...3].elementsEqual(Array("RIFF".utf8)) && b[8...11].elementsEqual(Array("WEBP".utf8)) {
            guard b.count >= 16 else { return .webpLossy }
            switch String(decoding: b[12...15], as: UTF8.self) {
            case "VP8L": return .webpLossless
            case "VP8X":
                // Extended header: flag bit 1 (0x02) = animation.
                return b.count > 20 && b[20] & 0x02 != 0 ? .webpAnimated : .webpLossy
            default: return .webpLossy
            }
        }
        if b.count >= 6 && b[0...2].elementsEqual(Array("GIF".utf8)) && (b[3...5].elementsEqual(Array("87a".utf8)) || b[3...5].elementsEqual(Array("89a".utf8))) {
            return .gif
        }
        if b.count >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF { return .jpeg }
        return nil
    }
}

/// Walks PNG chunks (length, type, data, CRC) without decoding.
enum PNGChunks {
    static func forEach(_ b: [UInt8], _ body: (String, Int, Int) -> Bool) {
        var at = 8
        while at + 8 <= b.count {
            let len = Int(b[at]) << 24 | Int(b[at + 1]) << 16 | Int(b[at + 2]) << 8 | Int(b[at + 3])
            let type = String(decoding: b[(at + 4)..<(at + 8)], as: UTF8.self)
            guard len >= 0, at + 12 + len <= b.count else { return }
            if !body(type, at + 8, len) { return }
            at += 12 + len
        }
    }

    static func hasAnimationControl(_ b: [UInt8]) -> Bool { animationFrames(b) != nil }

    /// `acTL`'s frame count when the PNG is an APNG.
    static func animationFrames(_ b: [UInt8]) -> Int? {
        var frames: Int?
        forEach(b) { type, data, len in
            if type == "acTL" && len >= 8 {
                frames = Int(b[data]) << 24 | Int(b[data + 1]) << 16 | Int(b[data + 2]) << 8 | Int(b[data + 3])
                return false
            }
            return type != "IDAT"
        }
        return frames
    }
}
