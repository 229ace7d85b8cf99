#if canImport(Glibc)
import Glibc
#endif
import Foundation
import StrataClient
import StrataCore
import StrataWire

// `strata stats`: a node's counters, one namespace's, the busiest namespaces', or a live view.

/// `strata stats`: the node's counters (a table, or `--json` as the node sent them); with
/// `--ns NAME` one namespace's, with `--by-namespace` the busiest namespaces' (PROTOCOL.md
/// §7.13.1); `--watch` redraws rates in place.
func statsCommand(_ o: ParsedOptions, _ c: NodeConnection) throws -> Int32 {
    try checkStatsOptions(o)
    if o.switches.contains("--watch") { return try watchStats(o, c) }
    if let q = try namespaceQuery(o) {
        let json = try c.stats(q)
        return try printNamespaceStats(json, o, from: c.address.description)
    }
    let json = try c.stats()
    if o.switches.contains("--json") {
        printOut(json)
        return 0
    }
    guard let obj = (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [String: Any] else {
        throw ClientError(.protocolViolation, "the node's stats are not a JSON object")
    }
    let width = obj.keys.map(\.count).max() ?? 0
    for k in obj.keys.sorted() {
        printOut(k.padding(toLength: width + 2, withPad: " ", startingAt: 0) + "\(obj[k]!)")
    }
    return 0
}

/// `strata stats`'s options, checked without the node (a bad one is exit 2 whether the node is
/// up or not).
func checkStatsOptions(_ o: ParsedOptions) throws {
    if o.switches.contains("--watch") {
        if let other = ["--json", "--ns", "--by-namespace"].first(where: { o.switches.contains($0) || o.string($0) != nil }) {
            throw UsageError(message: "--watch shows the node's rates and cannot be combined with \(other)")
        }
        _ = try watchInterval(o)
        _ = try o.int("--count", min: 1)
        return
    }
    if let extra = o.positionals.first { throw UsageError(message: "unexpected argument '\(extra)'") }
    _ = try namespaceQuery(o)
}

/// `--watch [SECONDS]`'s interval (2 s by default).
func watchInterval(_ o: ParsedOptions) throws -> Double {
    guard let p = o.positionals.first else { return 2 }
    guard let v = Double(p), v >= 0.1, v <= 86400 else { throw UsageError(message: "--watch takes a number of seconds from 0.1 to 86400, got '\(p)'") }
    return v
}

/// The STATS group `--ns NAME` or `--by-namespace` asks for (nil: node-wide counters).
func namespaceQuery(_ o: ParsedOptions) throws -> NamespaceStatsQuery? {
    let byNamespace = o.switches.contains("--by-namespace")
    if byNamespace && o.string("--ns") != nil { throw UsageError(message: "give --ns NAME or --by-namespace, not both") }
    if byNamespace { return .top }
    return o.string("--ns") != nil ? .one(try nsArg(o)) : nil
}

/// Prints a namespace STATS answer: `--json` as sent; else one namespace as `name value`
/// lines, or the busiest namespaces as a table (one row each, then `(other)` summing the rest).
func printNamespaceStats(_ json: String, _ o: ParsedOptions, from node: String) throws -> Int32 {
    guard let obj = (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [String: Any] else {
        throw ClientError(.protocolViolation, "the node's stats are not a JSON object")
    }
    guard obj["namespace"] != nil || obj["namespaces"] != nil else {
        throw ClientError(.server, "\(node) answered without per-namespace stats (a node older than STATS groups, PROTOCOL.md §7.13.1)")
    }
    if o.switches.contains("--json") {
        printOut(json)
        return 0
    }
    let columns = ["items", "bytes", "hits", "misses", "sets", "writes"]
    func number(_ d: [String: Any], _ k: String) -> String { (d[k] as? NSNumber).map { "\($0.int64Value)" } ?? "-" }
    // Names are a client's bytes: escaped for the terminal, and by hex when not UTF-8.
    func shown(_ d: [String: Any]) -> String {
        let name = d["namespace"] as? String ?? "?"
        if name.unicodeScalars.contains("\u{FFFD}"), let h = d["namespace_hex"] as? String { return "hex:\(h)" }
        return "\"\(terminalSafe(name).replacingOccurrences(of: "\"", with: "\\\""))\""
    }
    if obj["namespace"] is String {
        printOut("namespace  \(shown(obj))")
        for k in columns { printOut(k.padding(toLength: 11, withPad: " ", startingAt: 0) + number(obj, k)) }
        return 0
    }
    let rows = (obj["namespaces"] as? [[String: Any]]) ?? []
    // The first column as wide as the longest name (characters, not bytes: an outside review
    // saw long names run into the numbers and non-ASCII ones shift the row).
    let width = max(28, (rows.map { shown($0).count }.max() ?? 0) + 2)
    func pad(_ s: String, _ n: Int) -> String { s.count >= n ? s + " " : s + String(repeating: " ", count: n - s.count) }
    func line(_ first: String, _ cells: [String]) -> String {
        let text = pad(first, width) + cells.map { pad($0, 12) }.joined()
        return String(text.reversed().drop { $0 == " " }.reversed())
    }
    printOut(line("namespace", columns))
    for r in rows { printOut(line(shown(r), columns.map { number(r, $0) })) }
    if let other = obj["other"] as? [String: Any] {
        printOut(line("(other: \(number(other, "namespaces")))", columns.map { number(other, $0) }))
    }
    printOut("\(number(obj, "namespaces_known")) namespaces known, \(number(obj, "namespaces_listed")) listed (the node's limit: \(number(obj, "limit")))")
    return 0
}

