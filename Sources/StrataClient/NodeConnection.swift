#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataNet
import StrataWire

/// Why a client call failed.
public struct ClientError: Error, CustomStringConvertible, Sendable {
    public enum Kind: Sendable { case connection, server, protocolViolation }
    public let kind: Kind
    public let message: String
    /// For `.server`: the status the node answered with.
    public let status: Status?
    public init(_ kind: Kind, _ message: String, status: Status? = nil) {
        self.kind = kind; self.message = message; self.status = status
    }
    public var description: String { message }
}

/// One blocking connection to one node: send a request, wait for the response with the same
/// request id. For scripts, the CLI and tests; not thread-safe (one caller at a time).
/// Every wait is bounded by `timeout` seconds. With a `TLSClientConfiguration` it connects to a
/// node's TLS port and refuses a certificate that does not chain to the CA or name the host.
public final class NodeConnection {
    public let address: SocketAddress
    private var socket: ClientSocket?
    private var nextID: UInt32 = 1
    private var buffer: [UInt8] = []
    private let decoder = FrameDecoder(magic: Wire.responseMagic, maxBody: (32 << 20) + (64 << 10) + (8 << 20))
    public private(set) var serverName = ""

    /// Connects (and authenticates with HELLO when `token` is given).
    /// With `hello` (or a token) the connection starts with HELLO and records what the node
    /// says about itself (`startVersion`).
    public convenience init(host: String, port: UInt16, timeout: Double = 5, token: [UInt8]? = nil, hello: Bool = false,
                            tls: TLSClientConfiguration? = nil) throws {
        try self.init(host: host, port: port, timeout: timeout, token: token, hello: hello, clientTLS: try tls.map(ClientTLS.init))
    }

    /// With a TLS configuration already loaded (a pool's connections share one).
    init(host: String, port: UInt16, timeout: Double, token: [UInt8]?, hello: Bool, clientTLS: ClientTLS?) throws {
        do { address = try SocketAddress.resolving(host: host, port: port) } catch {
            throw ClientError(.connection, "\(error)")
        }
        let a = address
        socket = try ClientSocket(a, timeout: timeout, tls: clientTLS)
        self.token = token
        if token != nil || hello { try sayHello() }
    }

    private var token: [UInt8]?

    /// Sends HELLO (again) and records what the node says about itself: its start version moves
    /// when it restarted or noticed a pause (PROTOCOL.md §7.1).
    public func sayHello() throws {
        let resp = try call(.hello(minVersion: Wire.version, maxVersion: Wire.version, token: token ?? []))
        try Self.check(resp, allow: [.ok])
        let h = try Responses.parseHello(resp)
        serverName = h.server
        startVersion = h.startVersion
    }

    /// The node's start version from the last HELLO (0: nothing to verify, or no HELLO sent).
    public private(set) var startVersion: UInt64 = 0

    deinit { close() }

    public func close() {
        socket?.close()
        socket = nil
    }

    /// Half-closes: the node sees end of stream but can still answer.
    public func finishSending() { socket?.finishSending() }

    /// Sends raw bytes (tests use this to send malformed frames).
    public func sendRaw(_ bytes: [UInt8]) throws {
        guard let s = socket else { throw ClientError(.connection, "the connection to \(address) is closed") }
        // The socket is blocking with a send timeout (or a TLS stream bounded the same way).
        guard s.sendAll(bytes) else { throw ClientError(.connection, "sending to \(address) failed or timed out") }
    }

    /// True once the node answered MALFORMED or TOO_LARGE: for a frame it refused from its
    /// header (PROTOCOL.md §2.2) it then closes the connection, so a pool must not reuse it.
    public private(set) var mayBeClosedByNode = false

