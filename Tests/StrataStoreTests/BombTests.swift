import XCTest
import StrataCore
@testable import StrataStore

/// Issue 8 item 8: decompression bombs in the disk tier's values. The store only decompresses
/// what it wrote, but a damaged or hostile file could hold anything: decoding is bounded by
/// the item's recorded size, never by what a frame claims. Frames are built by hand from RLE
/// blocks (4 bytes each for 128 KiB of output), the densest zstd allows.
final class BombTests: XCTestCase {
    /// One RLE block of 128 KiB of zeros (3-byte little-endian header: last bit, type 1, size).
    private func rleBlock(last: Bool) -> [UInt8] {
        let header = (last ? 1 : 0) | (1 << 1) | (131_072 << 3)
        return [UInt8(header & 0xFF), UInt8((header >> 8) & 0xFF), UInt8((header >> 16) & 0xFF), 0]
    }

    private let magic: [UInt8] = [0x28, 0xB5, 0x2F, 0xFD]

    /// A frame that declares `declared` bytes of content (single segment), then `blocks` blocks.
    private func declaredFrame(_ declared: UInt64, blocks: Int) -> [UInt8] {
        var f = magic + [0xE0] // FCS field 8 bytes, single segment
        for i in 0..<8 { f.append(UInt8((declared >> (8 * UInt64(i))) & 0xFF)) }
        for i in 0..<blocks { f += rleBlock(last: i == blocks - 1) }
        return f
    }

    /// A frame with no declared size (window 128 KiB) and `blocks` blocks.
    private func undeclaredFrame(blocks: Int) -> [UInt8] {
        var f = magic + [0x00, 0x38]
        for i in 0..<blocks { f += rleBlock(last: i == blocks - 1) }
        return f
    }

    private func peakRSS() -> Int {
        var u = rusage()
        getrusage(RUSAGE_SELF.rawValue, &u)
        return u.ru_maxrss * 1024
    }

    func testBombsAreRefusedWithMemoryBoundedByTheRecordedSize() throws {
        let codec = ValueCodec()
        let maxItem = StoreConfiguration(directory: "/tmp").maxItemBytes
        let bombs: [(String, [UInt8])] = [
            ("a frame claiming 4 GiB", declaredFrame(4 << 30, blocks: 64)),
            ("a frame with no declared size inflating to 1 GiB", undeclaredFrame(blocks: 8192)),
            ("32 KiB declaring and inflating to 1 GiB", declaredFrame(1 << 30, blocks: 8192)),
        ]
        // The frames are real: with enough room they decode (checked on a small one).
        XCTAssertEqual(declaredFrame(262_144, blocks: 2).withUnsafeBytes { codec.decode(.zstd, $0, size: 262_144)?.count }, 262_144)
        let before = peakRSS()
        for (name, bomb) in bombs {
            for recorded in [1024, maxItem] {
                let out = bomb.withUnsafeBytes { codec.decode(.zstd, $0, size: recorded) }
                XCTAssertNil(out, "\(name) with recorded size \(recorded) must be refused")
            }
        }
        let grown = peakRSS() - before
        XCTAssertLessThan(grown, 2 * maxItem, "peak memory grew by \(grown >> 20) MiB (max item \(maxItem >> 20) MiB)")
        print("FIGURE decompression bombs: 3 bombs × 2 recorded sizes refused; peak RSS grew \(grown >> 20) MiB (bound 2 × \(maxItem >> 20) MiB)")
    }
}
