import Foundation
import XCTest
import StrataClient
import StrataImage
import StrataWire

final class ImageNodeTests: XCTestCase {
    func pixels(_ w: Int, _ h: Int) -> [UInt8] { (0..<(w * h)).flatMap { [UInt8($0 % 251), 40, 90, 255] } }

    func testValidatedSetsAndImageMetadata() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let c = try node.connect()
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: pixels(64, 48), width: 64, height: 48))
        var good = SetRequest(key: b("ok.png"), value: png)
        good.validateImage = true
        XCTAssertEqual(try c.set(good).statusCode, .ok)
        let m = try Responses.parseMeta(c.call(.meta(namespace: [], key: b("ok.png"), tiers: 0)))
        XCTAssertEqual(m.imageFormat, ImageFormat.png.rawValue)
        XCTAssertEqual([m.imageWidth, m.imageHeight], [64, 48])
        XCTAssertEqual(m.imageFrames, 1)
        XCTAssertEqual(m.encoding, 0, "PNG bytes are stored raw")

        var bad = SetRequest(key: b("bad.png"), value: Array(png.prefix(png.count - 40)))
        bad.validateImage = true
        let refused = try c.set(bad)
        XCTAssertEqual(refused.statusCode, .invalidImage)
        XCTAssertFalse(refused.value.isEmpty, "the reason is sent")
        XCTAssertNil(try c.get(b("bad.png")), "nothing was stored")

        var notImage = SetRequest(key: b("text"), value: b("plain text"))
        notImage.validateImage = true
        XCTAssertEqual(try c.set(notImage).statusCode, .invalidImage)
        XCTAssertEqual(try c.set(SetRequest(key: b("text"), value: b("plain text"))).statusCode, .ok, "without the flag anything goes")
        let plain = try Responses.parseMeta(c.call(.meta(namespace: [], key: b("text"), tiers: 0)))
        XCTAssertEqual(plain.imageFormat, 0)
    }

    func testNodeThatValidatesEveryImage() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path, extra: ["--validate-images", "--image-pixel-limit", "1000"])
        let c = try node.connect()
        let small = try XCTUnwrap(ImageCodec.encodeWebP(rgba: pixels(20, 20), width: 20, height: 20, quality: 70))
        XCTAssertEqual(try c.set(SetRequest(key: b("small.webp"), value: small)).statusCode, .ok)
        let big = try XCTUnwrap(ImageCodec.encodePNG(rgba: pixels(40, 40), width: 40, height: 40))
        let refused = try c.set(SetRequest(key: b("big.png"), value: big))
        XCTAssertEqual(refused.statusCode, .invalidImage)
        XCTAssertTrue(String(decoding: refused.value, as: UTF8.self).contains("limit"))
        XCTAssertEqual(try c.set(SetRequest(key: b("json"), value: b("{\"a\":1}"))).statusCode, .ok, "non-images are not checked")
    }
}
