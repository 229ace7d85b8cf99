import Foundation
import XCTest
import StrataCache
import StrataCore
@_exported import TestSupport

/// A real `strata serve` process on 127.0.0.1 and a port the kernel picked (read from its
/// first line of output), stopped with SIGTERM at deinit. A small copy of StrataNodeTests'
/// `NodeProcess` (test targets cannot share sources without a module of their own).
final class TestNode: @unchecked Sendable {
    let process = Process()
    let dir = TempDir()
    private(set) var port: UInt16 = 0
    private let out = Pipe()

    init(extra: [String] = [], file: StaticString = #filePath, line: UInt = #line) throws {
        let exe = try XCTUnwrap(builtExecutable("strata"), "strata is not built", file: file, line: line)
        process.executableURL = URL(fileURLWithPath: exe)
        process.arguments = ["serve", "--port", "0", "--data", dir.path, "--threads", "2", "--disk-workers", "4", "--log-level", "warn"] + extra
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        // First line: "strata X listening on HOST:PORT, data in DIR" (poll, bounded).
        var text = ""
        let deadline = monotonicSeconds() + 20
        let fd = out.fileHandleForReading.fileDescriptor
        while !text.contains("\n") && process.isRunning && monotonicSeconds() < deadline {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&p, 1, 200) > 0 else { continue }
            let d = out.fileHandleForReading.availableData
            if d.isEmpty { break }
            text += String(decoding: d, as: UTF8.self)
        }
        guard let r = text.range(of: "listening on "), let colon = text[r.upperBound...].firstIndex(of: ":"),
              let p = UInt16(text[text.index(after: colon)...].prefix { $0.isNumber }) else {
            process.terminate()
            throw NSError(domain: "TestNode", code: 1, userInfo: [NSLocalizedDescriptionKey: "node did not start: \(text)"])
        }
        port = p
    }

    var address: String { "127.0.0.1:\(port)" }

    func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGTERM)
        _ = eventually(30) { !process.isRunning }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    deinit { stop() }
}

/// Counts calls from many tasks.
actor CallCounter {
    private(set) var count = 0
    func increment() { count += 1 }
}

/// A record for Codable round trips.
struct Profile: Codable, Sendable, Equatable {
    var id: Int
    var name: String
    var tags: [String]
    var score: Double?
    var nested: [String: [Int]]
}

struct LoaderBroke: Error, Equatable { let reason: String }

/// Asserts that `body` throws a `CacheError` with `code` (and `status`, when given).
func assertCacheError<T>(_ code: CacheError.Code, status: CacheStatus? = nil, file: StaticString = #filePath, line: UInt = #line,
                         _ body: () async throws -> T) async {
    do {
        _ = try await body()
        XCTFail("expected CacheError \(code), got no error", file: file, line: line)
    } catch let e as CacheError {
        XCTAssertEqual(e.code, code, "\(e)", file: file, line: line)
        if let status { XCTAssertEqual(e.status, status, "\(e)", file: file, line: line) }
    } catch {
        XCTFail("expected CacheError \(code), got \(type(of: error)): \(error)", file: file, line: line)
    }
}
