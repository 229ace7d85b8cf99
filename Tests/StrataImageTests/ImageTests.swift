import XCTest
@testable import StrataImage

/// CRC-32 (PNG's), to build chunks in tests.
func crc32(_ bytes: [UInt8]) -> UInt32 {
    var c: UInt32 = 0xFFFF_FFFF
    for b in bytes {
        c ^= UInt32(b)
        for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
    }
    return ~c
}

func be32(_ v: UInt32) -> [UInt8] { [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)] }

func chunk(_ type: String, _ data: [UInt8]) -> [UInt8] {
    let t = Array(type.utf8)
    return be32(UInt32(data.count)) + t + data + be32(crc32(t + data))
}

func gradient(_ w: Int, _ h: Int, alpha: UInt8 = 255) -> [UInt8] {
    var px: [UInt8] = []
    for y in 0..<h { for x in 0..<w { px += [UInt8(x * 255 / max(1, w - 1)), UInt8(y * 255 / max(1, h - 1)), 128, alpha] } }
    return px
}

final class ImageTests: XCTestCase {
    func testPNGInspectAndValidate() throws {
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: gradient(40, 30, alpha: 200), width: 40, height: 30))
        XCTAssertEqual(ImageSniffer.sniff(png), .png)
        let info = try ImageCodec.validate(png)
        XCTAssertEqual(info, ImageInfo(format: .png, width: 40, height: 30, hasAlpha: true, animated: false, frameCount: 1))
        let pixels = try ImageCodec.decodePNG(png, info, decodeLimit: ImageCodec.defaultDecodeLimit)
        XCTAssertEqual(pixels.count, 40 * 30 * 4)
        XCTAssertEqual(Array(pixels[0..<4]), [0, 0, 128, 200])
    }

    func testTruncatedAndCorruptPNGAreRefusedWithAReason() throws {
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: gradient(64, 64), width: 64, height: 64))
        let truncated = Array(png.prefix(png.count - 30))
        XCTAssertNoThrow(try ImageCodec.inspect(truncated), "the header alone is fine")
        XCTAssertThrowsError(try ImageCodec.validate(truncated)) { e in
            XCTAssertEqual((e as? ImageError)?.kind, .truncated) // its last chunk ends past the file
            XCTAssertFalse((e as? ImageError)?.message.isEmpty ?? true)
        }
        var corrupt = png
        for i in 60..<min(120, corrupt.count - 20) { corrupt[i] ^= 0x5A }
        XCTAssertThrowsError(try ImageCodec.validate(corrupt))
        // Cut after the image data: every pixel decodes, but the file has no IEND.
        let noEnd = Array(png.dropLast(12))
        XCTAssertThrowsError(try ImageCodec.validate(noEnd)) { e in
            XCTAssertEqual((e as? ImageError)?.kind, .truncated)
            XCTAssertTrue((e as? ImageError)?.message.contains("IEND") == true)
        }
        XCTAssertNoThrow(try ImageCodec.validate(png), "the whole file")
    }

    func testHeaderClaimingAbsurdDimensionsIsRefusedBeforeDecoding() throws {
        // A real IHDR (valid CRC) for 1,000,000 × 1,000,000 pixels, and no pixel data at all.
        let ihdr = be32(1_000_000) + be32(1_000_000) + [8, 6, 0, 0, 0]
        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + chunk("IHDR", ihdr) + chunk("IEND", [])
        XCTAssertThrowsError(try ImageCodec.validate(png)) { e in
            XCTAssertEqual((e as? ImageError)?.kind, .tooManyPixels)
            XCTAssertTrue((e as? ImageError)?.message.contains("1000000×1000000") ?? false)
        }
        // Sides whose product overflows 64 bits (found by fuzzing) are refused, not a crash.
        let huge: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + chunk("IHDR", [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 8, 6, 0, 0, 0])
        XCTAssertThrowsError(try ImageCodec.inspect(huge)) { e in XCTAssertEqual((e as? ImageError)?.kind, .tooManyPixels) }
        let small = try XCTUnwrap(ImageCodec.encodePNG(rgba: gradient(100, 100), width: 100, height: 100))
        XCTAssertThrowsError(try ImageCodec.inspect(small, pixelLimit: 5000)) { e in
            XCTAssertEqual((e as? ImageError)?.kind, .tooManyPixels)
        }
    }

    func testAPNGIsRecognisedWithItsFrameCount() throws {
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: gradient(8, 8), width: 8, height: 8))
        // Insert acTL (3 frames) right after IHDR (8 signature + 25 IHDR bytes).
        let apng = Array(png[0..<33]) + chunk("acTL", be32(3) + be32(0)) + Array(png[33...])
        XCTAssertEqual(ImageSniffer.sniff(apng), .apng)
        let info = try ImageCodec.inspect(apng)
        XCTAssertTrue(info.animated)
        XCTAssertEqual(info.frameCount, 3)
    }

    func testWebPLossyAndLossless() throws {
        let lossy = try XCTUnwrap(ImageCodec.encodeWebP(rgba: gradient(50, 20), width: 50, height: 20, quality: 80))
        let lossless = try XCTUnwrap(ImageCodec.encodeWebP(rgba: gradient(50, 20, alpha: 100), width: 50, height: 20, quality: nil))
        let a = try ImageCodec.validate(lossy)
        XCTAssertEqual(a.format, .webpLossy)
        XCTAssertEqual([a.width, a.height], [50, 20])
        XCTAssertFalse(a.hasAlpha)
        let b = try ImageCodec.validate(lossless)
        XCTAssertEqual(b.format, .webpLossless)
        XCTAssertTrue(b.hasAlpha)
        XCTAssertThrowsError(try ImageCodec.validate(Array(lossy.prefix(lossy.count / 2))))
    }

    func testGIFAndJPEGFromTheirHeaders() throws {
        let gif: [UInt8] = Array("GIF89a".utf8) + [1, 0, 1, 0, 0x80, 0, 0, 255, 255, 255, 0, 0, 0,
                                                   0x21, 0xF9, 4, 1, 0, 0, 0, 0,
                                                   0x2C, 0, 0, 0, 0, 1, 0, 1, 0, 0, 2, 2, 0x44, 1, 0, 0x3B]
        let g = try ImageCodec.validate(gif)
        XCTAssertEqual(g, ImageInfo(format: .gif, width: 1, height: 1, hasAlpha: true, animated: false, frameCount: 1))
        XCTAssertThrowsError(try ImageCodec.validate(Array(gif.dropLast()))) { e in XCTAssertEqual((e as? ImageError)?.kind, .truncated) }
        let jpeg: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 0, 0, 0xFF, 0xC0, 0, 11, 8, 0, 16, 0, 32, 1, 1, 0x11, 0,
                             0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 0x3F, 0, 0x12, 0x34, 0xFF, 0xD9]
        let j = try ImageCodec.validate(jpeg)
        XCTAssertEqual([j.width, j.height], [32, 16])
        XCTAssertThrowsError(try ImageCodec.validate(Array(jpeg.dropLast(2)))) { e in XCTAssertEqual((e as? ImageError)?.kind, .truncated) }
    }

    func testOpaqueBytesAreNotImages() {
        XCTAssertNil(ImageSniffer.sniff(Array("{\"json\":true}".utf8)))
        XCTAssertThrowsError(try ImageCodec.inspect([1, 2, 3])) { e in XCTAssertEqual((e as? ImageError)?.kind, .notAnImage) }
        // A WebP extended header with the animation flag.
        var vp8x = Array("RIFF".utf8) + [30, 0, 0, 0] + Array("WEBPVP8X".utf8) + [10, 0, 0, 0, 0x02, 0, 0, 0] + [UInt8](repeating: 0, count: 6)
        XCTAssertEqual(ImageSniffer.sniff(vp8x), .webpAnimated)
        vp8x[20] = 0
        XCTAssertEqual(ImageSniffer.sniff(vp8x), .webpLossy)
    }
}

