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
