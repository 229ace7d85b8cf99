#if canImport(Glibc)
import Glibc
#endif
import StrataCore

/// The node's small state files in its data directory (`node-id`, `cluster-members`,
/// `flush-marks`): whole-file replacement and appends, each on the device before it returns.
///
/// Guarantees: `replace` leaves either the old file or the whole new one, never a mix or a
/// truncated file — the text goes to `PATH.tmp`, which is flushed, fsynced and renamed over
/// `PATH` only if every step succeeded (then the directory is fsynced, so the rename lasts);
/// on any failure (a full disk) the temporary file is removed and the old file stays. `append`
/// reports a short write or a failed fsync. Costs: two to three fsyncs per call.
enum SmallFiles {
    struct Failure: Error, CustomStringConvertible {
        let path: String
        let errno: Int32
        var description: String { "\(path): \(String(cString: strerror(errno)))" }
    }

    /// Replaces `path` with `text`, atomically (see the type's guarantees).
    static func replace(_ path: String, with text: String) throws {
        let tmp = path + ".tmp"
        try write(tmp, text, mode: "w")
        guard rename(tmp, path) == 0 else {
            let e = errno
            unlink(tmp)
            throw Failure(path: path, errno: e)
        }
        syncDirectory(path.lastIndex(of: "/").map { String(path[..<$0]) } ?? ".")
    }

    /// Appends `text` to `path` (created if missing) and fsyncs it.
    static func append(_ path: String, _ text: String) throws {
        try write(path, text, mode: "a")
    }

    private static func write(_ path: String, _ text: String, mode: String) throws {
        guard let f = fopen(path, mode) else { throw Failure(path: path, errno: errno) }
        let bytes = Array(text.utf8)
        let wrote = bytes.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, f) }
        var failed: Int32 = wrote == bytes.count ? 0 : (errno != 0 ? errno : EIO)
        if failed == 0 && fflush(f) != 0 { failed = errno }
        if failed == 0 && fsync(fileno(f)) != 0 { failed = errno }
        if fclose(f) != 0 && failed == 0 { failed = errno }
        if failed != 0 {
            if mode == "w" { unlink(path) }
            throw Failure(path: path, errno: failed)
        }
    }
}