final class VariantTests: XCTestCase {
    func testContainKeepsAspectInsideTheBox() throws {
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: gradient(400, 200), width: 400, height: 200))
        let v = try ImageCodec.variant(png, VariantSpec(maxWidth: 100, maxHeight: 100))
        XCTAssertEqual([v.width, v.height], [100, 50])
        let info = try ImageCodec.validate(v.bytes)
        XCTAssertEqual(info.format, .webpLossy)
        XCTAssertEqual([info.width, info.height], [100, 50])
    }

    func testCoverFillsTheBoxAndCropsTheCentre() throws {
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: gradient(400, 200), width: 400, height: 200))
        let v = try ImageCodec.variant(png, VariantSpec(maxWidth: 100, maxHeight: 100, fit: .cover, format: .png))
        XCTAssertEqual([v.width, v.height], [100, 100])
        let info = try ImageCodec.validate(v.bytes)
        XCTAssertEqual(info.format, .png)
        // The centre crop keeps the middle columns: the red channel of the left edge is ~1/4 of 255.
        let px = try ImageCodec.decodePNG(v.bytes, info, decodeLimit: ImageCodec.defaultDecodeLimit)
        XCTAssertEqual(Double(px[0]), 255.0 / 4, accuracy: 12)
    }

    func testNeverEnlargesAndLosslessWorks() throws {
        let webp = try XCTUnwrap(ImageCodec.encodeWebP(rgba: gradient(30, 20), width: 30, height: 20, quality: nil))
        let v = try ImageCodec.variant(webp, VariantSpec(maxWidth: 300, maxHeight: 300, quality: nil))
        XCTAssertEqual([v.width, v.height], [30, 20])
        XCTAssertEqual(try ImageCodec.validate(v.bytes).format, .webpLossless)
    }

    func testCanonicalSpecTextAndRefusals() throws {
        XCTAssertEqual(VariantSpec(maxWidth: 64, maxHeight: 32).canonical, "w=64,h=32,fit=contain,fmt=webp,q=80")
        XCTAssertEqual(VariantSpec(maxWidth: 64, maxHeight: 32, fit: .cover, format: .png).canonical, "w=64,h=32,fit=cover,fmt=png")
        let gif: [UInt8] = Array("GIF89a".utf8) + [1, 0, 1, 0, 0, 0, 0, 0x2C, 0, 0, 0, 0, 1, 0, 1, 0, 0, 2, 2, 0x44, 1, 0, 0x3B]
        XCTAssertThrowsError(try ImageCodec.variant(gif, VariantSpec(maxWidth: 10, maxHeight: 10)))
        XCTAssertThrowsError(try ImageCodec.variant([1, 2, 3], VariantSpec(maxWidth: 10, maxHeight: 10)))
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: gradient(10, 10), width: 10, height: 10))
        XCTAssertThrowsError(try ImageCodec.variant(png, VariantSpec(maxWidth: 0, maxHeight: 10)))
    }
}

