import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataImage
import StrataWire

/// Images in a cluster (an outside review, img1): variants stay on the node that made them,
/// and the CLI's image options work through `--nodes` as through `--server`.
final class ClusterImageTests: XCTestCase {
    /// A variant is the node's own cache (PROTOCOL.md §7.16): handoff and anti-entropy never copy
    /// it, so no node is left holding one it does not track. Before, a variant made on a replica
    /// reached the derived key's other nodes and outlived every change of the original there.
    func testVariantsAreNotCopiedToOtherNodes() throws {
        let cluster = try SyncCluster(count: 3)
        let all = [0, 1, 2]
        let client = try cluster.client(all)
        let png = try gradientPNG(width: 300, height: 200)
        _ = try client.set(b("o.png"), png)
        let holders = cluster.replicaSet("o.png", all)
        let maker = holders[1] // a replica, not the owner
        let conn = try cluster.connect(maker)
        var derived: [[UInt8]] = []
        for w in stride(from: 20, through: 90, by: 10) {
            var r = VariantRequest(key: b("o.png"), maxWidth: UInt16(w), maxHeight: UInt16(w))
            r.format = 1 // PNG: its spec has no quality
            let v = try Responses.parseImageVariant(conn.call(.imageVariant(r)))
            XCTAssertFalse(v.cached)
            let version = try XCTUnwrap(conn.get(b("o.png"))).version
            derived.append(b("o.png") + [0] + b("variant:\(String(version, radix: 16)):w=\(w),h=\(w),fit=contain,fmt=png"))
        }
        for k in derived { XCTAssertNotNil(try conn.get(k), "the maker stored \(String(decoding: k, as: UTF8.self))") }
        // Several anti-entropy rounds (--sync-interval 0.5) and the handoff's delivery.
        Thread.sleep(forTimeInterval: 3)
        for i in all where i != maker {
            let c = try cluster.connect(i)
            for k in derived {
                XCTAssertNil(try c.get(k)?.version, "node \(i) got a copy of \(String(decoding: k, as: UTF8.self)) made on node \(maker)")
            }
        }
        // Deleting the original drops the maker's variants; nothing is left anywhere.
        XCTAssertTrue(try client.delete(b("o.png")))
        let deadline = Date().addingTimeInterval(10)
        var left = derived
        while !left.isEmpty && Date() < deadline {
            left = try derived.filter { try conn.get($0) != nil }
            if !left.isEmpty { Thread.sleep(forTimeInterval: 0.1) }
        }
        XCTAssertEqual(left.count, 0, "the maker dropped its variants")
        for i in all {
            let c = try cluster.connect(i)
            for k in derived { XCTAssertNil(try c.get(k)?.version, "node \(i)") }
        }
    }
}

extension ClusterImageTests {
    /// `set --validate-image`, `image-info` and `variant` through `--nodes` (img1: the flag was
    /// dropped and a truncated PNG stored on every node, exit 0; the image commands refused
    /// `--nodes`; `meta --nodes` had no image line).
    func testTheCLIsImageOptionsWorkThroughNodes() throws {
        let cluster = try SyncCluster(count: 2)
        let nodes = cluster.list([0, 1])
        let png = try gradientPNG(width: 120, height: 80)

        let bad = try runCLI(["set", "cut.png", "--validate-image", "--nodes", nodes], stdin: Array(png.prefix(60)))
        XCTAssertEqual(bad.code, 3, bad.err)
        XCTAssertTrue(bad.err.contains("INVALID_IMAGE"), bad.err)
        for i in 0..<2 { XCTAssertNil(try cluster.connect(i).get(b("cut.png")), "stored nowhere") }

        let good = try runCLI(["set", "ok.png", "--validate-image", "--nodes", nodes], stdin: png)
        XCTAssertEqual(good.code, 0, good.err)

        let info = try runCLI(["image-info", "ok.png", "--nodes", nodes])
        XCTAssertEqual(info.code, 0, info.err)
        XCTAssertEqual(String(decoding: info.out, as: UTF8.self), "format  png\nsize    120×80\nalpha   yes\nframes  1\n")

        let meta = try runCLI(["meta", "ok.png", "--nodes", nodes])
        XCTAssertEqual(meta.code, 0, meta.err)
        XCTAssertTrue(String(decoding: meta.out, as: UTF8.self).hasSuffix("image         png 120×80, alpha\n"), String(decoding: meta.out, as: UTF8.self))

        let v = try runCLI(["variant", "ok.png", "--width", "30", "--height", "30", "--format", "png", "--nodes", nodes])
        XCTAssertEqual(v.code, 0, v.err)
        let facts = try ImageCodec.validate(v.out)
        XCTAssertEqual([facts.width, facts.height], [30, 20])

        let missing = try runCLI(["image-info", "nothing.png", "--nodes", nodes])
        XCTAssertEqual(missing.code, 1, missing.err)
        XCTAssertEqual(missing.err, "not found: nothing.png\n")
    }
}

extension ClusterImageTests {
    /// While `--validate-images` is rolled out node by node, a node without it may hold an
    /// invalid image: the validating node neither takes it (pushed or pulled) nor fails its
    /// rounds over it (an outside review, img2: each refusal failed the round, and the other node
    /// flagged reads UNVERIFIED for a peer it could reach).
    func testAValidatingNodeTakesNoInvalidImageFromAPeerAndKeepsSyncing() throws {
        let cluster = try SyncCluster(count: 2, members: [], replicas: 2)
        try cluster.start(0, members: [0, 1])
        try cluster.start(1, members: [0, 1], more: ["--validate-images"])
        XCTAssertTrue(eventually { cluster.verified(0) && cluster.verified(1) })
        let png = try gradientPNG(width: 40, height: 30)
        let a = try cluster.connect(0)
        for i in 0..<6 { XCTAssertEqual(try a.set(SetRequest(key: b("bad\(i).png"), value: Array(png.prefix(50)))).statusCode, .ok) }
        XCTAssertEqual(try a.set(SetRequest(key: b("good.png"), value: png)).statusCode, .ok)
        let v = try cluster.connect(1)
        XCTAssertTrue(eventually { (try? v.get(b("good.png"))) != nil }, "the valid image is copied")
        XCTAssertTrue(eventually { ((try? nodeStats(a))?["sync_invalid_images"] as? Int ?? 0) + ((try? nodeStats(v))?["sync_invalid_images"] as? Int ?? 0) >= 6 })
        Thread.sleep(forTimeInterval: 2) // several rounds (--sync-interval 0.5)
        for i in 0..<6 { XCTAssertNil(try v.get(b("bad\(i).png"))?.version, "no invalid image on the validating node") }
        for s in [try nodeStats(a), try nodeStats(v)] {
            XCTAssertEqual(s["sync_failures"] as? Int, 0)
            XCTAssertEqual(s["cluster_verified"] as? Int, 1)
        }
    }
}
