#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataNet
import StrataWire

/// One pipelined connection to one node: many requests in flight at once from any number of
/// threads or tasks, responses matched by request id (PROTOCOL.md §3). A reader thread owns
/// the receiving side. Every request is bounded by `requestTimeout`; a broken connection fails
/// its waiters with the reason and is reopened by the next request. Thread-safe.
public final class NodeClient: @unchecked Sendable {
    public let host: String
    public let port: UInt16
    public let connectTimeout: Double
    public let requestTimeout: Double
    public let token: [UInt8]?
    /// The node's TLS port and how to verify it (nil: plaintext).
    public let tls: TLSClientConfiguration?

    private let lock = Lock()
    private let sendLock = Lock()
    private var socket: ClientSocket?
    private var loadedTLS: ClientTLS?
    private var generation = 0
    private var nextID: UInt32 = 1
    private var waiters: [UInt32: Waiter] = [:]
    private var closed = false

    /// One request in flight. `finish` is called exactly once: by whoever removes it from
    /// `waiters` (the reader, the reaper on timeout, or close).
    private final class Waiter: @unchecked Sendable {
        let done = Completion<Result<Frame, ClientError>>()
        let deadline: Double
        var onDone: ((Result<Frame, ClientError>) -> Void)?
        init(deadline: Double) { self.deadline = deadline }
        func finish(_ r: Result<Frame, ClientError>) {
            done.fulfil(r)
            onDone?(r)
        }
    }

    private var reaperRunning = false

    /// Fails requests past their deadline (one thread per client, started on first use).
    private func startReaperIfNeeded() {
        let start: Bool = lock.withLock {
            if reaperRunning || closed { return false }
            reaperRunning = true
            return true
        }
        guard start else { return }
        startThread(name: "strata-reaper") { [self] in
            while true {
                usleep(20_000)
                let now = monotonicSeconds()
                let (expired, stop): ([Waiter], Bool) = lock.withLock {
                    let ids = waiters.filter { $0.value.deadline <= now }.map(\.key)
                    let ws = ids.compactMap { waiters.removeValue(forKey: $0) }
                    return (ws, closed)
                }
                for w in expired { w.finish(.failure(ClientError(.connection, "\(host):\(port) did not answer within \(requestTimeout) s"))) }
                if stop { break }
            }
        }
    }

    public init(host: String, port: UInt16, connectTimeout: Double = 2, requestTimeout: Double = 2, token: [UInt8]? = nil,
                tls: TLSClientConfiguration? = nil) {
        self.host = host; self.port = port; self.connectTimeout = connectTimeout
        self.requestTimeout = requestTimeout; self.token = token; self.tls = tls
    }

    deinit { close() }

    public func close() {
        let (s, pending): (ClientSocket?, [Waiter]) = lock.withLock {
            closed = true
            let s = socket
            socket = nil
            let p = Array(waiters.values)
            waiters.removeAll()
            return (s, p)
        }
        // The reader thread owns the descriptor and closes it; closing here too could close a
        // reused number that belongs to someone else.
        s?.shutdownBoth()
        for w in pending { w.finish(.failure(ClientError(.connection, "connection to \(host):\(port) closed"))) }
    }

    /// Opens the connection if it is not open (the TLS handshake when `tls` is set, then HELLO
    /// with the token when one is set).
    private func connectIfNeeded() throws -> (ClientSocket, Int) {
        if let open: (ClientSocket, Int) = lock.withLock({ socket.map { ($0, generation) } }) { return open }
        let address: SocketAddress
        do { address = try SocketAddress.resolving(host: host, port: port) } catch {
            throw ClientError(.connection, "\(error)")
        }
        var clientTLS: ClientTLS? = lock.withLock { loadedTLS }
        if clientTLS == nil, let t = tls {
            let loaded = try ClientTLS(t)
            lock.withLock { loadedTLS = loaded }
            clientTLS = loaded
        }
        let newSocket = try ClientSocket(address, timeout: connectTimeout, tls: clientTLS)
        // HELLO (with the token) on the bare socket, before anyone else can send on it.
        if let t = token {
            do {
                try helloOnBareSocket(newSocket, token: t)
            } catch {
                newSocket.close()
                throw error
            }
        }
        // The reader blocks in recv; a short receive timeout lets it notice close().
        newSocket.setReadTimeout(1)
        let gen: Int = lock.withLock {
            if closed { return -1 }
            if socket != nil { return -2 } // another caller connected first
            socket = newSocket
            generation += 1
            return generation
        }
        if gen < 0 {
            newSocket.close()
            if gen == -1 { throw ClientError(.connection, "client closed") }
            return try connectIfNeeded()
        }
        startThread(name: "strata-client") { [self] in readLoop(newSocket, generation: gen) }
        return (newSocket, gen)
    }