/// zlib data in one stored (uncompressed) deflate block, for PNGs built byte by byte.
func zlibStored(_ data: [UInt8]) -> [UInt8] {
    precondition(data.count < 65_536)
    var a: UInt32 = 1, b: UInt32 = 0
    for x in data { a = (a + UInt32(x)) % 65_521; b = (b + a) % 65_521 }
    let n = UInt16(data.count)
    return [0x78, 0x01, 0x01, UInt8(n & 0xFF), UInt8(n >> 8), UInt8(~n & 0xFF), UInt8(~n >> 8)] + data + be32(b << 16 | a)
}

let pngSignature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]

/// zlib data in stored (uncompressed) deflate blocks of any length.
func zlibStoredBlocks(_ data: [UInt8]) -> [UInt8] {
    var a: UInt32 = 1, b: UInt32 = 0
    for x in data { a = (a + UInt32(x)) % 65_521; b = (b + a) % 65_521 }
    var out: [UInt8] = [0x78, 0x01]
    var at = 0
    repeat {
        let n = min(65_535, data.count - at)
        let last: UInt8 = at + n == data.count ? 1 : 0
        out += [last, UInt8(n & 0xFF), UInt8(n >> 8), UInt8(~n & 0xFF), UInt8((~n >> 8) & 0xFF)] + data[at..<(at + n)]
        at += n
    } while at < data.count
    return out + be32(b << 16 | a)
}

/// Outside review img3.
final class ImageLimitTests: XCTestCase {
    /// A valid PNG with a side past libpng's 1,000,000 (which its simplified reader cannot
    /// raise) has its facts read from IHDR, and a decode — validation, a variant — is refused
    /// with a message that names the limit (before: "PNG header: Invalid IHDR data", so it was
    /// reported as no image at all).
    func testAPNGWiderThanLibpngReadsHasItsFactsAndIsRefusedByName() throws {
        let w = 1_000_001, h = 2
        var raw: [UInt8] = []
        for _ in 0..<h { raw.append(0); raw += [UInt8](repeating: 0x80, count: w) }
        let png = pngSignature + chunk("IHDR", be32(UInt32(w)) + be32(UInt32(h)) + [8, 0, 0, 0, 0])
            + chunk("IDAT", zlibStoredBlocks(raw)) + chunk("IEND", [])
        let info = try ImageCodec.inspect(png)
        XCTAssertEqual(info.format, .png)
        XCTAssertEqual([info.width, info.height], [w, h])
        XCTAssertFalse(info.hasAlpha)
        XCTAssertThrowsError(try ImageCodec.validate(png)) { e in
            XCTAssertEqual((e as? ImageError)?.kind, .tooManyPixels)
            XCTAssertTrue((e as? ImageError)?.message.contains("a side over 1000000") ?? false, "\(e)")
        }
        XCTAssertThrowsError(try ImageCodec.variant(png, VariantSpec(maxWidth: 100, maxHeight: 100))) { e in
            XCTAssertEqual((e as? ImageError)?.kind, .tooManyPixels)
        }
        // With alpha (colour type 6) and tall instead of wide.
        let tall = pngSignature + chunk("IHDR", be32(1) + be32(2_000_000) + [8, 6, 0, 0, 0]) + chunk("IDAT", zlibStored([0, 0, 0, 0, 0])) + chunk("IEND", [])
        let t = try ImageCodec.inspect(tall)
        XCTAssertEqual([t.width, t.height], [1, 2_000_000])
        XCTAssertTrue(t.hasAlpha)
        // A header libpng refuses for another reason is still refused (bit depth 3).
        let bad = pngSignature + chunk("IHDR", be32(UInt32(w)) + be32(2) + [3, 0, 0, 0, 0]) + chunk("IEND", [])
        XCTAssertThrowsError(try ImageCodec.inspect(bad)) { e in XCTAssertEqual((e as? ImageError)?.kind, .corrupt) }
    }

