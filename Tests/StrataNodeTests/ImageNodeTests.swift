import Foundation
import XCTest
import StrataClient
import StrataCore
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
        // A negative entry's message is no image, whatever its first bytes.
        var negative = SetRequest(key: b("failed.png"), value: Array(big.prefix(20)))
        negative.negative = true
        XCTAssertEqual(try c.set(negative).statusCode, .ok)
    }
}

/// An opaque RGBA gradient PNG of `width` × `height` (the node tests' usual original).
func gradientPNG(width: Int, height: Int) throws -> [UInt8] {
    let rgba: [UInt8] = (0..<(width * height)).flatMap { i -> [UInt8] in [UInt8(i % 256), 30, 200, 255] }
    return try XCTUnwrap(ImageCodec.encodePNG(rgba: rgba, width: width, height: height))
}

final class VariantNodeTests: XCTestCase {
    func testVariantsAreComputedOnceStoredAndFollowTheOriginal() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let c = try node.connect()
        let png = try gradientPNG(width: 300, height: 200)
        XCTAssertEqual(try c.set(SetRequest(key: b("photo"), value: png)).statusCode, .ok)

        let info = try c.call(.imageInfo(namespace: [], key: b("photo")))
        XCTAssertEqual(info.statusCode, .ok)
        XCTAssertEqual(info.extras.first, ImageFormat.png.rawValue)

        let req = VariantRequest(key: b("photo"), maxWidth: 100, maxHeight: 100)
        let first = try Responses.parseImageVariant(c.call(.imageVariant(req)))
        XCTAssertEqual([first.width, first.height], [100, 67])
        XCTAssertFalse(first.cached)
        XCTAssertEqual(try ImageCodec.validate(first.bytes).format, .webpLossy)
        let second = try Responses.parseImageVariant(c.call(.imageVariant(req)))
        XCTAssertTrue(second.cached)
        XCTAssertEqual(second.bytes, first.bytes)

        // Concurrent requests for a new spec share one computation: exactly one is not "cached".
        var coverSpec = VariantRequest(key: b("photo"), maxWidth: 50, maxHeight: 50)
        coverSpec.fit = 1; coverSpec.format = 1
        let cover = coverSpec
        let port = node.port
        let results = SharedList<Bool>()
        DispatchQueue.concurrentPerform(iterations: 6) { _ in
            guard let conn = try? NodeConnection(host: "127.0.0.1", port: port),
                  let f = try? conn.call(.imageVariant(cover)), let v = try? Responses.parseImageVariant(f) else { return }
            results.append(v.cached)
        }
        XCTAssertEqual(results.all.count, 6)
        XCTAssertEqual(results.all.filter { !$0 }.count, 1, "\(results.all)")

        // Replacing the original: the next variant is computed from the new image.
        let small = try gradientPNG(width: 40, height: 20)
        XCTAssertEqual(try c.set(SetRequest(key: b("photo"), value: small)).statusCode, .ok)
        let afterReplace = try Responses.parseImageVariant(c.call(.imageVariant(req)))
        XCTAssertFalse(afterReplace.cached)
        XCTAssertEqual([afterReplace.width, afterReplace.height], [40, 20], "never enlarged, and from the new original")
        // Deleting the original: NOT_FOUND.
        XCTAssertEqual(try c.call(.delete(namespace: [], key: b("photo"), tiers: 0, version: nil, writeBehind: false)).statusCode, .ok)
        XCTAssertEqual(try c.call(.imageVariant(req)).statusCode, .notFound)
        // Not an image.
        XCTAssertEqual(try c.set(SetRequest(key: b("text"), value: b("hello world, not an image"))).statusCode, .ok)
        XCTAssertEqual(try c.call(.imageVariant(VariantRequest(key: b("text"), maxWidth: 10, maxHeight: 10))).statusCode, .invalidImage)
        XCTAssertEqual(try c.call(.imageInfo(namespace: [], key: b("text"))).statusCode, .invalidImage)
    }
}

