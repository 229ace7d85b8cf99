#if canImport(Glibc)
import Glibc
#endif
import Foundation
import StrataClient
import StrataCore
import StrataWire

// `--nodes`: client commands against a cluster, and `strata ring`.

let clusterOptions: Set<String> = ["--nodes", "--replicas", "--ack", "--read"]

func clusterConfiguration(_ o: ParsedOptions) throws -> ClusterConfiguration {
    let nodes: [NodeAddress]
    do { nodes = try NodeAddress.parseList(o.string("--nodes") ?? "", option: "--nodes") } catch let e as ClientError {
        throw e.kind == .connection ? e : UsageError(message: e.message)
    }
    guard !nodes.isEmpty else { throw UsageError(message: "--nodes needs at least one HOST:PORT") }
    var c = ClusterConfiguration(nodes: nodes)
    if let r = try o.int("--replicas", min: 1) { c.replicas = r }
    if let a = o.string("--ack") {
        guard let p = AckPolicy(rawValue: a) else { throw UsageError(message: "--ack must be one, majority or all, got '\(a)'") }
        c.ack = p
    }
    if let r = o.string("--read") {
        guard let p = ReadPolicy(rawValue: r) else { throw UsageError(message: "--read must be owner or quorum, got '\(r)'") }
        c.read = p
    }
    c.timeout = try timeoutOption(o, default: 2)
    c.token = try o.string("--auth-token-file").map(readToken)
    c.tls = try tlsOption(o)
    return c
}