    /// A WebP cut inside its first chunk's header — its 12-byte signature whole — is a
    /// truncated WebP, which validation refuses; not a value that is no image at all (before,
    /// a validating node stored it).
    func testAWebPCutAfterItsSignatureIsATruncatedWebP() throws {
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: gradient(16, 16), width: 16, height: 16))
        let webp = try ImageCodec.variant(png, VariantSpec(maxWidth: 16, maxHeight: 16)).bytes
        for n in 12...20 {
            let cut = Array(webp.prefix(n))
            XCTAssertNotNil(ImageSniffer.sniff(cut), "\(n) bytes")
            XCTAssertThrowsError(try ImageCodec.validate(cut), "\(n) bytes") { e in
                XCTAssertNotEqual((e as? ImageError)?.kind, .notAnImage, "\(n) bytes: \(e)")
            }
        }
        XCTAssertNil(ImageSniffer.sniff(Array(webp.prefix(11))), "shorter than the signature: no image")
    }

    /// A WebP variant is at most 16383 pixels a side (WebP's limit): a larger box is capped
    /// there instead of failing ("WebP encoding failed"); a PNG variant is not capped.
    func testAWebPVariantIsCappedAtWebPsLargestSide() throws {
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: gradient(20_000, 2), width: 20_000, height: 2))
        let webp = try ImageCodec.variant(png, VariantSpec(maxWidth: 20_000, maxHeight: 20_000))
        XCTAssertEqual(webp.width, 16_383)
        XCTAssertEqual(try ImageCodec.inspect(webp.bytes).width, 16_383)
        XCTAssertEqual(VariantSpec(maxWidth: 20_000, maxHeight: 100).clamped(width: 20_000, height: 2).maxWidth, 16_383)
        let asPNG = try ImageCodec.variant(png, VariantSpec(maxWidth: 20_000, maxHeight: 20_000, format: .png))
        XCTAssertEqual(asPNG.width, 20_000)
    }
}

/// Outside review img2: the edges of what the image code accepts and how it decodes.
final class ImageEdgeTests: XCTestCase {
    /// An animated WebP made by libwebp's own encoder (Pillow, `save_all=True, lossless=True`):
    /// a 400×300 transparent canvas whose first frame is a 51×51 red square at (150, 100).
    static let sticker: [UInt8] = hexBytes("52494646c000000057454250565038580a000000120000008f01002b0100414e494d06000000000000000000414e4d46280000004b0000320000320000320000640000035650384c0f0000002f32800c000710fd8ffe0722a2ff0100414e4d46340000004d0000320000330000320000640000015650384c1c0000002f33800c100f10f31ff31f0cc26c2384f9cb5e15ee19d1ff18e8dc00414e4d4628000000500000320000320000320000640000005650384c0f0000002f32800c000710fd8ffe0722a2ff0100")

    static func hexBytes(_ s: String) -> [UInt8] {
        var out: [UInt8] = []
        var i = s.startIndex
        while i < s.endIndex { let j = s.index(i, offsetBy: 2); out.append(UInt8(s[i..<j], radix: 16)!); i = j }
        return out
    }

    /// The node read the frame's pixels as if they covered the canvas: past the end of the
    /// buffer (a crash in libwebp, or heap bytes in the variant).
    func testAnAnimatedWebPWhoseFirstFrameIsSmallerThanItsCanvasIsPlacedOnIt() throws {
        let info = try ImageCodec.validate(Self.sticker)
        XCTAssertEqual([info.width, info.height], [400, 300])
        XCTAssertEqual(info.format, .webpAnimated)
        let v = try ImageCodec.variant(Self.sticker, VariantSpec(maxWidth: 400, maxHeight: 300, format: .png, quality: nil))
        XCTAssertEqual([v.width, v.height], [400, 300])
        let px = try ImageCodec.decodeRGBA(v.bytes, ImageCodec.inspect(v.bytes))
        func at(_ x: Int, _ y: Int) -> [UInt8] { Array(px[(y * 400 + x) * 4..<(y * 400 + x) * 4 + 4]) }
        XCTAssertEqual(at(0, 0), [0, 0, 0, 0], "outside the frame: transparent")
        XCTAssertEqual(at(399, 299), [0, 0, 0, 0])
        XCTAssertEqual(at(149, 101), [0, 0, 0, 0])
        XCTAssertEqual(at(175, 125), [255, 0, 0, 255], "the frame at its offset")
        XCTAssertEqual(at(151, 101), [255, 0, 0, 255])
        // Resized too.
        let small = try ImageCodec.variant(Self.sticker, VariantSpec(maxWidth: 40, maxHeight: 40))
        XCTAssertEqual([small.width, small.height], [40, 30])
    }

