import StrataWire

extension ClusterClient {
    /// FLUSH of `namespace` (or, with `all`, of every namespace) on every node, as one flush.
    /// Each node runs it; a node started with `--cluster` leaves a flush mark and answers its
    /// version in the CAS field (PROTOCOL.md §7.12 "In a cluster"). Then each of those nodes is
    /// sent the newest of the versions as a FLUSH with a version, so they all hold the same mark
    /// and their clocks are past it: a write sent after this returns is newer than the flush on
    /// every node, whatever the skew between the nodes' clocks. Returns the nodes that failed
    /// and why (empty: every node flushed). A node that could not be reached keeps its copies —
    /// a cluster node until anti-entropy brings it the mark, a plain node for good.
    public func flushEverywhere(namespace: [UInt8], all: Bool, tiers: UInt8 = 0) -> [(node: String, error: Error)] {
        var failures: [(node: String, error: Error)] = []
        var marked: [String] = []
        var newest: UInt64 = 0
        for n in configuration.nodes {
            do {
                let f = try onNode(n.name) { try $0.call(.flush(namespace: namespace, all: all, tiers: tiers)) }
                try NodeConnection.check(f, allow: [.ok])
                if f.cas > 0 { marked.append(n.name); newest = max(newest, f.cas) }
            } catch {
                failures.append((n.name, error))
            }
        }
        for name in marked {
            do {
                let f = try onNode(name) { try $0.call(.flush(namespace: namespace, all: all, tiers: tiers, version: newest)) }
                try NodeConnection.check(f, allow: [.ok, .superseded])
            } catch {
                failures.append((name, error))
            }
        }
        return failures
    }
}
