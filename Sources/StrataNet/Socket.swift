#if canImport(Glibc)
import Glibc
#endif
import CLinux

/// An IPv4 or IPv6 socket address built from a numeric host.
public struct SocketAddress: Sendable, CustomStringConvertible {
    public let host: String
    public let port: UInt16
    var storage = sockaddr_storage()
    var length: socklen_t = 0

    /// Parses a numeric IPv4/IPv6 host (`127.0.0.1`, `::1`) or `localhost`. Nil when not numeric.
    public init?(host: String, port: UInt16) {
        self.host = host
        self.port = port
        let h = host == "localhost" ? "127.0.0.1" : host
        var v4 = sockaddr_in()
        if inet_pton(AF_INET, h, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = port.bigEndian
            withUnsafeBytes(of: v4) { src in withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: src) } }
            length = socklen_t(MemoryLayout<sockaddr_in>.size)
            return
        }
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET6, h, &v6.sin6_addr) == 1 {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = port.bigEndian
            withUnsafeBytes(of: v6) { src in withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: src) } }
            length = socklen_t(MemoryLayout<sockaddr_in6>.size)
            return
        }
        return nil
    }

    /// `host` as `init?` takes it, or else the first address the system resolver gives for
    /// the name (`/etc/hosts`, DNS: a Kubernetes pod's stable name), IPv4 before IPv6. `host`
    /// stays the name (it is what a TLS certificate is checked against). Blocks for the lookup.
    public static func resolving(host: String, port: UInt16) throws(ResolveError) -> SocketAddress {
        if let numeric = SocketAddress(host: host, port: port) { return numeric }
        guard !host.isEmpty, !host.contains(where: { $0 == " " || $0 == "/" }) else {
            throw ResolveError(host: host, reason: "not a host name")
        }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var res: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, nil, &hints, &res)
        guard rc == 0, let first = res else { throw ResolveError(host: host, reason: String(cString: gai_strerror(rc))) }
        defer { freeaddrinfo(first) }
        var found: SocketAddress?
        var p: UnsafeMutablePointer<addrinfo>? = first
        while let ai = p {
            let family = ai.pointee.ai_family
            if family == AF_INET || (family == AF_INET6 && found == nil), let a = ai.pointee.ai_addr {
                var address = SocketAddress(name: host, port: port)
                let length = Int(ai.pointee.ai_addrlen)
                withUnsafeMutableBytes(of: &address.storage) { $0.copyMemory(from: UnsafeRawBufferPointer(start: a, count: length)) }
                address.length = socklen_t(length)
                if family == AF_INET {
                    withUnsafeMutableBytes(of: &address.storage) { $0.storeBytes(of: port.bigEndian, toByteOffset: MemoryLayout<sockaddr_in>.offset(of: \.sin_port)!, as: UInt16.self) }
                    return address
                }
                withUnsafeMutableBytes(of: &address.storage) { $0.storeBytes(of: port.bigEndian, toByteOffset: MemoryLayout<sockaddr_in6>.offset(of: \.sin6_port)!, as: UInt16.self) }
                found = address
            }
            p = ai.pointee.ai_next
        }
        guard let found else { throw ResolveError(host: host, reason: "no IPv4 or IPv6 address") }
        return found
    }

    private init(name: String, port: UInt16) {
        self.host = name
        self.port = port
    }

    /// Why a host name could not be turned into an address.
    public struct ResolveError: Error, CustomStringConvertible, Sendable {
        public let host: String
        public let reason: String
        public var description: String { "cannot resolve \(host): \(reason)" }
    }

    public var family: Int32 { Int32(storage.ss_family) }

    /// True for 127.0.0.0/8 and ::1 (and so localhost).
    public var isLoopback: Bool {
        withUnsafeBytes(of: storage) { raw in
            if family == AF_INET {
                return raw.load(fromByteOffset: MemoryLayout<sockaddr_in>.offset(of: \.sin_addr)!, as: UInt8.self) == 127
            }
            guard family == AF_INET6 else { return false }
            let a = raw.baseAddress! + MemoryLayout<sockaddr_in6>.offset(of: \.sin6_addr)!
            return (0..<15).allSatisfy { a.load(fromByteOffset: $0, as: UInt8.self) == 0 } && a.load(fromByteOffset: 15, as: UInt8.self) == 1
        }
    }

    public var description: String { family == AF_INET6 ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// The address in its one canonical text (`inet_ntop`: `::1` for `0:0::1`, `127.0.0.1` for
    /// `localhost`), whatever way `host` wrote it.
    public var canonicalHost: String {
        var buf = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        let ok: Bool = withUnsafeBytes(of: storage) { raw in
            if family == AF_INET6 {
                let a = raw.baseAddress! + MemoryLayout<sockaddr_in6>.offset(of: \sockaddr_in6.sin6_addr)!
                return inet_ntop(AF_INET6, a, &buf, socklen_t(buf.count)) != nil
            }
            let a = raw.baseAddress! + MemoryLayout<sockaddr_in>.offset(of: \sockaddr_in.sin_addr)!
            return inet_ntop(AF_INET, a, &buf, socklen_t(buf.count)) != nil
        }
        return ok ? String(cString: buf) : host
    }

    func withSockaddr<T>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> T) -> T {
        withUnsafeBytes(of: storage) { body($0.baseAddress!.assumingMemoryBound(to: sockaddr.self), length) }
    }
}