    /// A 301×157 RGB PNG (Pillow's): the decode's copy of the chunks was released while libpng
    /// still read it ("bad adaptive filter value" for a valid file, from the second build of
    /// the img2 fixes); decoded many times with allocations between, every pixel row agrees.
    /// Only an optimised build ends the copy's life at its last use: this debug-built test
    /// passed with the bug, the release binary refused the file every time (checked by hand:
    /// `strata set img --validate-image < png_RGB.png` before and after).
    static let rgb301: [UInt8] = hexBytes("89504e470d0a1a0a0000000d494844520000012d0000009d08020000006e3cb9780000058f49444154789ceddd4b4f935b1c85f1ff7be207d3e3050545443088180c06131ce00ca76b2a331948229148442482882828debf59cfa00639156a4b2f6bf7ddcf2f0c6a4dcb52fbb025dab6085522a288cae18f3faf69fc4a6ecb6db96db3b7fd2700b8d121e04787801f1d027e7408f8d121e04787801f1d027e7408f8d121e04787801f1d027e7408f8d121e04787801f1d027e7408f8d121e04787801f1d027e7408f8d121e04787801f1d027e7408f8d121e04787801f1d027e7408f8d121e04787801f1d027e7408f8d121e04787801f1d027e7408f8d121e077ca3d007ff1480f5bbf9379cdb57e27e81c3a4cc2633de8e8fdcf69feb89f5ad06c473f351a4187064f74df3de1b7592dd45cb3a819cb929cd161373cd53df78426cc68f1f00f9734ed5a920f3aeca067baeb9ed006d35aaa5e58d694774989d1619b3dd71df7844e99d2f2c1e5154d1a97940f1db6c70bdd764fe8aa49ad542fac6ac2bba41ce8b0252f75cb3dc16c42abd50b6b1af72ee969747842af74d33d212de35a8b88758db987f4243a6cce6bdd704f48da98d6ab173634ea5dd25be8b0513cb09a32aa8d88d8d4887b486fa0c3bf7ba3ebee09bd6a449b11b1a561f790d4d1613d6f75cd3da10c86b51511db1a720f4917cfb738168f9bf61ad2b67b42ba380f8ff04e57dd13caa99ae28e06dd4392c379588b4749a70d6ac73d21399c87bf7dd065f7845c5cd1fb88d8d5807b482a380f7fe131d17d03da754f48051d4644eca9df3d2153fdda734f48021d12a1192946e6df1f7ed245f70444445cd2c788d8579f7b884dbee761ce7fea69ead3be7b824dbe1d02e9c8b4c3cfbae09e80235cd067f7048f1c3bfca2f3ee0938d6797d714f30c8ae43224cdf397d754fe8b6bc3afcaa73ee0968486e29e6d52190a68c3afca6b3ee0968c2597d734fe89e8c3a0492954b87dff5af7b029af6afbebb2774492e1d0229cba2c31f3ae39e80133aa31fee09dd90458740e2e810f02b7f873f75da3d012d39ad9fee091d57fe0e81f4d121e04787801f1d027e7408f8d121e04787801f1d027ee5ef30877f052eb71cfe2746f93b04d24787805f161d66f2dc9952cae4396b597408242e970ef379858532c9e7d54c72e9104859461d66f53a7c2590d5eb5c66d42190acbc3accedd5da7b576eef8090578791ebdb09f596dc228c0c3b0c524c5b9e6fc895638791f1fb5d262edbf787cdb4432029f976d8a77df704fccfbefadc136c4eb907385dd4a7222a1f75c93d24771f75a9884a1115f7109b7ccfc303fdda734fc8da9efadd13fce83082147d88b08a0e7f19d0ae7b42767635e09e908aacbf3fac71591f8aa8bcd715f790f27baf2b997f435883f3b0d6a076dc134a6e4783ee09c9e13c3cc255bd2ba2b2ad21f790b2d9d610c7e091380f8f35a46df78452e1eb5a1d9c87f55cd3db222a5b1a760fe96d5b1ae618ac8f0effeebade1451d9d4887b48efd9d4080536820e1b35aa8d222aaf75c33da4376c68342228b04174d89c1b7a5dfd02bfae31f79614ad6bacfafb43814da1c313baa9574554d634ee1e928a358d93df89d1614b6ee96544145159d5847b8bc7aa26aaed51602be8b03d6eeb45f53458d1a47b4b37ac6892bf7fb6111db6d91d3d3f381f9635e59ed34ecb9a3af8a5915f7bd16107ddd5b3ea437649d3ee2d27b7a4698ebe4ea3c36eb8a7a7874f9245cdb817d5b3a899c3e1915f17d0a1c17d3d39fc282fa2b2a059d79805cdd68c21bceea3c3243cd0e39a23e8e0635e73addfffbce60edf67cda768fdfed1223a4cdd433dfab39c23afa97fa5f75781fa78be05e04787801f1d027e7408f8d121e04787801f1d027e7408f8d121e04787801f1d027e7408f8d121e04787801f1d027e7408f8d121e04787801f1d027e7408f8d121e04787801f1d027e7408f8d121e04787801f1d027e7408f8d121e04787801f1d027e7408f8d121e04787801f1d027e7408f8d121e0478780df7f6aed3e97f932cc840000000049454e44ae426082")

    func testADecodeNeverReadsAReleasedCopy() throws {
        var first: [UInt8]?
        for i in 0..<50 {
            let info = try ImageCodec.validate(Self.rgb301)
            XCTAssertEqual([info.width, info.height], [301, 157])
            let px = try ImageCodec.decodeRGBA(Self.rgb301, info)
            _ = [UInt8](repeating: UInt8(i), count: Self.rgb301.count * 2) // reuse freed memory
            if let f = first { XCTAssertEqual(px, f, "decode \(i)") } else { first = px }
        }
    }

