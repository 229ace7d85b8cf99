import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataImage
import StrataWire

/// Issue 16 item 3 against a real node: PNG bombs sent with VALIDATE_IMAGE cost bounded CPU
/// and a legitimate image sent right after them is answered at once.
final class ImageBombNodeTests: XCTestCase {
    /// User + system CPU seconds of a process (/proc/PID/stat fields 14 and 15).
    static func cpuSeconds(_ pid: Int32) -> Double {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let r = text.range(of: ") ") else { return 0 }
        let fields = text[r.upperBound...].split(separator: " ")
        let ticks = (Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0)
        return ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    func testPNGBombsAreRefusedCheaplyAndALegitimateImageDoesNotWait() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let pid = node.process.processIdentifier
        // Four 1×1 PNGs whose IDAT inflates to 1 GiB each (~6.6 MB with fixed Huffman codes;
        // libpng alone spent ~2 s of CPU on each), and one 5000×5000 16-bit RGBA PNG: 25 MP,
        // within the pixel limit, but 200 MB of pixel data (past the 128 MiB decode limit).
        let bombs = (0..<4).map { _ in PNGBomb.make(width: 1, height: 1, inflated: 1 << 30) }
        let deep = PNGBomb.make(width: 5000, height: 5000, bitDepth: 16)
        let legit = try XCTUnwrap(ImageCodec.encodePNG(rgba: [1, 2, 3, 255], width: 1, height: 1))
        let conns = try (0..<6).map { _ in try node.connect(timeout: 30) }
        try conns[0].ping()
        let cpu0 = Self.cpuSeconds(pid)
        for (i, v) in (bombs + [deep]).enumerated() {
            var s = SetRequest(key: b("bomb\(i)"), value: v)
            s.validateImage = true
            try conns[i].sendRaw(Request.set(s).frame(id: 1).encoded())
        }
        var ok = SetRequest(key: b("legit"), value: legit)
        ok.validateImage = true
        let t0 = monotonicSeconds()
        let answer = try conns[5].set(ok)
        let legitWait = monotonicSeconds() - t0
        XCTAssertEqual(answer.statusCode, .ok)
        for c in conns.prefix(5) {
            let f = try c.readFrame()
            XCTAssertEqual(f.statusCode, .invalidImage, String(decoding: f.value, as: UTF8.self))
        }
        let cpu = Self.cpuSeconds(pid) - cpu0
        XCTAssertLessThan(legitWait, 1, "the 1×1 PNG waited \(legitWait) s behind the bombs")
        // Receiving ~27 MB and refusing five images: well under a second (it was ~11.6 s).
        XCTAssertLessThan(cpu, 2, "node CPU for the bombs: \(cpu) s")
        XCTAssertNil(try conns[5].get(b("bomb0")))
        reportFigure("PNG bombs", "4 × 1×1 PNGs inflating to 1 GiB (6.6 MB each) + 1 × 5000×5000 16-bit (200 MB decoded) with VALIDATE_IMAGE: all INVALID_IMAGE; node CPU \(String(format: "%.2f", cpu)) s for all five, receiving included (\(String(format: "%.0f", cpu / 5 * 1000)) ms each); a 1×1 validated SET sent after them answered in \(String(format: "%.1f", legitWait * 1000)) ms")
    }
}
