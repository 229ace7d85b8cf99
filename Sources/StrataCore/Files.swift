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

/// A file's size in bytes, nil when it does not exist or cannot be examined.
public func fileSize(_ path: String) -> Int? {
    var st = stat()
    return stat(path, &st) == 0 ? Int(st.st_size) : nil
}

/// Copies `from` to `to` (created or truncated, mode 0600) in 1 MiB steps; false on any error.
public func copyFile(_ from: String, to: String) -> Bool {
    let src = open(from, O_RDONLY | O_CLOEXEC)
    guard src >= 0 else { return false }
    defer { close(src) }
    let dst = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    guard dst >= 0 else { return false }
    defer { close(dst) }
    var buf = [UInt8](repeating: 0, count: 1 << 20)
    while true {
        let n = buf.withUnsafeMutableBytes { read(src, $0.baseAddress, $0.count) }
        if n == 0 { return true }
        if n < 0 { if errno == EINTR { continue }; return false }
        var off = 0
        while off < n {
            let w = buf.withUnsafeBytes { write(dst, $0.baseAddress! + off, n - off) }
            if w < 0 { if errno == EINTR { continue }; return false }
            off += w
        }
    }
}

/// Whether every page of a file is in the kernel's page cache (`mincore` over a read-only
/// mapping, 64 MiB at a time), so reading it will not wait for the device. True for a file
/// that does not exist or is empty (nothing to read); false when it cannot be examined.
/// Costs one byte of vector per 4 KiB page, and the mappings: ~1 ms per GiB.
public func fileIsResident(_ path: String) -> Bool {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    if fd < 0 { return errno == ENOENT }
    defer { close(fd) }
    var st = stat()
    guard fstat(fd, &st) == 0 else { return false }
    let size = Int(st.st_size)
    if size == 0 { return true }
    let page = Int(sysconf(Int32(_SC_PAGESIZE)))
    let chunk = 64 << 20
    var vec = [UInt8](repeating: 0, count: chunk / page)
    var offset = 0
    while offset < size {
        let len = min(chunk, size - offset)
        guard let map = mmap(nil, len, PROT_READ, MAP_SHARED, fd, off_t(offset)), map != MAP_FAILED else { return false }
        defer { munmap(map, len) }
        let pages = (len + page - 1) / page
        guard mincore(map, len, &vec) == 0 else { return false }
        for i in 0..<pages where vec[i] & 1 == 0 { return false }
        offset += len
    }
    return true
}

/// Creates `path` and any missing parent directories (mode 0755), as `mkdir -p` does. Returns
/// nil on success (also when it exists as a directory), else the directory that could not be
/// made and why (`"/var/lib: Permission denied"`, or `"… exists and is not a directory"`).
public func makeDirectories(_ path: String) -> String? {
    var st = stat()
    if stat(path, &st) == 0 {
        return (st.st_mode & S_IFMT) == S_IFDIR ? nil : "\(path) exists and is not a directory"
    }
    var prefix = path.hasPrefix("/") ? "/" : ""
    for part in path.split(separator: "/", omittingEmptySubsequences: true) {
        prefix += (prefix.isEmpty || prefix.hasSuffix("/") ? "" : "/") + part
        if stat(prefix, &st) == 0 {
            if (st.st_mode & S_IFMT) != S_IFDIR { return "\(prefix) exists and is not a directory" }
            continue
        }
        if mkdir(prefix, 0o755) != 0 && errno != EEXIST { return "\(prefix): \(String(cString: strerror(errno)))" }
    }
    return nil
}
