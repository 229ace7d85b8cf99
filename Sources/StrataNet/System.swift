#if canImport(Glibc)
import Glibc
#endif
import CLinux

// The one syscall wrapper: loops on EINTR, turns EAGAIN into "would block", throws one
// `SystemError(errno:call:)` for everything else.

/// A failed system call: its errno and name.
public struct SystemError: Error, CustomStringConvertible, Sendable, Equatable {
    public let errno: Int32
    public let call: String
    public init(errno: Int32, call: String) { self.errno = errno; self.call = call }
    public var description: String { "\(call): \(String(cString: strerror(errno))) (errno \(errno))" }
}

/// The outcome of a non-blocking call.
public enum IOResult: Equatable {
    case done(Int)
    case wouldBlock
}

@inline(__always)
func syscall(_ name: String, _ body: () -> Int) throws(SystemError) -> IOResult {
    while true {
        let r = body()
        if r >= 0 { return .done(r) }
        let e = errno
        if e == EINTR { continue }
        if e == EAGAIN || e == EWOULDBLOCK { return .wouldBlock }
        throw SystemError(errno: e, call: name)
    }
}

@inline(__always)
func syscallNoBlock(_ name: String, _ body: () -> Int32) throws(SystemError) -> Int32 {
    switch try syscall(name, { Int(body()) }) {
    case .done(let n): return Int32(n)
    case .wouldBlock: throw SystemError(errno: EAGAIN, call: name)
    }
}

public enum Sys {
    /// A socket timeout of `seconds`: 0 (or less) is none, and anything positive is at least
    /// 1 µs — a zero `timeval` means "no limit", so `--timeout 1e-9` used to wait for good.
    public static func timeval(seconds: Double) -> Glibc.timeval {
        guard seconds > 0 else { return Glibc.timeval(tv_sec: 0, tv_usec: 0) }
        let s = min(seconds, Double(Int32.max))
        let usec = max(1, Int((s - Double(Int(s))) * 1_000_000))
        return Glibc.timeval(tv_sec: Int(s), tv_usec: Int(s) > 0 ? Int((s - Double(Int(s))) * 1_000_000) : usec)
    }

    /// Reads into `buffer`; `.done(0)` is end of stream.
    public static func read(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) throws(SystemError) -> IOResult {
        try syscall("read") { Glibc.read(fd, buffer, count) }
    }

    /// Sends without SIGPIPE.
    public static func send(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int) throws(SystemError) -> IOResult {
        try syscall("send") { Glibc.send(fd, buffer, count, Int32(MSG_NOSIGNAL)) }
    }

    /// Sends the buffers in order with one `sendmsg` (gathered, like `writev`; MSG_NOSIGNAL,
    /// since `writev` takes no flags).
    public static func sendv(_ fd: Int32, _ buffers: UnsafeMutableBufferPointer<iovec>) throws(SystemError) -> IOResult {
        var msg = msghdr()
        msg.msg_iov = buffers.baseAddress
        msg.msg_iovlen = buffers.count
        return try syscall("sendmsg") { Glibc.sendmsg(fd, &msg, Int32(MSG_NOSIGNAL)) }
    }

    public static func close(_ fd: Int32) { _ = Glibc.close(fd) }

    /// Ends the sending side (the peer reads end of stream); reading still works.
    public static func shutdownWrite(_ fd: Int32) { _ = Glibc.shutdown(fd, Int32(SHUT_WR)) }

    /// Accepts one connection, non-blocking and close-on-exec; nil when none is waiting.
    public static func accept(_ fd: Int32) throws(SystemError) -> Int32? {
        switch try syscall("accept4", { Int(accept4(fd, nil, nil, Int32(SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue))) }) {
        case .done(let c): return Int32(c)
        case .wouldBlock: return nil
        }
    }

    public static func setNoDelay(_ fd: Int32) {
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    /// The numeric address of a connected socket's peer (`getpeername`): `1.2.3.4` or `::1`
    /// (an IPv4-mapped IPv6 address as its IPv4 form), without the port; nil if the socket has
    /// none (closed, or not an inet socket).
    public static func peerHost(_ fd: Int32) -> String? {
        var storage = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let r = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &len) }
        }
        guard r == 0 else { return nil }
        var buf = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        switch Int32(storage.ss_family) {
        case AF_INET:
            var a = withUnsafeBytes(of: storage) { $0.load(as: sockaddr_in.self) }.sin_addr
            guard inet_ntop(AF_INET, &a, &buf, socklen_t(buf.count)) != nil else { return nil }
        case AF_INET6:
            var a = withUnsafeBytes(of: storage) { $0.load(as: sockaddr_in6.self) }.sin6_addr
            guard inet_ntop(AF_INET6, &a, &buf, socklen_t(buf.count)) != nil else { return nil }
        default: return nil
        }
        let s = String(cString: buf)
        return s.hasPrefix("::ffff:") && s.contains(".") ? String(s.dropFirst(7)) : s
    }

    public static func ignoreSIGPIPE() { signal(SIGPIPE, SIG_IGN) }

    /// The process's descriptor limit (RLIMIT_NOFILE), soft and hard; `Int.max` stands for
    /// unlimited.
    public static func openFileLimit() -> (soft: Int, hard: Int) {
        var rl = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &rl) == 0 else { return (Int.max, Int.max) }
        func n(_ v: rlim_t) -> Int { v > rlim_t(Int.max) ? Int.max : Int(v) } // RLIM_INFINITY is all ones
        return (n(rl.rlim_cur), n(rl.rlim_max))
    }

    /// Sets the soft descriptor limit (at most the hard one; raising the hard limit needs
    /// privileges this never asks for). False when the kernel refused.
    public static func setOpenFileSoftLimit(_ soft: Int) -> Bool {
        var rl = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &rl) == 0 else { return false }
        rl.rlim_cur = rlim_t(soft)
        return setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &rl) == 0
    }
}

extension Sys {
    /// Makes `fd` non-blocking (a client's TLS stream waits with `poll` instead).
    public static func setNonBlocking(_ fd: Int32) {
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
    }
}
