#if canImport(Glibc)
import Glibc
#endif

/// Makes a file created, renamed or removed in `directory` durable: its name is on the device
/// only once the directory itself is fsynced. Errors are ignored (best effort: the file's own
/// fsync has already succeeded). Costs one open, one fsync, one close.
public func syncDirectory(_ directory: String) {
    let d = open(directory.isEmpty ? "/" : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    if d >= 0 { _ = fsync(d); close(d) }
}

/// The bytes of a small file (at most `limit`), nil when it cannot be opened or read or is
/// larger: for the node's state and member-list files, read whole.
public func readSmallFile(_ path: String, limit: Int = 1 << 20) -> [UInt8]? {
    guard let f = fopen(path, "r") else { return nil }
    defer { fclose(f) }
    var text: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 4096)
    while text.count <= limit {
        let n = fread(&buf, 1, buf.count, f)
        if n <= 0 { break }
        text += buf[0..<n]
    }
    guard ferror(f) == 0, text.count <= limit else { return nil }
    return text
}
