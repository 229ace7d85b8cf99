import StrataCore

// Per-namespace counters and disk usage (DESIGN.md "Namespaces"; MMKV's per-user scopes).
extension TieredCache {
    /// One namespace's counters (`StoreStats.Namespace`) with `diskItems`/`diskBytes`: its live
    /// items on disk (not expired, not past `maxAge`, not tombstones; every write that included
    /// the disk tier — memory-only items are not counted) and their value bytes before
    /// compression. Waits for the log's backlog to be applied first (a few ms when idle), then
    /// counts through the `(ns, key)` index: O(items of the namespace). All zero for a namespace
    /// the store has never seen.
    public func namespaceStats(_ namespace: [UInt8]) throws -> StoreStats.Namespace {
        if namespace.count > ItemLimits.maxNamespaceBytes {
            throw StoreError(.invalidNamespace, "namespace is \(namespace.count) bytes; the limit is \(ItemLimits.maxNamespaceBytes)")
        }
        if closed.load(ordering: .relaxed) { throw StoreError(.closed, "store is closed") }
        var n = registry.lookup(namespace).map { Self.counters($0.counters) } ?? StoreStats.Namespace()
        try log.waitApplied(log.end)
        let usage = try disk.namespaceUsage(namespace)
        n.diskItems = usage.items
        n.diskBytes = usage.bytes
        return n
    }

    /// The counters of every namespace the store has seen (no disk usage). O(namespaces); no
    /// SQLite work.
    public func namespaceCounters() -> [[UInt8]: StoreStats.Namespace] {
        var out: [[UInt8]: StoreStats.Namespace] = [:]
        for (name, e) in registry.snapshot() { out[name] = Self.counters(e.counters) }
        return out
    }

    /// Live items on disk and their value bytes, per namespace (namespaces without any are
    /// absent). One pass over every row: O(items) — for admin views and cached metrics. With
    /// `waitForBacklog`, the log's backlog is applied first, so every acknowledged write counts;
    /// such callers share passes (`SharedRun`: one at a time, each caller answered by a pass
    /// begun after it asked), so concurrent requests cost at most two passes, not one each.
    public func namespaceUsage(waitForBacklog: Bool) throws -> [[UInt8]: (items: Int, bytes: Int)] {
        if closed.load(ordering: .relaxed) { throw StoreError(.closed, "store is closed") }
        guard waitForBacklog else { return try disk.namespaceUsage() }
        return try usageScans.run {
            try log.waitApplied(log.end)
            return try disk.namespaceUsage()
        }
    }

    static func counters(_ c: NamespaceCounters) -> StoreStats.Namespace {
        var n = StoreStats.Namespace()
        n.hits = c.hits.load(ordering: .relaxed)
        n.misses = c.misses.load(ordering: .relaxed)
        n.writes = c.writes.load(ordering: .relaxed)
        n.sets = c.sets.load(ordering: .relaxed)
        return n
    }
}