    /// A box larger than the image (even past the pixel limit) gives the image's size.
    func testABoxLargerThanTheImageIsTheImagesSize() throws {
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: gradient(30, 20), width: 30, height: 20))
        let v = try ImageCodec.variant(png, VariantSpec(maxWidth: 65_535, maxHeight: 65_535, quality: nil), pixelLimit: 2_000)
        XCTAssertEqual([v.width, v.height], [30, 20])
        let spec = VariantSpec(maxWidth: 65_535, maxHeight: 10, fit: .cover)
        XCTAssertEqual(spec.clamped(width: 30, height: 20).canonical, VariantSpec(maxWidth: 30, maxHeight: 10, fit: .cover).canonical)
        XCTAssertEqual(try ImageCodec.variant(png, spec).width, try ImageCodec.variant(png, spec.clamped(width: 30, height: 20)).width)
    }

    func gray16(_ value: UInt16, extra: [UInt8] = []) -> [UInt8] {
        let ihdr = be32(2) + be32(2) + [16, 0, 0, 0, 0]
        let row: [UInt8] = [0, UInt8(value >> 8), UInt8(value & 0xFF), UInt8(value >> 8), UInt8(value & 0xFF)]
        return pngSignature + chunk("IHDR", ihdr) + extra + chunk("IDAT", zlibStored(row + row)) + chunk("IEND", [])
    }

    /// libpng's simplified reader took 16-bit data without colour-space chunks as linear
    /// light: mid-grey 0x8080 came out as 186.
    func testSixteenBitGreyWithoutGammaKeepsItsValue() throws {
        let png = gray16(0x8080)
        let px = try ImageCodec.decodeRGBA(png, ImageCodec.validate(png))
        XCTAssertEqual(Array(px[0..<4]), [128, 128, 128, 255])
        // With its own gAMA (1/2.2 as 45455) nothing is added.
        let withGamma = gray16(0x8080, extra: chunk("gAMA", be32(45_455)))
        XCTAssertEqual(try ImageCodec.decodeRGBA(withGamma, ImageCodec.validate(withGamma))[0], 128)
    }

    /// Text and ICC chunks never reach libpng (they inflate on read: 150 zTXt chunks of a 1 MB
    /// file inflated to ~1 GB); a bad CRC anywhere is refused; bytes after IEND are ignored.
    func testOnlyThePixelChunksAreDecodedAndEveryCRCIsChecked() throws {
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: gradient(8, 8), width: 8, height: 8))
        let bomb = Array(png[0..<33]) + chunk("zTXt", Array("Comment".utf8) + [0, 0] + [UInt8](repeating: 0x78, count: 64))
            + chunk("iCCP", Array("icc".utf8) + [0, 0, 1, 2, 3]) + chunk("tEXt", Array("a\u{0}b".utf8)) + Array(png[33...])
        let copy = try PNGChunks.decodable(bomb)
        XCTAssertEqual(try PNGChunks.scan(copy).chunks.map(\.type), try PNGChunks.scan(png).chunks.map(\.type),
                       "the decoded copy holds the pixel chunks only")
        XCTAssertNoThrow(try ImageCodec.validate(bomb))
        // The header read (IMAGE_INFO, META) gets no text chunk either.
        let header = PNGChunks.headerCopy(bomb)
        XCTAssertFalse(String(decoding: header, as: UTF8.self).contains("zTXt"))
        XCTAssertFalse(String(decoding: header, as: UTF8.self).contains("iCCP"))
        XCTAssertEqual(try ImageCodec.inspect(bomb).width, 8)
        var badCRC = bomb
        badCRC[33 + 8 + 3] ^= 1 // inside the zTXt chunk's data
        XCTAssertThrowsError(try ImageCodec.validate(badCRC)) { XCTAssertTrue("\($0)".contains("CRC"), "\($0)") }
        XCTAssertNoThrow(try ImageCodec.validate(png + Array("trailing bytes".utf8)), "bytes after IEND are ignored")
        XCTAssertThrowsError(try ImageCodec.validate(Array(png.dropLast(12))), "cut before IEND")
    }

    /// GIF and JPEG: bytes after the trailer or end-of-image marker are ignored; a file cut
    /// before it is still refused.
    func testGIFAndJPEGWithBytesAfterTheirEndAreAccepted() throws {
        let gif: [UInt8] = Array("GIF89a".utf8) + [1, 0, 1, 0, 0, 0, 0] + [0x2C, 0, 0, 0, 0, 1, 0, 1, 0, 0, 2, 2, 0x44, 0x01, 0, 0x3B]
        XCTAssertNoThrow(try ImageCodec.validate(gif))
        XCTAssertNoThrow(try ImageCodec.validate(gif + [0, 1, 2, 3]))
        XCTAssertThrowsError(try ImageCodec.validate(Array(gif.dropLast(3))))
        let jpeg: [UInt8] = [0xFF, 0xD8, 0xFF, 0xC0, 0, 11, 8, 0, 1, 0, 1, 1, 1, 0x11, 0, 0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 0x3F, 0, 0x12, 0x34, 0xFF, 0xD9]
        XCTAssertNoThrow(try ImageCodec.validate(jpeg))
        XCTAssertNoThrow(try ImageCodec.validate(jpeg + Array("appended".utf8)))
        XCTAssertThrowsError(try ImageCodec.validate(Array(jpeg.dropLast(2))))
        // An EXIF thumbnail's end marker before the image's scan does not end the image.
        let thumb: [UInt8] = [0xFF, 0xE1, 0, 6, 0xFF, 0xD8, 0xFF, 0xD9]
        XCTAssertThrowsError(try ImageCodec.validate(Array(jpeg[0..<2]) + thumb + Array(jpeg[2..<(jpeg.count - 2)])))
    }

    func apng(frames: [(seq: UInt32, w: UInt32, h: UInt32, x: UInt32, y: UInt32)], declared: UInt32, fdatSeq: [UInt32],
              fdatData: [UInt8] = [0x78, 0x01]) throws -> [UInt8] {
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: gradient(8, 8), width: 8, height: 8))
        let scan = try PNGChunks.scan(png)
        let idat = scan.chunks.filter { $0.type == "IDAT" }.map { Array(png[$0.at..<$0.at + 12 + $0.length]) }.joined()
        func fctl(_ f: (seq: UInt32, w: UInt32, h: UInt32, x: UInt32, y: UInt32)) -> [UInt8] {
            chunk("fcTL", be32(f.seq) + be32(f.w) + be32(f.h) + be32(f.x) + be32(f.y) + [0, 1, 0, 10, 0, 0])
        }
        var out = Array(png[0..<33]) + chunk("acTL", be32(declared) + be32(0))
        out += fctl(frames[0]) + idat
        for (i, f) in frames.dropFirst().enumerated() {
            out += fctl(f)
            if i < fdatSeq.count { out += chunk("fdAT", be32(fdatSeq[i]) + fdatData) }
        }
        return out + chunk("IEND", [])
    }

    /// APNG structure, as the spec says validation checks it.
    func testAPNGStructureIsChecked() throws {
        let good = try apng(frames: [(0, 8, 8, 0, 0), (1, 4, 4, 2, 2)], declared: 2, fdatSeq: [2])
        XCTAssertEqual(try ImageCodec.validate(good).frameCount, 2)
        let cases: [(String, [UInt8])] = [
            ("acTL declares 5", try apng(frames: [(0, 8, 8, 0, 0), (1, 4, 4, 2, 2)], declared: 5, fdatSeq: [2])),
            ("sequence out of order", try apng(frames: [(0, 8, 8, 0, 0), (3, 4, 4, 2, 2)], declared: 2, fdatSeq: [2])),
            ("fdAT out of order", try apng(frames: [(0, 8, 8, 0, 0), (1, 4, 4, 2, 2)], declared: 2, fdatSeq: [7])),
            ("frame outside the canvas", try apng(frames: [(0, 8, 8, 0, 0), (1, 4, 4, 6, 2)], declared: 2, fdatSeq: [2])),
            ("empty frame", try apng(frames: [(0, 8, 8, 0, 0), (1, 0, 4, 2, 2)], declared: 2, fdatSeq: [2])),
            ("frame without data", try apng(frames: [(0, 8, 8, 0, 0), (1, 4, 4, 2, 2)], declared: 2, fdatSeq: [])),
            ("default image not the canvas", try apng(frames: [(0, 4, 8, 0, 0), (1, 4, 4, 2, 2)], declared: 2, fdatSeq: [2])),
            ("an fdAT of its sequence number only", try apng(frames: [(0, 8, 8, 0, 0), (1, 4, 4, 2, 2)], declared: 2, fdatSeq: [2], fdatData: [])),
        ]
        for (why, bytes) in cases {
            XCTAssertThrowsError(try ImageCodec.validate(bytes), why)
        }
        XCTAssertEqual(try ImageCodec.inspect(cases[0].1).frameCount, 2, "the frames the file holds, not acTL's claim")
    }
}