extension VariantNodeTests {
    /// An original replaced while its variant is being made: the variant (of the old version)
    /// is dropped once stored (an outside review, img2: it outlived the change, 12 of 12 runs).
    func testAVariantMadeWhileItsOriginalChangesIsDropped() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let c = try node.connect()
        let big = try gradientPNG(width: 4000, height: 3000)
        let set = try c.set(SetRequest(key: b("photo"), value: big))
        XCTAssertEqual(set.statusCode, .ok)
        let old = set.cas
        let port = node.port
        let answered = Completion<Bool>()
        var req = VariantRequest(key: b("photo"), maxWidth: 64, maxHeight: 64); req.format = 1
        let request = req
        DispatchQueue.global().async {
            let conn = try? NodeConnection(host: "127.0.0.1", port: port, timeout: 30)
            answered.fulfil((try? conn?.call(.imageVariant(request)))??.statusCode == .ok)
        }
        Thread.sleep(forTimeInterval: 0.05) // the variant is being made (a 12 MP decode and resize: ~0.17 s)
        XCTAssertEqual(try c.set(SetRequest(key: b("photo"), value: try gradientPNG(width: 40, height: 30))).statusCode, .ok)
        XCTAssertEqual(answered.wait(seconds: 30), true)
        let derived = b("photo") + [0] + b("variant:\(String(old, radix: 16)):w=64,h=64,fit=contain,fmt=png")
        XCTAssertTrue(eventually { (try? c.get(derived)) == .some(nil) }, "the old version's variant is gone")
    }
}

final class ImageCLITests: XCTestCase {
    func testImageCommandsAndTwentyConcurrentVariantsDoOneTransform() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let server = ["--server", "127.0.0.1:\(node.port)"]
        var rgba = [UInt8](repeating: 255, count: 320 * 240 * 4)
        for i in 0..<(320 * 240) { rgba[i * 4] = UInt8(i % 256); rgba[i * 4 + 1] = UInt8((i / 320) % 256); rgba[i * 4 + 2] = 90 }
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: rgba, width: 320, height: 240))
        var r = try runCLI(["set", "pic", "--validate-image"] + server, stdin: png)
        XCTAssertEqual(r.code, 0, r.err)
        r = try runCLI(["set", "broken", "--validate-image"] + server, stdin: Array(png.prefix(200)))
        XCTAssertEqual(r.code, 3)
        XCTAssertTrue(r.err.contains("INVALID_IMAGE"), r.err)
        r = try runCLI(["image-info", "pic"] + server)
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertTrue(String(decoding: r.out, as: UTF8.self).contains("320×240"))
        // 20 concurrent identical requests: one transform (checked through stats).
        let port = node.port
        let ok = Counter()
        DispatchQueue.concurrentPerform(iterations: 20) { _ in
            if let c = try? NodeConnection(host: "127.0.0.1", port: port),
               let f = try? c.call(.imageVariant(VariantRequest(key: b("pic"), maxWidth: 64, maxHeight: 64))), f.statusCode == .ok { ok.add() }
        }
        XCTAssertEqual(ok.load(), 20)
        r = try runCLI(["keys"] + server)
        XCTAssertEqual(String(decoding: r.out, as: UTF8.self), "pic\n", "variant keys are not listed")
        let stats = try JSONSerialization.jsonObject(with: Data(try node.connect().stats().utf8)) as! [String: Any]
        XCTAssertEqual(stats["variants_computed"] as? Int, 1)
        XCTAssertEqual(stats["images_stored_png"] as? Int, 1, "the refused one is not counted")
        r = try runCLI(["variant", "pic", "--width", "100", "--height", "100", "--fit", "cover", "--format", "png"] + server)
        XCTAssertEqual(r.code, 0, r.err)
        let info = try ImageCodec.validate(r.out)
        XCTAssertEqual([info.width, info.height], [100, 100])
        XCTAssertEqual(try runCLI(["variant", "pic", "--width", "0", "--height", "5"] + server).code, 2)
        XCTAssertEqual(try runCLI(["variant", "nope", "--width", "5", "--height", "5"] + server).code, 1)
    }
}

