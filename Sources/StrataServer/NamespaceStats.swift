import StrataCore
import StrataStore
import StrataWire
import Synchronization

/// Per-namespace statistics (MMKV's per-user scopes; DESIGN.md "Namespaces"): STATS with a
/// group (PROTOCOL.md §7.13.1) and the `strata_namespace_*` series of /metrics.
///
/// Guarantees: at most `limit` namespaces are ever listed (the busiest by hits + misses +
/// sets, ties by name), everything else summed into one `other` entry, so 100,000 namespaces
/// cost one sort per request, never 100,000 series. Costs: counters are O(namespaces) with no
/// SQLite work; `items`/`bytes` need a count in SQLite — O(items of the namespace) for one
/// namespace, O(all items) for the list (STATS runs it on a disk worker; /metrics reuses a
/// count at most `NamespaceUsageCache.maxAge` seconds old).
enum NamespaceStats {
    /// The namespaces to list, busiest first, and the counters of the rest summed.
    static func rank(_ counters: [[UInt8]: StoreStats.Namespace], limit: Int)
        -> (top: [([UInt8], StoreStats.Namespace)], rest: [[UInt8]]) {
        let sorted = counters.sorted {
            $0.value.traffic != $1.value.traffic ? $0.value.traffic > $1.value.traffic : $0.key.lexicographicallyPrecedes($1.key)
        }
        return (Array(sorted.prefix(limit)), sorted.dropFirst(limit).map(\.key))
    }

    /// The fields of one namespace's JSON object (PROTOCOL.md §7.13.1), in order.
    static func fields(_ n: StoreStats.Namespace, items: Int, bytes: Int) -> String {
        "\"items\":\(items),\"bytes\":\(bytes),\"hits\":\(n.hits),\"misses\":\(n.misses),\"sets\":\(n.sets),\"writes\":\(n.writes)"
    }

    static func nameFields(_ name: [UInt8]) -> String {
        "\"namespace\":\(jsonString(name)),\"namespace_hex\":\"\(hex(name))\""
    }

    /// The answer to STATS with group `namespace` or `namespaces`.
    /// `visible`: only these namespaces are listed, counted or summed into `other` (a user's
    /// own, PROTOCOL.md §4.1); nil: every namespace.
    static func json(_ q: NamespaceStatsQuery, store: TieredCache, limit: Int, visible: ((([UInt8]) -> Bool))? = nil) throws -> String {
        switch q {
        case .one(let name):
            let n = try store.namespaceStats(name)
            return "{" + nameFields(name) + "," + fields(n, items: n.diskItems ?? 0, bytes: n.diskBytes ?? 0) + "}"
        case .top:
            var counters = store.namespaceCounters()
            var usage: [[UInt8]: (items: Int, bytes: Int)] = [:]
            if let visible {
                // A scoped user's view: its own namespaces counted one by one (O(their
                // items)), never a pass over every tenant's rows — none when it sees none.
                counters = counters.filter { visible($0.key) }
                if counters.count <= 64 {
                    for name in counters.keys {
                        let n = try store.namespaceStats(name)
                        usage[name] = (n.diskItems ?? 0, n.diskBytes ?? 0)
                    }
                } else {
                    usage = try store.namespaceUsage(waitForBacklog: true)
                }
            } else {
                usage = try store.namespaceUsage(waitForBacklog: true)
            }
            let (top, rest) = rank(counters, limit: limit)
            let listed = top.map { name, n in
                "{" + nameFields(name) + "," + fields(n, items: usage[name]?.items ?? 0, bytes: usage[name]?.bytes ?? 0) + "}"
            }
            var other = StoreStats.Namespace()
            var items = 0, bytes = 0
            for name in rest {
                let n = counters[name]!
                other.hits += n.hits; other.misses += n.misses; other.sets += n.sets; other.writes += n.writes
                items += usage[name]?.items ?? 0; bytes += usage[name]?.bytes ?? 0
            }
            return "{\"namespaces_known\":\(counters.count),\"namespaces_listed\":\(top.count),\"limit\":\(limit),"
                + "\"namespaces\":[" + listed.joined(separator: ",") + "],"
                + "\"other\":{\"namespaces\":\(rest.count)," + fields(other, items: items, bytes: bytes) + "}}"
        }
    }