/// What an outside review (img1) found validation let through, or a variant made of a file
/// validation refuses.
final class ImageReviewTests: XCTestCase {
    /// An animated WebP whose first frame does not decode: its structure demuxes, so only
    /// decoding the frame (a variant's source) finds it.
    func testAnAnimatedWebPWithACorruptFirstFrameIsRefused() throws {
        var bad = ImageEdgeTests.sticker
        let vp8l = try XCTUnwrap((0..<(bad.count - 4)).first { Array(bad[$0..<$0 + 4]) == Array("VP8L".utf8) })
        let size = Int(bad[vp8l + 4]) | Int(bad[vp8l + 5]) << 8
        for i in (vp8l + 8 + 5)..<(vp8l + 8 + size) { bad[i] = 0 }
        XCTAssertThrowsError(try ImageCodec.validate(bad)) { e in
            XCTAssertEqual((e as? ImageError)?.message, "WebP data does not decode (truncated or corrupt)")
        }
        XCTAssertThrowsError(try ImageCodec.variant(bad, VariantSpec(maxWidth: 40, maxHeight: 40)), "and no variant is made of it")
        XCTAssertNoThrow(try ImageCodec.validate(ImageEdgeTests.sticker))
    }

    func testAGIFWithoutAnImageAndAJPEGWithoutAScanAreRefused() throws {
        let empty: [UInt8] = Array("GIF89a".utf8) + [10, 0, 10, 0, 0x80, 0, 0, 255, 255, 255, 0, 0, 0, 0x3B]
        XCTAssertThrowsError(try ImageCodec.validate(empty)) { e in
            XCTAssertEqual((e as? ImageError)?.message, "GIF has no image (no image descriptor before its trailer)")
        }
        let noScan: [UInt8] = [0xFF, 0xD8, 0xFF, 0xC0, 0, 11, 8, 0, 16, 0, 32, 1, 1, 0x11, 0, 0xFF, 0xD9]
        XCTAssertThrowsError(try ImageCodec.validate(noScan)) { e in XCTAssertEqual((e as? ImageError)?.kind, .corrupt) }
    }