    private func helloOnBareSocket(_ s: ClientSocket, token: [UInt8]) throws {
        let bytes = Request.hello(minVersion: Wire.version, maxVersion: Wire.version, token: token).frame(id: 0xFFFF_FFFF).encoded()
        guard s.sendAll(bytes) else { throw ClientError(.connection, "sending HELLO to \(host):\(port) failed") }
        let decoder = FrameDecoder(magic: Wire.responseMagic, maxBody: 1 << 20)
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            if let (f, _) = try? decoder.decode(buffer) {
                try NodeConnection.check(f, allow: [.ok])
                return
            }
            guard let r = try? chunk.withUnsafeMutableBytes({ try s.read($0.baseAddress!, $0.count) }),
                  case .done(let n) = r, n > 0 else { throw ClientError(.connection, "no answer to HELLO from \(host):\(port)") }
            buffer.append(contentsOf: chunk[0..<n])
        }
    }

    private func readLoop(_ s: ClientSocket, generation gen: Int) {
        let decoder = FrameDecoder(magic: Wire.responseMagic, maxBody: (40 << 20))
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        var failure = "connection to \(host):\(port) closed by the node"
        loop: while true {
            if lock.withLock({ self.socket !== s || closed }) { break }
            let r: IOResult
            do { r = try chunk.withUnsafeMutableBytes { try s.read($0.baseAddress!, $0.count) } } catch {
                failure = "reading from \(host):\(port): \(error)"
                break
            }
            guard case .done(let n) = r else { continue } // receive timeout: check closed, go on
            if n == 0 { break }
            buffer.append(contentsOf: chunk[0..<n])
            while true {
                let next: (frame: Frame, consumed: Int)?
                do { next = try decoder.decode(buffer) } catch {
                    failure = "bad response from \(host):\(port): \(error)"
                    break loop
                }
                guard let (f, used) = next else { break }
                buffer.removeFirst(used)
                let w = lock.withLock { waiters.removeValue(forKey: f.requestID) }
                w?.finish(.success(f))
            }
        }
        // Fail everyone waiting on this connection; the next request reconnects.
        let pending: [Waiter] = lock.withLock {
            guard self.socket === s else { return [] }
            self.socket = nil
            let p = Array(waiters.values)
            waiters.removeAll()
            return p
        }
        s.close() // the reader owns the descriptor
        for w in pending { w.finish(.failure(ClientError(.connection, failure))) }
    }

    /// Sends `request`; every failure finishes `waiter` exactly once (never throws).
    private func submit(_ request: Request, _ waiter: Waiter) {
        let s: ClientSocket
        do { (s, _) = try connectIfNeeded() } catch {
            waiter.finish(.failure(error as? ClientError ?? ClientError(.connection, "\(error)")))
            return
        }
        let id: UInt32 = lock.withLock {
            var id = nextID
            while waiters[id] != nil || id == 0 || id == 0xFFFF_FFFF { id &+= 1 }
            nextID = id &+ 1
            waiters[id] = waiter
            return id
        }
        let frame = request.frame(id: id)
        if let why = frame.unencodable {
            if let w = lock.withLock({ waiters.removeValue(forKey: id) }) {
                w.finish(.failure(ClientError(.server, "\(why); nothing was sent", status: .tooLarge)))
            }
            return
        }
        let bytes = frame.encoded()
        let ok: Bool = sendLock.withLock { s.sendAll(bytes) }
        if !ok {
            // Part of a frame may be on the wire: the stream is unusable. Shutting it down makes
            // the reader fail every waiter (this one included) and the next request reconnects.
            s.shutdownBoth()
            if let w = lock.withLock({ waiters.removeValue(forKey: id) }) {
                w.finish(.failure(ClientError(.connection, "sending to \(host):\(port) failed")))
            }
        }
    }

    /// Sends `request` and waits (at most `requestTimeout`) for its response.
    public func requestBlocking(_ request: Request) throws -> Frame {
        startReaperIfNeeded()
        let w = Waiter(deadline: monotonicSeconds() + requestTimeout)
        submit(request, w)
        return try w.done.wait().get()
    }

    /// Sends `request` and awaits its response (at most `requestTimeout`).
    public func request(_ request: Request) async throws -> Frame {
        startReaperIfNeeded()
        let w = Waiter(deadline: monotonicSeconds() + requestTimeout)
        return try await withCheckedThrowingContinuation { (cont: CheckedContinuation<Frame, Error>) in
            w.onDone = { cont.resume(with: $0.mapError { $0 as Error }) }
            submit(request, w)
        }
    }
}