    /// Reads the next response frame, whatever its id.
    public func readFrame() throws -> Frame {
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            do {
                if let (f, used) = try decoder.decode(buffer) {
                    buffer.removeFirst(used)
                    if f.statusCode == .malformed || f.statusCode == .tooLarge { mayBeClosedByNode = true }
                    return f
                }
            } catch {
                throw ClientError(.protocolViolation, "bad response from \(address): \(error)")
            }
            guard let s = socket else { throw ClientError(.connection, "the connection to \(address) is closed") }
            let r: IOResult
            do { r = try chunk.withUnsafeMutableBytes { try s.read($0.baseAddress!, $0.count) } } catch {
                throw ClientError(.connection, "reading from \(address): \(error)")
            }
            guard case .done(let n) = r else { throw ClientError(.connection, "reading from \(address): timed out") }
            if n == 0 { throw ClientError(.connection, "\(address) closed the connection") }
            buffer.append(contentsOf: chunk[0..<n])
        }
    }

    /// Throws TOO_LARGE (nothing sent) for a frame whose lengths do not fit its header: sent,
    /// they would be truncated — an outside review stored 5 bytes of a 4 GiB value.
    static func checkEncodable(_ f: Frame) throws {
        if let why = f.unencodable { throw ClientError(.server, "\(why); nothing was sent", status: .tooLarge) }
    }

    /// Sends `request` and returns its response (responses to other ids are skipped).
    public func call(_ request: Request) throws -> Frame {
        let id = nextID
        nextID &+= 1
        if nextID == 0 { nextID = 1 }
        let frame = request.frame(id: id)
        try Self.checkEncodable(frame)
        do { try sendRaw(frame.encoded()) } catch {
            // The node may have refused the request from its header (a frame over its size
            // limit) and closed while the rest was on its way: its answer, already here,
            // says more than the broken send.
            if let f = try? readFrame(), f.requestID == id || f.statusCode != .ok { return f }
            throw error
        }
        while true {
            let f = try readFrame()
            if f.requestID == id { return f }
            if f.requestID == 0 && f.statusCode != .ok {
                throw ClientError(.server, "\(f.statusCode): \(String(decoding: f.value, as: UTF8.self))", status: f.statusCode)
            }
        }
    }

    /// Sends `requests` back to back in one write and returns their responses in the same
    /// order (pipelining: one round trip for the batch). Keep a batch small enough that its
    /// requests fit the node's input buffer limits (anti-entropy sends ≤ 1 MiB at a time).
    public func callAll(_ requests: [Request]) throws -> [Frame] {
        guard !requests.isEmpty else { return [] }
        var bytes: [UInt8] = []
        var index: [UInt32: Int] = [:]
        for (i, r) in requests.enumerated() {
            let id = nextID
            nextID &+= 1
            if nextID == 0 { nextID = 1 }
            index[id] = i
            let frame = r.frame(id: id)
            try Self.checkEncodable(frame)
            bytes += frame.encoded()
        }
        try sendRaw(bytes)
        var out = [Frame?](repeating: nil, count: requests.count)
        var left = requests.count
        while left > 0 {
            let f = try readFrame()
            if let i = index[f.requestID], out[i] == nil {
                out[i] = f
                left -= 1
            } else if f.requestID == 0 && f.statusCode != .ok {
                throw ClientError(.server, "\(f.statusCode): \(String(decoding: f.value, as: UTF8.self))", status: f.statusCode)
            }
        }
        return out.map { $0! }
    }

    /// Throws `.server` unless the response's status is one of `allow`.
    public static func check(_ f: Frame, allow: Set<Status>) throws {
        if !allow.contains(f.statusCode) {
            let msg = String(decoding: f.value, as: UTF8.self)
            throw ClientError(.server, msg.isEmpty ? f.statusCode.description : "\(f.statusCode): \(msg)", status: f.statusCode)
        }
    }

    // MARK: Typed helpers

    public func ping() throws { try Self.check(call(.ping), allow: [.ok]) }

    /// The item, or nil on a miss. A stale item has `stale` set; a negative entry (a cached
    /// load failure) has `negative` set and its message as the value.
    public func get(_ key: [UInt8], namespace: [UInt8] = [], tiers: UInt8 = 0, wantMeta: Bool = false) throws -> ItemPayload? {
        let f = try call(.get(GetRequest(key: key, namespace: namespace, tiers: tiers, wantMeta: wantMeta)))
        if f.statusCode == .notFound { return nil }
        try Self.check(f, allow: [.ok, .negative])
        return try Responses.parseGet(f)
    }

    /// Stores the item; returns the response (status and version in `cas`).
    @discardableResult
    public func set(_ request: SetRequest) throws -> Frame {
        try call(.set(request))
    }

    public func stats() throws -> String {
        let f = try call(.stats)
        try Self.check(f, allow: [.ok])
        return String(decoding: f.value, as: UTF8.self)
    }

    /// STATS of one namespace or of the busiest namespaces (PROTOCOL.md §7.13.1): the node's
    /// JSON. A node that predates the groups answers its node-wide JSON instead (no
    /// `namespace`/`namespaces` field).
    public func stats(_ query: NamespaceStatsQuery) throws -> String {
        let f = try call(.namespaceStats(query))
        try Self.check(f, allow: [.ok])
        return String(decoding: f.value, as: UTF8.self)
    }
}