/// Runs a client command against a cluster. Exit codes as for one node; a write exits 0 only
/// when its acknowledgement policy was met.
func runClusterCommand(_ name: String, _ o: ParsedOptions) throws -> Int32 {
    let cluster = try ClusterClient(configuration: try clusterConfiguration(o))
    let ns = try nsArg(o)
    // The cluster client picks each node's tiers itself (the owner all, replicas disk).
    if o.string("--tiers") != nil && name != "flush" { throw UsageError(message: "--tiers needs --server (with --nodes only flush takes it)") }
    if o.switches.contains("--write-behind") { throw UsageError(message: "--write-behind needs --server") }
    if o.switches.contains("--allow-unverified") {
        throw UsageError(message: "--allow-unverified needs --server (with --nodes an UNVERIFIED answer is checked with the key's other replicas)")
    }
    switch name {
    case "ping":
        var failed = 0
        for n in cluster.configuration.nodes {
            do { try cluster.onNode(n.name) { try $0.ping() }; printOut("\(n.name) PONG") } catch {
                printOut("\(n.name) DOWN: \(error)"); failed += 1
            }
        }
        return failed == 0 ? 0 : 3
    case "set":
        let key = try keyArg(o, "strata set KEY [VALUE]")
        let value = o.positionals.count > 1 ? Array(o.positionals[1].utf8) : try readValueFromStdin()
        var flags: UInt32 = 0
        if let f = try o.int("--flags") {
            guard f <= Int(UInt32.max) else { throw UsageError(message: "--flags must fit in 32 bits") }
            flags = UInt32(f)
        }
        let (mode, cas) = try setModeArg(o)
        let report = try cluster.setReporting(key, value, namespace: ns, expiry: try ttlArg(o) ?? .storeDefault, flags: flags,
                                              extended: try extFileArg(o), mode: mode, casVersion: cas,
                                              validateImage: o.switches.contains("--validate-image"))
        switch report.outcome {
        case .exists: return notStored(.exists, current: 0, key: o.positionals[0])!
        case .notFound: return notStored(.notFound, current: 0, key: o.positionals[0])!
        case .casMismatch(let current): return notStored(.casMismatch, current: current, key: o.positionals[0])!
        default: break
        }
        guard case .stored(let v) = report.outcome else { throw ClientError(.server, "not stored: \(report.outcome)") }
        // The nodes that acknowledged it (not merely the key's nodes); the others on stderr.
        printOut("stored \(value.count) bytes on \(report.acknowledged.map(\.name).joined(separator: ", ")), version \(v)")
        for f in report.failures { printErr("warning: not on \(f)") }
        return 0
    case "get":
        if o.string("--or-run") != nil { return try getOrRun(o, cluster) }
        let key = try keyArg(o, "strata get KEY")
        guard let item = try cluster.get(key, namespace: ns) else {
            printErr("not found: \(o.positionals[0])")
            return 1
        }
        return printItem(item, o)
    case "invalidate":
        let key = try keyArg(o, "strata invalidate KEY")
        return reportEverywhere(try cluster.invalidateReporting(key, namespace: ns), done: "invalidated", key: o.positionals[0])
    case "del":
        let key = try keyArg(o, "strata del KEY")
        return reportEverywhere(try cluster.deleteReporting(key, namespace: ns), done: "deleted", key: o.positionals[0])
    case "exists":
        let key = try keyArg(o, "strata exists KEY")
        if try cluster.exists(key, namespace: ns) { printOut("exists"); return 0 }
        printErr("not found: \(o.positionals[0])")
        return 1
    case "touch":
        let key = try keyArg(o, "strata touch KEY --ttl S")
        guard let e = try ttlArg(o) else { throw UsageError(message: "--ttl is required") }
        let touched = try cluster.touchReporting(key, namespace: ns, expiry: e)
        for f in touched.failures { printErr("warning: not on \(f)") }
        if touched.touched { return 0 }
        printErr("not found: \(o.positionals[0])")
        return 1
    case "incr", "decr":
        let key = try keyArg(o, "strata \(name) KEY [BY]")
        var by: UInt64 = 1
        if o.positionals.count > 1 {
            guard let n = UInt64(o.positionals[1]) else { throw UsageError(message: "BY must be a non-negative integer") }
            by = n
        }
        let initial = try o.string("--initial").map { (s: String) -> UInt64 in
            guard let n = UInt64(s) else { throw UsageError(message: "--initial must be a non-negative integer") }
            return n
        }
        let result = try cluster.counterReporting(key, delta: by, decrement: name == "decr", namespace: ns, initial: initial)
        for f in result.failures { printErr("warning: not on \(f)") }
        guard let v = result.value else {
            printErr("not found: \(o.positionals[0])")
            return 1
        }
        printOut(String(v))
        return 0
    case "meta":
        let key = try keyArg(o, "strata meta KEY")
        guard let m = try cluster.meta(key, namespace: ns) else { printErr("not found: \(o.positionals[0])"); return 1 }
        printOut("nodes         \(cluster.nodes(for: key, namespace: ns).map(\.name).joined(separator: ", "))")
        printMeta(m)
        return 0
    case "image-info", "variant":
        return try runOnNewestCopy(name, o, cluster, ns)
    case "stats":
        if let q = try namespaceQuery(o) {
            var down = 0
            var entries: [String] = [] // --json: {"nodes": [{"node", "stats"} or {"node", "error"}…]}
            for n in cluster.configuration.nodes {
                do {
                    let json = try cluster.onNode(n.name) { try $0.stats(q) }
                    if o.switches.contains("--json") { entries.append("{\"node\":\(jsonString(n.name)),\"stats\":\(json)}"); continue }
                    printOut("== \(n.name)")
                    _ = try printNamespaceStats(json, o, from: n.name)
                } catch {
                    down += 1
                    if o.switches.contains("--json") { entries.append("{\"node\":\(jsonString(n.name)),\"error\":\(jsonString("\(error)"))}"); continue }
                    printOut("== \(n.name) DOWN: \(error)")
                }
            }
            if o.switches.contains("--json") { printOut("{\"nodes\":[\(entries.joined(separator: ","))]}") }
            return down == 0 ? 0 : 3
        }
        var totals: [String: Double] = [:]
        var down = 0
        let asJSON = o.switches.contains("--json")
        // --json: one document — {"nodes": [{"node", "stats"} or {"node", "error"}…], "totals", "answering", "members"}.
        var entries: [String] = []
        for n in cluster.configuration.nodes {
            do {
                let json = try cluster.onNode(n.name) { try $0.stats() }
                let obj = (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [String: Any] ?? [:]
                for (k, v) in obj { if let d = (v as? NSNumber)?.doubleValue, !k.hasPrefix("latency") { totals[k, default: 0] += d } }
                if asJSON { entries.append("{\"node\":\(jsonString(n.name)),\"stats\":\(json)}"); continue }
                printOut("== \(n.name)")
                let width = (obj.keys.map(\.count).max() ?? 0) + 2 // the longest name and two spaces
                for k in obj.keys.sorted() { printOut("  " + k.padding(toLength: width, withPad: " ", startingAt: 0) + "\(obj[k]!)") }
            } catch {
                down += 1
                if asJSON { entries.append("{\"node\":\(jsonString(n.name)),\"error\":\(jsonString("\(error)"))}"); continue }
                printOut("== \(n.name) DOWN: \(error)")
            }
        }
        let members = cluster.configuration.nodes.count
        // Times and flags are not sums (cluster_verified 0 + 1 read as 1: an outside review).
        let summed = totals.keys.sorted().filter { !["uptime_s", "cluster_verified", "pid", "cluster_members", "max_item_bytes"].contains($0) }
        if asJSON {
            let t = summed.map { "\(jsonString($0)):\(Int64(totals[$0]!))" }.joined(separator: ",")
            printOut("{\"nodes\":[\(entries.joined(separator: ","))],\"totals\":{\(t)},\"answering\":\(members - down),\"members\":\(members)}")
        } else {
            printOut("== cluster totals (\(members - down) of \(members) nodes answering)")
            let width = (summed.map(\.count).max() ?? 0) + 2
            for k in summed { printOut("  " + k.padding(toLength: width, withPad: " ", startingAt: 0) + String(Int64(totals[k]!))) }
        }
        return down == 0 ? 0 : 3
    case "keys":
        // Every key lives on `replicas` distinct nodes: with fewer than that down, the others
        // list all of them (a warning names the ones that did not answer).
        var all = Set<[UInt8]>()
        var down: [(String, Error)] = []
        for n in cluster.configuration.nodes {
            var cursor: [UInt8] = []
            do {
                repeat {
                    let page = try cluster.onNode(n.name) { c -> (keys: [[UInt8]], next: [UInt8]?) in
                        let f = try c.call(.scan(namespace: ns, cursor: cursor, limit: 1000))
                        try NodeConnection.check(f, allow: [.ok])
                        return try Responses.parseScan(f)
                    }
                    all.formUnion(page.keys)
                    cursor = page.next ?? []
                } while !cursor.isEmpty
            } catch { down.append((n.name, error)) }
        }
        let replicas = min(cluster.configuration.replicas, cluster.configuration.nodes.count)
        if let first = down.first {
            guard down.count < replicas else { throw first.1 }
            for (name, e) in down {
                printErr("strata keys: \(name) did not answer (\(e)); its keys are listed from their other replicas (\(replicas) copies each)")
            }
        }
        // --limit N: the first N keys in byte order of the union, as with --server.
        let limit = try o.int("--limit", min: 1) ?? Int.max
        for k in all.sorted(by: { $0.lexicographicallyPrecedes($1) }).prefix(limit) { printOut(String(decoding: k, as: UTF8.self)) }
        return 0
    case "flush":
        let all = o.switches.contains("--all")
        guard all != (o.string("--ns") != nil) else { throw UsageError(message: "say which: --ns NS or --all") }
        let failures = cluster.flushEverywhere(namespace: ns, all: all, tiers: try tiersOption(o))
        if let first = failures.first {
            let which = failures.map { "\($0.node): \($0.error)" }.joined(separator: "; ")
            let status = (first.error as? ClientError)?.status
            throw ClientError(status == nil ? .connection : .server,
                              "flush failed on \(failures.count) of \(cluster.configuration.nodes.count) nodes (\(which))", status: status)
        }
        printOut((all ? "flushed everything on every node" : "flushed namespace '\(o.string("--ns")!)' on every node")
                 + tiersSuffix(try tiersOption(o)))
        return 0
    default:
        throw UsageError(message: "\(name) does not take --nodes")
    }
}

/// `strata ring`: where keys live, or how evenly a node set shares them.
func ringCommand(_ args: [String]) throws -> Int32 {
    // --ack, --read and --timeout are the other cluster options every client command takes
    // (README): accepted so one option set works with every command, and ignored — placement
    // does not depend on them (an outside review's wrapper failed on `ring` alone).
    let o = try ParsedOptions(args, valued: ["--nodes", "--replicas", "--keys", "--ns", "--ack", "--read", "--timeout"],
                              switches: ["--balance", "--help"], maxPositionals: 10_000)
    if o.switches.contains("--help") {
        printOut("""
        usage: strata ring --nodes HOST:PORT,… [--replicas N] [--ns NS] KEY…
               strata ring --nodes HOST:PORT,… --balance [--keys 100000]

        Prints each KEY's owner and replicas (proto-spec/RING.md), or, with --balance, one line
        per node: HOST:PORT COUNT PERCENT% for the keys key-0 … key-(N-1) it owns. Needs no node
        to be running. --ack, --read and --timeout are accepted and ignored (placement does not
        depend on them).
        """)
        return 0
    }
    var c = try clusterConfiguration(o)
    if let r = try o.int("--replicas", min: 1) { c.replicas = r }
    if c.replicas > c.nodes.count {
        printErr("note: --replicas \(c.replicas) with \(c.nodes.count) node\(c.nodes.count == 1 ? "" : "s"): a key has \(c.nodes.count) cop\(c.nodes.count == 1 ? "y" : "ies") (one per node)")
    }
    let ring = HashRing(members: c.nodes.map { .init(name: $0.name) }, pointsPerWeight: c.pointsPerWeight)
    if o.switches.contains("--balance") {
        let n = try o.int("--keys", min: 1) ?? 100_000
        var counts: [String: Int] = [:]
        for i in 0..<n { counts[ring.owner(for: Array("key-\(i)".utf8))!.name, default: 0] += 1 }
        for m in c.nodes {
            let count = counts[m.name] ?? 0
            printOut("\(m.name) \(count) " + String(format: "%.2f%%", Double(count) * 100 / Double(n)))
        }
        return 0
    }
    guard !o.positionals.isEmpty else { throw UsageError(message: "give KEYs, or --balance") }
    let ns = try nsArg(o)
    for k in o.positionals {
        let nodes = ring.nodes(for: Array(k.utf8), namespace: ns, count: c.replicas).map(\.name)
        printOut("\(k) owner \(nodes.first ?? "-") replicas \(nodes.dropFirst().joined(separator: ","))")
    }
    return 0
}

/// `s` as a JSON string literal (quotes, backslashes and control characters escaped).
func jsonString(_ s: String) -> String {
    var out = "\""
    for u in s.unicodeScalars {
        switch u {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case _ where u.value < 0x20: out += String(format: "\\u%04x", u.value)
        default: out.unicodeScalars.append(u)
        }
    }
    return out + "\""
}

/// `s` safe to print on a terminal: control characters (C0, DEL, C1 — escape sequences, line
/// breaks) as `\xNN` or `\u{NN}`, so a name a client chose cannot drive the reader's terminal.
func terminalSafe(_ s: String) -> String {
    var out = ""
    for u in s.unicodeScalars {
        if u.value < 0x20 || u.value == 0x7F { out += String(format: "\\x%02x", u.value) }
        else if (0x80...0x9F).contains(u.value) { out += "\\u{\(String(u.value, radix: 16))}" }
        else { out.unicodeScalars.append(u) }
    }
    return out
}

/// `image-info` and `variant` with `--nodes`: the node-side command (its output as with
/// `--server`), run on the first of the key's nodes that holds the newest version the cluster's
/// META read found (that read compares the key's nodes, as `get` does), so the facts or the
/// variant are of the current image. A variant is stored on the node that made it only
/// (PROTOCOL.md §7.16).
func runOnNewestCopy(_ name: String, _ o: ParsedOptions, _ cluster: ClusterClient, _ ns: [UInt8]) throws -> Int32 {
    let key = try keyArg(o, "strata \(name) KEY")
    guard let newest = try cluster.meta(key, namespace: ns) else { printErr("not found: \(o.positionals[0])"); return 1 }
    var reasons: [String] = []
    for node in cluster.nodes(for: key, namespace: ns) {
        do {
            let ran: Int32? = try cluster.onNode(node.name) { conn in
                let f = try conn.call(.meta(namespace: ns, key: key, tiers: 0))
                guard f.statusCode == .ok, try Responses.parseMeta(f).version == newest.version else { return nil }
                return try clientCommands[name]!.run(o, conn)
            }
            if let r = ran { return r }
            reasons.append("\(node.name): holds an older copy or none")
        } catch let e as ClientError where e.kind == .connection {
            reasons.append("\(node.name): \(e.message)")
        }
    }
    throw ClientError(.connection, "no node of \(quotedKey(key)) that holds its newest version (\(newest.version)) answered: \(reasons.joined(separator: "; "))")
}

/// `del` and `invalidate` through `--nodes`: a warning for each node that did not take it; 0 when
/// a node held the key, or when it met its policy but a node that did not answer may hold it
/// (said on stderr: that node gets it later by hinted handoff — not "not found"); else 1.
func reportEverywhere(_ report: ClusterDeleteReport, done: String, key: String) -> Int32 {
    for f in report.failures { printErr("warning: not on \(f)") }
    if report.found { return 0 }
    if report.existenceUnknown {
        printErr(report.failures.isEmpty
            ? "\(done); whether \(key) existed is unknown (a node had the request from another of its nodes first)"
            : "\(done) where the nodes answered; whether \(key) existed is unknown (a node that may hold it did not answer)")
        return 0
    }
    printErr("not found: \(key)")
    return 1
}
