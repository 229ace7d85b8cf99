import Foundation
import XCTest
@testable import StrataServer

/// The node's small state files: a failed write never leaves a truncated file in place.
final class SmallFilesTests: XCTestCase {
    func contents(_ path: String) -> String? { try? String(contentsOfFile: path, encoding: .utf8) }

    func testReplaceWritesTheWholeFileAndLeavesNoTemporary() throws {
        let dir = TempDir()
        let path = dir.path + "/state"
        try SmallFiles.replace(path, with: "one\n")
        try SmallFiles.replace(path, with: "two\nthree\n")
        XCTAssertEqual(contents(path), "two\nthree\n")
        XCTAssertFalse(FileManager.default.fileExists(atPath: path + ".tmp"))
        try SmallFiles.append(path, "four\n")
        XCTAssertEqual(contents(path), "two\nthree\nfour\n")
    }

    /// A full device: the write fails with ENOSPC and says so (nothing half-written is kept).
    func testAFullDeviceIsAnErrorNotASilentShortFile() throws {
        XCTAssertThrowsError(try SmallFiles.append("/dev/full", "a mark\n")) { e in
            XCTAssertEqual((e as? SmallFiles.Failure)?.errno, ENOSPC, "\(e)")
        }
    }

    /// A rename that fails (the target is a directory) keeps the old target and removes the
    /// temporary file; a directory that does not exist is an error too.
    func testAFailedReplaceKeepsTheOldFile() throws {
        let dir = TempDir()
        let path = dir.path + "/taken"
        try FileManager.default.createDirectory(atPath: path + "/inside", withIntermediateDirectories: true)
        XCTAssertThrowsError(try SmallFiles.replace(path, with: "x\n"))
        var isDir: ObjCBool = false
        XCTAssertTrue(FileManager.default.fileExists(atPath: path + "/inside", isDirectory: &isDir) && isDir.boolValue)
        XCTAssertFalse(FileManager.default.fileExists(atPath: path + ".tmp"))
        XCTAssertThrowsError(try SmallFiles.replace(dir.path + "/missing/state", with: "x\n"))
    }
}