/// Outside review img2 against a running node: stored variants are bounded per original, a
/// box past the image is one variant, and the memcached listener validates images too.
final class ImageLimitNodeTests: XCTestCase {
    /// A reader asking for every size filled the disk tier with variants and evicted the
    /// writers' items (and the original): past 32 stored variants of one original, more are
    /// answered without being stored.
    func testStoredVariantsAreBoundedPerOriginalAndLargeBoxesShareOne() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let c = try node.connect()
        let rgba: [UInt8] = (0..<(60 * 40)).flatMap { i -> [UInt8] in [UInt8(i % 256), 30, 200, 255] }
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: rgba, width: 60, height: 40))
        XCTAssertEqual(try c.set(SetRequest(key: b("photo"), value: png)).statusCode, .ok)
        for w in 1...40 {
            let v = try Responses.parseImageVariant(c.call(.imageVariant(VariantRequest(key: b("photo"), maxWidth: UInt16(w), maxHeight: 40))))
            XCTAssertEqual(Int(v.width), w)
        }
        var s = try nodeStats(c)
        XCTAssertEqual(s["variants_computed"] as? Int, 40)
        XCTAssertEqual(s["variants_not_stored"] as? Int, 8, "32 stored, 8 answered only")
        let keys = try Responses.parseScan(c.call(.scan(namespace: [], cursor: [], limit: 1000)))
        XCTAssertEqual(keys.keys, [b("photo")], "variants stay hidden from SCAN")
        // Asked again: one of the first 32 is a stored hit; one past them is made again.
        XCTAssertTrue(try Responses.parseImageVariant(c.call(.imageVariant(VariantRequest(key: b("photo"), maxWidth: 1, maxHeight: 40)))).cached)
        XCTAssertFalse(try Responses.parseImageVariant(c.call(.imageVariant(VariantRequest(key: b("photo"), maxWidth: 40, maxHeight: 40)))).cached)

        // Boxes past the image (even past the pixel limit) are the image's size, one stored copy.
        XCTAssertEqual(try c.set(SetRequest(key: b("small"), value: png)).statusCode, .ok)
        for (w, h) in [(60, 40), (5_001, 5_000), (65_535, 65_535)] {
            var r = VariantRequest(key: b("small"), maxWidth: UInt16(w), maxHeight: UInt16(h))
            r.quality = 255
            let v = try Responses.parseImageVariant(c.call(.imageVariant(r)))
            XCTAssertEqual([v.width, v.height], [60, 40], "\(w)×\(h)")
        }
        s = try nodeStats(c)
        XCTAssertEqual(s["variants_computed"] as? Int, 40 + 1 + 1, "the three boxes made one variant")
    }

    /// `--validate-images` held only for the binary protocol: corrupt images were stored through
    /// the memcached listener's set, ms, append and prepend.
    func testTheMemcachedListenerValidatesImagesToo() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path + "/data", extra: ["--memcached-port", "0", "--validate-images"])
        let mc = try TextSocket(port: try XCTUnwrap(node.memcachedPort))
        let rgba: [UInt8] = (0..<(32 * 32)).flatMap { i -> [UInt8] in [UInt8(i % 256), 30, 200, 255] }
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: rgba, width: 32, height: 32))
        let cut = Array(png.prefix(png.count - 30))
        func set(_ verb: String, _ key: String, _ value: [UInt8], noreply: Bool = false) -> String {
            mc.send(Array("\(verb) \(key) 0 0 \(value.count)\(noreply ? " noreply" : "")\r\n".utf8) + value + Array("\r\n".utf8))
            return mc.line()
        }
        XCTAssertEqual(set("set", "good.png", png), "STORED")
        XCTAssertTrue(set("set", "bad.png", cut).hasPrefix("SERVER_ERROR invalid image: "))
        // With noreply nothing is sent, the refusal included (as memcached): the next answer is the next command's.
        mc.send(Array("set bad.png 0 0 \(cut.count) noreply\r\n".utf8) + cut + Array("\r\nmn\r\n".utf8))
        XCTAssertEqual(mc.line(), "MN", "nothing for the refused noreply set")
        XCTAssertEqual(set("set", "text", Array("plain text".utf8)), "STORED", "values that are no image are not checked")
        mc.send(Array("ms bad2.png \(cut.count)\r\n".utf8) + cut + Array("\r\n".utf8))
        XCTAssertTrue(mc.line().hasPrefix("SERVER_ERROR invalid image: "))
        // Appending after IEND leaves a valid PNG; prepending a cut PNG to a text value makes
        // a corrupt one, refused (the text stays).
        XCTAssertEqual(set("append", "good.png", Array("tail".utf8)), "STORED")
        XCTAssertEqual(set("set", "t", Array("text".utf8)), "STORED")
        XCTAssertTrue(set("prepend", "t", cut).hasPrefix("SERVER_ERROR invalid image: "))
        mc.send("get t\r\n")
        XCTAssertEqual(mc.line(), "VALUE t 0 4")
        XCTAssertEqual(mc.line(), "text")
        XCTAssertEqual(mc.line(), "END")
        mc.send("mg bad.png v\r\nmg bad2.png v\r\nmn\r\n")
        XCTAssertEqual(mc.line(), "EN")
        XCTAssertEqual(mc.line(), "EN")
        XCTAssertEqual(mc.line(), "MN")
        mc.send("mg good.png s\r\n")
        XCTAssertEqual(mc.line(), "HD s\(png.count + 4)")
    }
}
