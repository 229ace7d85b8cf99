import Foundation
import XCTest
import StrataFuzzEntries

/// Replays fuzz/corpus through the fuzzers' entry points (`make test` does not build the
/// fuzzers; `make soak` does). A crash found by fuzzing becomes a file here.
final class CorpusReplayTests: XCTestCase {
    static let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("fuzz/corpus")

    func replay(_ dir: String, _ entry: ([UInt8]) -> Void) throws -> Int {
        let d = Self.corpus.appendingPathComponent(dir)
        let files = try FileManager.default.contentsOfDirectory(atPath: d.path).sorted()
        for f in files { entry([UInt8](try Data(contentsOf: d.appendingPathComponent(f)))) }
        return files.count
    }

    func testFrameCorpus() throws { XCTAssertGreaterThan(try replay("frames", FuzzEntry.frames), 20) }
    func testImageCorpus() throws { XCTAssertGreaterThanOrEqual(try replay("image", FuzzEntry.image), 4) }
    func testDiskValueCorpus() throws { XCTAssertGreaterThanOrEqual(try replay("disk-value", FuzzEntry.diskValue), 3) }
    func testLogCorpus() throws {
        XCTAssertGreaterThanOrEqual(try replay("log", { FuzzEntry.logRecords($0) }), 4)
        // The corpus holds real records: the four-record file decodes whole.
        let four = try [UInt8](Data(contentsOf: Self.corpus.appendingPathComponent("log/four-records")))
        XCTAssertEqual(FuzzEntry.logRecords(four), 4)
    }

    func testMemcachedCorpus() throws {
        XCTAssertGreaterThanOrEqual(try replay("memcached", { FuzzEntry.memcachedText($0) }), 12)
        let all = try [UInt8](Data(contentsOf: Self.corpus.appendingPathComponent("memcached/all-concatenated")))
        XCTAssertGreaterThanOrEqual(FuzzEntry.memcachedText(all), 15) // too-large swallows what follows it
    }

    func testEntriesSurviveShortAndEmptyInputs() {
        for n in 0..<64 {
            let junk = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            FuzzEntry.frames(junk)
            FuzzEntry.image(junk)
            FuzzEntry.diskValue(junk)
            FuzzEntry.logRecords(junk)
            FuzzEntry.memcachedText(junk)
        }
    }
}