    /// Validation refuses a PNG cut before IEND; a variant of one stored unvalidated was made.
    func testAVariantIsNotMadeOfAPNGWithoutIEND() throws {
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: gradient(64, 48), width: 64, height: 48))
        let cut = Array(png.dropLast(12))
        XCTAssertThrowsError(try ImageCodec.variant(cut, VariantSpec(maxWidth: 16, maxHeight: 16))) { e in
            XCTAssertEqual((e as? ImageError)?.message, "PNG ends before its IEND chunk: truncated")
        }
        XCTAssertEqual(try ImageCodec.variant(png, VariantSpec(maxWidth: 16, maxHeight: 16)).width, 16)
    }

    /// The JPEG check walks the segments: a comment (or an EXIF thumbnail) holding FF DA and
    /// FF D9 does not stand in for the image's own scan and end (img2: a photo cut before its
    /// scan passed when its thumbnail held both).
    func testAJPEGCutBeforeItsScanIsRefusedWhateverItsSegmentsHold() throws {
        let sof: [UInt8] = [0xFF, 0xC0, 0, 11, 8, 0, 16, 0, 32, 1, 1, 0x11, 0]
        let comment: [UInt8] = [0xFF, 0xFE, 0, 8, 0xFF, 0xDA, 0, 1, 0xFF, 0xD9]
        let thumbnail: [UInt8] = [0xFF, 0xE1, 0, 10, 0xFF, 0xD8, 0xFF, 0xDA, 0, 0, 0xFF, 0xD9]
        let scan: [UInt8] = [0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 0x3F, 0, 0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD0, 0x56]
        let whole = [0xFF, 0xD8] + comment + thumbnail + sof + scan + [0xFF, 0xD9]
        XCTAssertNoThrow(try ImageCodec.validate(whole))
        XCTAssertNoThrow(try ImageCodec.validate(whole + [1, 2, 3]), "bytes after the end are ignored")
        let cutBeforeScan = [0xFF, 0xD8] + comment + thumbnail + sof + [0xFF, 0xD9]
        XCTAssertThrowsError(try ImageCodec.validate(cutBeforeScan)) { e in XCTAssertEqual((e as? ImageError)?.kind, .corrupt) }
        XCTAssertThrowsError(try ImageCodec.validate(Array(whole.dropLast(2))), "no end after the scan") { e in
            XCTAssertEqual((e as? ImageError)?.kind, .truncated)
        }
        XCTAssertThrowsError(try ImageCodec.validate(Array(([0xFF, 0xD8] + comment + thumbnail + sof).prefix(20))))
    }

    /// PNG's sides are at most 2^31 − 1: one past it gets the same message from IMAGE_INFO
    /// (no pixel limit) and from validation (outside review img2 N5: three messages, one of
    /// them libpng's); sides within it are measured against the pixel limit.
    func testAPNGSidePastItsRangeIsRefusedWithOneMessage() throws {
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: gradient(4, 4), width: 4, height: 4))
        for (w, h): (UInt32, UInt32) in [(0xFFFF_FFFF, 0xFFFF_FFFF), (0x8000_0000, 1), (1, 0x8000_0000)] {
            var huge = png
            for i in 0..<4 { huge[16 + i] = UInt8(truncatingIfNeeded: w >> (24 - 8 * i)); huge[20 + i] = UInt8(truncatingIfNeeded: h >> (24 - 8 * i)) }
            let message = "PNG's IHDR gives \(w)×\(h) pixels; PNG allows sides of at most 2147483647"
            XCTAssertThrowsError(try ImageCodec.inspect(huge, pixelLimit: .max)) { XCTAssertEqual(($0 as? ImageError)?.message, message) }
            XCTAssertThrowsError(try ImageCodec.validate(huge)) { XCTAssertEqual(($0 as? ImageError)?.message, message) }
        }
        var big = png
        for i in 16..<24 { big[i] = i % 4 == 0 ? 0x7F : 0xFF } // 2147483647 × 2147483647
        XCTAssertThrowsError(try ImageCodec.validate(big)) {
            XCTAssertEqual(($0 as? ImageError)?.message, "PNG claims 2147483647×2147483647 pixels; the limit is 25000000")
        }
    }
}