/// `strata stats --watch [SECONDS]`: ops/s, hit ratio and p99 per operation, refreshed in place.
func watchStats(_ o: ParsedOptions, _ c: NodeConnection) throws -> Int32 {
    let interval = try watchInterval(o)
    let rounds = try o.int("--count", min: 1) ?? Int.max
    func snapshot() throws -> [String: Double] {
        // A node that went away ends the watch with exit 3 (its error was swallowed here once,
        // and the screen kept drawing zeros: an outside review).
        let json = try c.stats()
        let obj = (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [String: Any] ?? [:]
        return obj.compactMapValues { ($0 as? NSNumber)?.doubleValue }
    }
    var before = try snapshot()
    var t0 = monotonicSeconds()
    for round in 0..<rounds {
        usleep(UInt32(interval * 1_000_000))
        let now = try snapshot()
        let t1 = monotonicSeconds()
        let dt = max(0.001, t1 - t0)
        var lines = ["strata stats --watch: \(c.address), every \(interval) s (Ctrl-C to stop)", ""]
        let hits = (now["memory_hits"] ?? 0) + (now["disk_hits"] ?? 0) - (before["memory_hits"] ?? 0) - (before["disk_hits"] ?? 0)
        let misses = (now["memory_misses"] ?? 0) + (now["disk_misses"] ?? 0) - (before["memory_misses"] ?? 0) - (before["disk_misses"] ?? 0)
        lines.append(String(format: "connections %.0f   memory items %.0f   disk items %.0f   hit ratio %@",
                            now["connections_current"] ?? 0, now["memory_items"] ?? 0, now["disk_items"] ?? 0,
                            hits + misses > 0 ? String(format: "%.1f %%", hits * 100 / (hits + misses)) : "-"))
        lines.append("")
        // The first column as wide as the longest name shown, plus a space (image_variant is 13).
        let width = Opcode.allCases.map(\.name.count).max()! + 1
        lines.append("op".padding(toLength: width, withPad: " ", startingAt: 0) + "ops/s       p99 µs")
        for op in Opcode.allCases {
            let key = "ops_\(op.name)"
            let rate = ((now[key] ?? 0) - (before[key] ?? 0)) / dt
            guard (now[key] ?? 0) > 0 else { continue }
            let p99 = now["latency_us_\(op.name)_p99"].map { String(format: "%.1f", $0) } ?? "-"
            lines.append(op.name.padding(toLength: width, withPad: " ", startingAt: 0)
                         + String(format: "%-12.1f", rate) + p99)
        }
        // Clear the screen and redraw, as top does.
        printOut("\u{1B}[H\u{1B}[2J" + lines.joined(separator: "\n"))
        before = now
        t0 = t1
        _ = round
    }
    return 0
}
