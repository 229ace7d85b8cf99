import Foundation
import XCTest
import StrataCore
@testable import StrataStore

/// A child process writes and reports each returned write; it is SIGKILLed at a random moment;
/// every reported write must be readable after reopening. Repeated 20 times on one directory.
final class CrashTests: XCTestCase {
    func testNoAcknowledgedWriteIsLostWhenTheProcessIsKilled() throws {
        let writer = try XCTUnwrap(builtExecutable("strata-crash-writer"), "strata-crash-writer is not built")
        let dir = TempDir()
        var rng = SplitMix(seed: UInt64(Date().timeIntervalSince1970))
        var totalChecked = 0
        for round in 0..<20 {
            let child = Process()
            child.executableURL = URL(fileURLWithPath: writer)
            child.arguments = [dir.path, "4"]
            let out = Pipe()
            child.standardOutput = out
            child.standardError = FileHandle.nullDevice
            try child.run()
            // Let it write for a random while (it needs a moment to open the store first).
            usleep(UInt32(50_000 + rng.next() % 250_000))
            kill(child.processIdentifier, SIGKILL)
            child.waitUntilExit()
            XCTAssertEqual(child.terminationReason, .uncaughtSignal)
            let data = out.fileHandleForReading.readDataToEndOfFile()
            // A line cut by the kill has no newline: it was not fully reported, so skip it.
            let text = String(decoding: data, as: UTF8.self)
            var lines = text.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
            if !text.hasSuffix("\n"), !lines.isEmpty { lines.removeLast() }

            var config = StoreConfiguration(directory: dir.path)
            config.quickCheckOnOpen = false
            let store = try TieredCache(configuration: config)
            for key in lines {
                let got = try store.get(Array(key.utf8), tiers: .disk)
                XCTAssertEqual(got?.value, Array(String(repeating: key + ";", count: 20).utf8), "round \(round): lost \(key)")
            }
            totalChecked += lines.count
            store.close()
        }
        XCTAssertGreaterThan(totalChecked, 100, "the child wrote too little to prove anything")
    }
}
