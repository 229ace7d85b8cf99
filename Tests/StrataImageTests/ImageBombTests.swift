import Foundation
import XCTest
import TestSupport
@testable import StrataImage

/// Issue 16 item 3: a PNG's decode costs what its header allows, never what its data inflates to.
final class ImageBombTests: XCTestCase {
    /// CPU seconds this process has used (user + system).
    static func cpuSeconds() -> Double {
        var u = rusage()
        getrusage(RUSAGE_SELF.rawValue, &u)
        return Double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + Double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6
    }

    private func refusal(_ png: [UInt8]) -> ImageError? {
        do { try ImageCodec.validate(png); return nil } catch { return error }
    }

    /// A 1×1 PNG whose IDAT inflates to 256 MiB (libpng alone inflated all of it: 0.5 s of CPU)
    /// is refused as corrupt after inflating a few bytes past its 5.
    func testExtraCompressedDataIsRefusedAtOnce() throws {
        let bomb = PNGBomb.make(width: 1, height: 1, inflated: 256 << 20)
        let c0 = Self.cpuSeconds()
        let e = try XCTUnwrap(refusal(bomb))
        let cpu = Self.cpuSeconds() - c0
        XCTAssertEqual(e.kind, .corrupt)
        XCTAssertTrue(e.message.contains("decompression bomb"), e.message)
        XCTAssertLessThan(cpu, 0.1, "CPU spent refusing the bomb")
        // Same for an image of legal size with a megabyte of extra data.
        let big = PNGBomb.make(width: 1000, height: 1000, inflated: 1000 * 4001 + (1 << 20))
        XCTAssertEqual(refusal(big)?.kind, .corrupt)
        // Exactly what the header needs validates (an all-zero image).
        XCTAssertNil(refusal(PNGBomb.make(width: 1000, height: 1000)))
    }

    /// A header whose pixel data would pass the decode limit is refused before inflating:
    /// 5000 × 5000 16-bit RGBA is 25 MP (within the pixel limit) but 200 MB decoded.
    func testPixelDataPastTheDecodeLimitIsRefusedFromTheHeader() throws {
        let deep = PNGBomb.make(width: 5000, height: 5000, bitDepth: 16)
        let c0 = Self.cpuSeconds()
        let e = try XCTUnwrap(refusal(deep))
        XCTAssertLessThan(Self.cpuSeconds() - c0, 0.05)
        XCTAssertEqual(e.kind, .tooManyPixels)
        XCTAssertNoThrow(try ImageCodec.validate(deep, decodeLimit: 256 << 20), "a node may raise the limit")
        XCTAssertThrowsError(try ImageCodec.variant(deep, VariantSpec(maxWidth: 10, maxHeight: 10)))
    }

    /// The decoded size the check expects is exact for every color type, depth and
    /// interlacing: exactly that much validates, 64 KiB more is refused.
    func testExpectedPixelDataIsExactForEveryLayout() throws {
        let layouts: [(UInt8, UInt8)] = [(0, 1), (0, 8), (0, 16), (2, 8), (2, 16), (4, 8), (4, 16), (6, 8), (6, 16)]
        for (colorType, depth) in layouts {
            for interlace: UInt8 in [0, 1] {
                for (w, h) in [(1, 1), (3, 5), (17, 9), (64, 33)] {
                    let probe = PNGBomb.make(width: w, height: h, bitDepth: depth, colorType: colorType, interlace: interlace, inflated: 1)
                    let expected = try XCTUnwrap(ImageCodec.pngRawBytes(probe))
                    let exact = PNGBomb.make(width: w, height: h, bitDepth: depth, colorType: colorType, interlace: interlace, inflated: expected)
                    let what = "type \(colorType) depth \(depth) interlace \(interlace) \(w)×\(h)"
                    XCTAssertNil(refusal(exact), what)
                    let over = PNGBomb.make(width: w, height: h, bitDepth: depth, colorType: colorType, interlace: interlace, inflated: expected + (64 << 10) + 1)
                    XCTAssertEqual(refusal(over)?.kind, .corrupt, what)
                }
            }
        }
    }

    func testDeclaredDecodeBytesReadsHeadersOnly() throws {
        XCTAssertEqual(ImageCodec.declaredDecodeBytes(PNGBomb.make(width: 10, height: 2)), 2 * 41)
        XCTAssertEqual(ImageCodec.declaredDecodeBytes(PNGBomb.make(width: 1, height: 1, inflated: 1 << 20)), 5)
        let webp = try XCTUnwrap(ImageCodec.encodeWebP(rgba: gradient(8, 4), width: 8, height: 4))
        XCTAssertEqual(ImageCodec.declaredDecodeBytes(webp), 8 * 4 * 4)
        XCTAssertNil(ImageCodec.declaredDecodeBytes(Array("not an image".utf8)))
    }

    /// Outside review sec3: a 68-byte PNG claiming 2^31−1 × 2^31−1 16-bit RGBA pixels
    /// overflowed the header arithmetic and killed the node (on its event loop). The claim
    /// saturates, and the image is refused like any other over the limits.
    func testHugeHeaderClaimsSaturateInsteadOfTrapping() throws {
        let side = Int(Int32.max)
        for (depth, type, interlace) in [(UInt8(16), UInt8(6), UInt8(0)), (8, 2, 0), (16, 6, 1), (16, 0, 1)] {
            let png = PNGBomb.make(width: side, height: side, bitDepth: depth, colorType: type, interlace: interlace, inflated: 8)
            XCTAssertGreaterThan(try XCTUnwrap(ImageCodec.declaredDecodeBytes(png)), 1 << 62, "depth \(depth) type \(type) interlace \(interlace)")
            XCTAssertThrowsError(try ImageCodec.validate(png, pixelLimit: 25_000_000, decodeLimit: 128 << 20))
        }
    }
}
