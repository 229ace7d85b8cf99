#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataWire

/// One node's connections and health (mcrouter's TKO): dead after 3 consecutive failures,
/// then probed with backoff (1 s doubling to 30 s); a dead node fails fast. A request that
/// failed only when its whole timeout had passed (a paused or cut-off node) also makes the next
/// ones fail fast for one timeout: a CLI's increment with a paused replica waited three
/// timeouts (the settle probe, the owner, the copy). The backoff is measured with the injected
/// clock (`ClusterConfiguration.clock`), so it is tested without sleeping.
final class NodeHandle: @unchecked Sendable {
    let address: NodeAddress
    private let lock = Lock()
    private var idle: [NodeConnection] = []
    private var failures = 0
    private var deadUntil: Double = 0
    private var backoff = 1.0
    /// Until then a request fails fast: the last one waited its whole timeout for nothing.
    private var quietUntil: Double = 0
    private(set) var startVersion: UInt64 = 0
    let timeout: Double
    let token: [UInt8]?
    /// The TLS configuration loaded once for every connection of this node (nil: plaintext).
    let tls: ClientTLS?

    let maxIdle: Int
    private let clock: any Clock

    /// A pooled connection whose HELLO is older than this (seconds, by `clock`) says HELLO again
    /// before its next request, so a long-lived client learns of a restart or a pause of the
    /// node within about this long (one round trip more per node per interval; 0 = never).
    let helloInterval: Double
    private var lastHello: Double = 0

    init(address: NodeAddress, timeout: Double, token: [UInt8]?, maxIdle: Int = 16, clock: any Clock = SystemClock(),
         helloInterval: Double = 1, tls: ClientTLS? = nil) {
        self.address = address; self.timeout = timeout; self.token = token; self.maxIdle = maxIdle; self.clock = clock
        self.tls = tls
        self.helloInterval = helloInterval
    }

    private var now: Double { Double(clock.nowMicros()) / 1e6 }

    var isDead: Bool { lock.withLock { failures >= 3 && now < deadUntil } }
    var knownStartVersion: UInt64 { lock.withLock { startVersion } }

    /// Runs `body` on a pooled connection. Connection-level failures count against health.
    /// `ignoringQuiet`: wait for a node in its quiet window all the same (a counter's owner:
    /// deciding elsewhere lets two clients decide on two nodes at once).
    func run<T>(ignoringQuiet: Bool = false, _ body: (NodeConnection) throws -> T) throws -> T {
        let started = now
        let conn: NodeConnection = try lock.withLock { () throws -> NodeConnection? in
            if failures >= 3 && now < deadUntil {
                throw ClientError(.connection, "\(address) is marked dead after repeated failures (next probe in \(Int(deadUntil - now) + 1) s)")
            }
            if now < quietUntil && !ignoringQuiet {
                throw ClientError(.connection, "\(address) did not answer within \(timeout) s just now (not asked again for \(Int(quietUntil - now) + 1) s)")
            }
            return idle.popLast()
        } ?? {
            do {
                let c = try NodeConnection(host: address.host, port: address.port, timeout: timeout, token: token, hello: true, clientTLS: tls)
                lock.withLock { startVersion = c.startVersion; lastHello = now }
                return c
            } catch {
                failed(since: started)
                throw error
            }
        }()
        do {
            if helloInterval > 0, lock.withLock({ now - lastHello >= helloInterval }) {
                try conn.sayHello()
                lock.withLock { startVersion = conn.startVersion; lastHello = now }
            }
            let r = try body(conn)
            lock.withLock {
                failures = 0
                backoff = 1
                quietUntil = 0
                if idle.count < maxIdle && !conn.mayBeClosedByNode { idle.append(conn) } else { conn.close() }
            }
            return r
        } catch let e as ClientError where e.kind != .server {
            conn.close()
            failed(since: started)
            throw e
        }
    }

    /// A connection-level failure of a request begun at `started`.
    private func failed(since started: Double) {
        lock.withLock {
            if now - started >= timeout * 0.9 { quietUntil = now + timeout }
            failures += 1
            if failures >= 3 {
                deadUntil = now + backoff
                backoff = min(30, backoff * 2)
                for c in idle { c.close() }
                idle.removeAll()
            }
        }
    }
}

// MARK: Membership from DNS

extension NodeAddress {
    /// Every address `host` resolves to (a Kubernetes headless service resolves to all its
    /// pods), with `port`. A node's ring name is its reverse-DNS name when it has one (stable
    /// pod names in a StatefulSet), else `ip:port`.
    public static func resolve(_ host: String, port: UInt16) throws -> [NodeAddress] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var res: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &res)
        guard rc == 0, let first = res else {
            throw ClusterError(message: "cannot resolve \(host): \(String(cString: gai_strerror(rc)))", failures: [])
        }
        defer { freeaddrinfo(first) }
        var out: [NodeAddress] = []
        var seen = Set<String>()
        var p: UnsafeMutablePointer<addrinfo>? = first
        while let ai = p {
            var ipBuf = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            var nameBuf = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            if getnameinfo(ai.pointee.ai_addr, ai.pointee.ai_addrlen, &ipBuf, socklen_t(ipBuf.count), nil, 0, NI_NUMERICHOST) == 0 {
                let ip = String(decoding: ipBuf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                if seen.insert(ip).inserted {
                    var name = ip.contains(":") ? "[\(ip)]:\(port)" : "\(ip):\(port)"
                    if getnameinfo(ai.pointee.ai_addr, ai.pointee.ai_addrlen, &nameBuf, socklen_t(nameBuf.count), nil, 0, NI_NAMEREQD) == 0 {
                        let dns = String(decoding: nameBuf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                        if dns != "localhost" && !dns.isEmpty { name = "\(dns):\(port)" }
                    }
                    out.append(NodeAddress(host: ip, port: port, name: name))
                }
            }
            p = ai.pointee.ai_next
        }
        return out.sorted { $0.name < $1.name }
    }
}