public enum Socket {
    /// A non-blocking listening TCP socket with SO_REUSEADDR; returns it and the port it got
    /// (useful with port 0).
    public static func listen(_ address: SocketAddress, backlog: Int32 = 1024) throws(SystemError) -> (fd: Int32, port: UInt16) {
        let fd = socket(address.family, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SystemError(errno: errno, call: "socket") }
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        let rc = address.withSockaddr { bind(fd, $0, $1) }
        if rc != 0 {
            let e = errno
            Glibc.close(fd)
            throw SystemError(errno: e, call: "bind \(address)")
        }
        if Glibc.listen(fd, backlog) != 0 {
            let e = errno
            Glibc.close(fd)
            throw SystemError(errno: e, call: "listen")
        }
        return (fd, boundPort(fd))
    }

    /// Makes the kernel hand over a listening socket's connections only once their first
    /// bytes arrived (or after about `seconds`, when it gives up waiting): TCP_DEFER_ACCEPT. A
    /// client that connects and sends nothing reaches `accept` late and last.
    public static func deferAccept(_ fd: Int32, seconds: Int32) {
        var s = seconds
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_DEFER_ACCEPT, &s, socklen_t(MemoryLayout<Int32>.size))
    }

    static func boundPort(_ fd: Int32) -> UInt16 {
        var ss = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &ss) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        if Int32(ss.ss_family) == AF_INET6 {
            return withUnsafeBytes(of: ss) { UInt16(bigEndian: $0.load(fromByteOffset: 2, as: UInt16.self)) }
        }
        return withUnsafeBytes(of: ss) { UInt16(bigEndian: $0.load(fromByteOffset: 2, as: UInt16.self)) }
    }

    /// A blocking TCP connection with TCP_NODELAY, connect bounded by `timeout` seconds, and
    /// send/receive timeouts of `timeout` seconds.
    public static func connect(_ address: SocketAddress, timeout: Double) throws(SystemError) -> Int32 {
        let fd = socket(address.family, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SystemError(errno: errno, call: "socket") }
        let rc = address.withSockaddr { Glibc.connect(fd, $0, $1) }
        if rc != 0 {
            guard errno == EINPROGRESS else {
                let e = errno
                Glibc.close(fd)
                throw SystemError(errno: e, call: "connect \(address)")
            }
            var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            // ≤ ~23 days: Int32 milliseconds; a positive timeout waits at least 1 ms, 0 for good.
            let n = poll(&p, 1, timeout > 0 ? max(1, Int32(min(timeout, 2_000_000) * 1000)) : -1)
            if n <= 0 {
                Glibc.close(fd)
                throw SystemError(errno: n == 0 ? ETIMEDOUT : errno, call: "connect \(address)")
            }
            var err: Int32 = 0
            var len = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len)
            if err != 0 {
                Glibc.close(fd)
                throw SystemError(errno: err, call: "connect \(address)")
            }
        }
        // Back to blocking, with timeouts, for simple request/response clients.
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags & ~O_NONBLOCK)
        var tv = Sys.timeval(seconds: timeout)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        Sys.setNoDelay(fd)
        return fd
    }
}
