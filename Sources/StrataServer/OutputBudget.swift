import Synchronization

/// The node-wide bound on unsent response bytes (`--max-output-bytes`).
///
/// `used` counts every connection's unsent output, plus answers a worker has made and not yet
/// handed to its connection. Past `limit` the node applies back-pressure instead of buffering
/// more: a connection that has unsent output or requests in flight starts no new request (its
/// next frames stay in its socket, so the client's sends stall), and a worker that finds the
/// node over the limit gives such a request back to its connection instead of running it.
/// A connection with nothing unsent and nothing in flight may always start one request, so a
/// new client is served (PING, and one answer at a time) while others are held.
///
/// What it guarantees: unsent output grows past `limit` only by answers already being made
/// when it was crossed plus one answer per connection that had nothing pending (a large value
/// read from disk counts from the moment it is read, `PrechargedOutput`); answers of
/// 16 KiB or more share the value's buffer (`OutputQueue`), so many connections reading one
/// value hold one copy. Costs one relaxed atomic add per change of a connection's unsent
/// bytes and one atomic load per request.
///
/// One connection's share: a connection whose own unsent output reached `share` (1/16 of the
/// limit, at least 1 MiB) starts no more requests that answer with values (GET, MGET, SCAN,
/// IMAGE_VARIANT; memcached get/gets/gat/gats/mg) until it has sent it all. So one client that
/// pipelines many large GETs and never reads cannot fill the bound alone: it takes 16 such
/// clients, which stall together and are cut together (an outside review saw 24 of them hold
/// other clients' GETs for 10–15 s, one connection at a time).
final class OutputBudget: Sendable {
    let limit: Int
    let share: Int
    private let used = Atomic<Int>(0)
    private let peak = Atomic<Int>(0)
    /// Requests held back because the node was over the limit.
    let heldRequests = Atomic<Int>(0)

    init(limit: Int) {
        self.limit = limit
        share = max(limit / 16, 1 << 20)
    }

    func add(_ n: Int) {
        let now = used.add(n, ordering: .relaxed).newValue
        if n > 0 { peak.max(now, ordering: .relaxed) }
    }

    var bytes: Int { used.load(ordering: .relaxed) }
    var peakBytes: Int { peak.load(ordering: .relaxed) }
    var over: Bool { used.load(ordering: .relaxed) >= limit }
}
