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
            XCTAssertEqual((e as? ImageError)?.kind, .corrupt)
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
        let jpeg: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 0, 0, 0xFF, 0xC0, 0, 11, 8, 0, 16, 0, 32, 1, 1, 0x11, 0, 0xFF, 0xD9]
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