    /// The `strata_namespace_*` metric families: the listed namespaces labelled `ns="NAME"`
    /// (`ns_hex="HEX"` when the name is not UTF-8), the rest summed under `other="true"` (always present, so the series set is stable).
    static func prometheus(store: TieredCache, limit: Int, usage: [[UInt8]: (items: Int, bytes: Int)]) -> String {
        let counters = store.namespaceCounters()
        let (top, rest) = rank(counters, limit: limit)
        var out = "# HELP strata_namespaces Namespaces the node knows (written, read or on disk since it opened).\n"
        out += "# TYPE strata_namespaces gauge\nstrata_namespaces \(counters.count)\n"
        let families: [(String, String, String, (StoreStats.Namespace, [UInt8]?) -> Int)] = [
            ("namespace_items", "gauge", "Live items on disk, by namespace (as of the last count, at most 60 s old).",
             { _, name in name.map { usage[$0]?.items ?? 0 } ?? rest.reduce(0) { $0 + (usage[$1]?.items ?? 0) } }),
            ("namespace_bytes", "gauge", "Value bytes (uncompressed) of the live items on disk, by namespace (at most 60 s old).",
             { _, name in name.map { usage[$0]?.bytes ?? 0 } ?? rest.reduce(0) { $0 + (usage[$1]?.bytes ?? 0) } }),
            ("namespace_hits_total", "counter", "Reads that found a live item, by namespace.", { n, _ in n.hits }),
            ("namespace_misses_total", "counter", "Reads that found none, by namespace.", { n, _ in n.misses }),
            ("namespace_sets_total", "counter", "SETs of any mode, by namespace.", { n, _ in n.sets }),
        ]
        var other = StoreStats.Namespace()
        for name in rest {
            let n = counters[name]!
            other.hits += n.hits; other.misses += n.misses; other.sets += n.sets
        }
        for (name, type, help, value) in families {
            out += "# HELP strata_\(name) \(help) One series (label ns) for each of the \(limit) busiest namespaces by hits + misses + sets; other=\"true\" sums the rest.\n"
            out += "# TYPE strata_\(name) \(type)\n"
            for (ns, n) in top { out += "strata_\(name){\(label(ns))} \(value(n, ns))\n" }
            out += "strata_\(name){other=\"true\"} \(value(other, nil))\n"
        }
        return out
    }

    /// A JSON string for a namespace's bytes (invalid UTF-8 replaced by U+FFFD; `namespace_hex`
    /// carries the exact bytes).
    static func jsonString(_ b: [UInt8]) -> String {
        var out = "\""
        for u in String(decoding: b, as: UTF8.self).unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case _ where u.value < 0x20: out += "\\u" + String(repeating: "0", count: 4 - String(u.value, radix: 16).count) + String(u.value, radix: 16)
            default: out.unicodeScalars.append(u)
            }
        }
        return out + "\""
    }

    /// The label naming one namespace: `ns="NAME"` when its bytes are UTF-8 without control
    /// characters, else `ns_hex="HEX"` (replacing the bytes that are not would give two
    /// namespaces one series; a raw CR or ESC a tenant put in its name would reach whoever
    /// reads the page in a terminal — an outside review, sec4).
    static func label(_ b: [UInt8]) -> String {
        let printable = !b.contains { $0 < 0x20 || $0 == 0x7F } && String(validating: b, as: UTF8.self) != nil
        return printable ? "ns=\"\(labelValue(b))\"" : "ns_hex=\"\(hex(b))\""
    }

    /// A Prometheus label value: `\`, `"` and newlines escaped (text format 0.0.4).
    static func labelValue(_ b: [UInt8]) -> String {
        var out = ""
        for c in String(decoding: b, as: UTF8.self) {
            switch c {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(c)
            }
        }
        return out
    }

    static func hex(_ b: [UInt8]) -> String {
        let digits = Array("0123456789abcdef")
        return String(b.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 15)]] })
    }
}

/// The per-namespace disk usage /metrics reports: counted (O(all items), on the scraping
/// thread) when the last count is older than `maxAge` seconds, reused otherwise, so frequent
/// scrapes do not each scan the database. Thread-safe.
final class NamespaceUsageCache: Sendable {
    static let maxAge = 60.0
    private let state = Mutex<(taken: Double, usage: [[UInt8]: (items: Int, bytes: Int)])>((-.infinity, [:]))

    func usage(_ store: TieredCache) -> [[UInt8]: (items: Int, bytes: Int)] {
        let now = monotonicSeconds()
        return state.withLock { s in
            if now - s.taken >= Self.maxAge, let fresh = try? store.namespaceUsage(waitForBacklog: false) {
                s = (now, fresh)
            }
            return s.usage
        }
    }
}
