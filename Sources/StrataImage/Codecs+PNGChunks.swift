import CPNG
import CWebP

// A PNG's chunks: walked with every CRC checked (zlib's crc32), the copy libpng is given,
// and an APNG's structure.

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

    /// IHDR's width and height (the first chunk's, at its fixed place), nil when the bytes do
    /// not start with one.
    static func ihdrSides(_ b: [UInt8]) -> (width: Int, height: Int)? {
        guard b.count >= 33, b[8] == 0, b[9] == 0, b[10] == 0, b[11] == 13, typeName(b, 12) == "IHDR" else { return nil }
        func u32(_ i: Int) -> Int { Int(b[i]) << 24 | Int(b[i + 1]) << 16 | Int(b[i + 2]) << 8 | Int(b[i + 3]) }
        return (u32(16), u32(20))
    }

    /// Caps IHDR's sides at `maxSide` in a header copy (`headerCopy`) and gives the chunk its
    /// CRC again, so libpng checks the rest of the header of a PNG whose sides are past its
    /// limit. The copy is never decoded.
    static func clampIHDR(_ b: inout [UInt8], maxSide: Int) {
        guard let (w, h) = ihdrSides(b) else { return }
        for (at, side) in [(16, min(w, maxSide)), (20, min(h, maxSide))] {
            for i in 0..<4 { b[at + i] = UInt8(truncatingIfNeeded: side >> (24 - 8 * i)) }
        }
        let crc = b.withUnsafeBufferPointer { p in UInt32(truncatingIfNeeded: crc32(0, p.baseAddress! + 12, 17)) }
        for i in 0..<4 { b[29 + i] = UInt8(truncatingIfNeeded: crc >> (24 - 8 * UInt32(i))) }
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
                guard c.length >= 4 else { throw ImageError(.corrupt, "APNG fdAT of \(c.length) bytes has no room for its sequence number") }
                guard u32(d) == sequence else { throw ImageError(.corrupt, "APNG fdAT sequence number out of order (\(sequence) was due)") }
                guard seenIDAT, frames > 0 else { throw ImageError(.corrupt, "APNG fdAT before the image data or any fcTL") }
                sequence += 1
                // Its sequence number alone is no image data (an outside review, img1).
                if c.length > 4 { frameHasData = true }
            default:
                break
            }
        }
        guard let n = declared else { throw ImageError(.corrupt, "APNG has no acTL") }
        guard frameHasData else { throw ImageError(.corrupt, "APNG frame \(frames - 1) has no image data") }
        guard n > 0 else { throw ImageError(.corrupt, "APNG acTL declares 0 frames; an animation has at least one") }
        guard n == frames else {
            throw ImageError(.corrupt, "APNG acTL declares \(n) frame\(n == 1 ? "" : "s"); the file holds \(frames)")
        }
    }
}

private extension String {
    func leftPadded(_ n: Int) -> String { count >= n ? self : String(repeating: "0", count: n - count) + self }
}
