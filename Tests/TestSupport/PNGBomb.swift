/// Hostile PNGs for tests, built by hand (no zlib needed): a valid signature and IHDR, and one
/// IDAT holding a zlib stream of zero bytes compressed with deflate's fixed Huffman codes
/// (a literal 0, then matches of 258 at distance 1: 13 bits per 258 bytes, ~160:1).
public enum PNGBomb {
    /// A PNG whose IHDR claims `width` × `height` (8-bit RGBA unless told) and whose IDAT
    /// inflates to `inflated` zero bytes — by default exactly the raw size the header implies
    /// (each row a filter byte and its pixels), so it is a valid, all-zero image.
    /// (With `interlace`, pass `inflated`: the default is the non-interlaced size.)
    public static func make(width: Int, height: Int, bitDepth: UInt8 = 8, colorType: UInt8 = 6, interlace: UInt8 = 0,
                            inflated: Int? = nil) -> [UInt8] {
        let channels: Int = [0: 1, 2: 3, 3: 1, 4: 2, 6: 4][Int(colorType)] ?? 4
        let rowBytes = (width * channels * Int(bitDepth) + 7) / 8
        let raw = inflated ?? height * (1 + rowBytes)
        var ihdr = be32(UInt32(width)) + be32(UInt32(height))
        ihdr += [bitDepth, colorType, 0, 0, interlace]
        return [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + chunk("IHDR", ihdr) + chunk("IDAT", zlibZeros(raw)) + chunk("IEND", [])
    }

    /// A zlib stream that inflates to `count` zero bytes.
    public static func zlibZeros(_ count: Int) -> [UInt8] {
        var w = BitWriter()
        w.out.reserveCapacity(count / 150 + 64)
        w.out += [0x78, 0x01]
        w.write(1, 1) // BFINAL
        w.write(1, 2) // BTYPE 01: fixed Huffman
        var left = count
        if left > 0 { w.write(0x0C, 8); left -= 1 } // literal 0 (code 00110000, sent reversed)
        while left >= 258 { w.write(0xA3, 13); left -= 258 } // length 258 (11000101 reversed), distance 1 (00000)
        while left > 0 { w.write(0x0C, 8); left -= 1 }
        w.write(0, 7) // end of block
        w.finish()
        let adler = UInt32(count % 65521) << 16 | 1
        return w.out + be32(adler)
    }

    struct BitWriter {
        var out: [UInt8] = []
        var acc: UInt64 = 0
        var bits = 0
        mutating func write(_ value: UInt64, _ count: Int) {
            acc |= value << UInt64(bits)
            bits += count
            while bits >= 8 { out.append(UInt8(truncatingIfNeeded: acc)); acc >>= 8; bits -= 8 }
        }
        mutating func finish() { if bits > 0 { out.append(UInt8(truncatingIfNeeded: acc)); acc = 0; bits = 0 } }
    }

    static func be32(_ v: UInt32) -> [UInt8] { [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)] }

    static let crcTable: [UInt32] = (0..<256).map { n -> UInt32 in
        var c = UInt32(n)
        for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    static func chunk(_ type: String, _ data: [UInt8]) -> [UInt8] {
        let t = Array(type.utf8)
        var c: UInt32 = 0xFFFF_FFFF
        for b in t { c = crcTable[Int((c ^ UInt32(b)) & 0xFF)] ^ (c >> 8) }
        data.withUnsafeBufferPointer { p in for b in p { c = crcTable[Int((c ^ UInt32(b)) & 0xFF)] ^ (c >> 8) } }
        return be32(UInt32(data.count)) + t + data + be32(~c)
    }
}
