#if canImport(Glibc)
import Glibc
#endif
import Foundation
import StrataClient
import StrataCore
import StrataNet
import StrataWire

struct ClientCommand: Sendable {
    let usage: String
    let valued: Set<String>
    let switches: Set<String>
    let positionals: Int
    let run: @Sendable (ParsedOptions, NodeConnection) throws -> Int32
}

/// The commands that also take `--nodes` (ClusterCommands.swift).
let clusterCommandNames: Set<String> = ["ping", "set", "get", "invalidate", "del", "exists", "touch", "incr", "decr", "meta",
                                        "stats", "keys", "flush", "image-info", "variant"]

/// `common` less the cluster options, for the commands that take `--server` only.
var serverOnlyCommon: String {
    var lines = common.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    if let i = lines.firstIndex(where: { $0.hasPrefix("  --nodes") }) { lines.removeSubrange(i...(i + 2)) }
    lines.removeAll { $0.hasPrefix("  --replicas") || $0.hasPrefix("  --ack") || $0.hasPrefix("  --read") }
    return lines.map { $0.replacingOccurrences(of: " (default 5; 2 per node with --nodes)", with: " (default 5)") }.joined(separator: "\n")
}

let common = "  --server HOST:PORT   the node (default 127.0.0.1:7400, or STRATA_SERVER)\n  --nodes H:P,H:P,…    a cluster instead (keys placed by proto-spec/RING.md); an entry\n                       dns:NAME:PORT stands for every address NAME resolves to,\n                       file:PATH for the entries in that file\n  --replicas N         copies in total with --nodes (default 2)\n  --ack one|majority|all   nodes that must confirm a write (default all)\n  --read owner|quorum  where reads go (default owner, with version checks after a node restarts)\n  --auth-token-file F  authenticate with the token in F\n  --tls --tls-ca FILE  connect to the node's TLS port (--tls-port); its certificate must chain\n                       to the CA in FILE and name the host (an IP address: an IP SAN)\n  --tls-cert FILE --tls-key FILE   this client's certificate and key (mutual TLS)\n  --tls-server-name N  the name the node's certificate must carry instead of the host\n  --timeout SECONDS    per request (default 5; 2 per node with --nodes)"
let clientCommands: [String: ClientCommand] = [
    "ping": ClientCommand(usage: "strata ping", valued: [], switches: [], positionals: 0) { _, c in
        let t0 = monotonicSeconds()
        try c.ping()
        printOut(String(format: "PONG from %@ in %.2f ms", c.address.description, (monotonicSeconds() - t0) * 1000))
        return 0
    },
    "stats": ClientCommand(usage: "strata stats [--json] [--watch [SECONDS]] [--ns NAME | --by-namespace]",
                           valued: ["--count", "--ns"], switches: ["--json", "--watch", "--by-namespace"], positionals: 1) { o, c in
        try statsCommand(o, c)
    },
    "set": ClientCommand(usage: """
                         strata set KEY [VALUE] [--ttl S] [--ns NS] [--tiers memory|disk|all] [--flags N] [--validate-image]
                                        [--write-behind] [--ext-file FILE] [--mode add|replace|cas] [--cas VERSION]
                           --write-behind: answered before the write is in the node's log (a crash may lose it)
                           --ext-file: store FILE's bytes (≤ 4096) as the item's extended data (read back with get --ext)
                           --mode set (the default) stores; add: only if absent; replace: only if present; cas: only
                           if its version is --cas VERSION (a version set printed or get --meta shows; --cas alone
                           means --mode cas). Not stored: exit 1, and why
                         """,
                         valued: keyOpts.union(["--ttl", "--flags", "--ext-file", "--mode", "--cas"]), switches: ["--validate-image", "--write-behind"],
                         positionals: 2) { o, c in
        let key = try keyArg(o, "strata set KEY [VALUE]")
        var value: [UInt8]
        if o.positionals.count > 1 { value = Array(o.positionals[1].utf8) } else {
            // A person at a terminal who left the value out is told where it is read from.
            if isatty(0) != 0 { printErr("strata set: reading the value from standard input (end it with Ctrl-D; or give it: strata set KEY VALUE)") }
            // The node's limit first: the read stops there instead of holding all of stdin.
            let limit = (try? JSONSerialization.jsonObject(with: Data(c.stats().utf8)) as? [String: Any])?["max_item_bytes"] as? Int
            value = try readValueFromStdin(limit: limit)
        }
        var s = SetRequest(key: key, value: value, namespace: try nsArg(o))
        s.tiers = try tiersOption(o)
        s.validateImage = o.switches.contains("--validate-image")
        s.writeBehind = o.switches.contains("--write-behind")
        s.extended = try extFileArg(o)
        if let e = try ttlArg(o) { s.expiry = e }
        if let f = try o.int("--flags") {
            guard f <= Int(UInt32.max) else { throw UsageError(message: "--flags must fit in 32 bits") }
            s.flags = UInt32(f)
        }
        (s.mode, s.casVersion) = try setModeArg(o)
        let resp = try c.set(s)
        if let code = notStored(resp.statusCode, current: resp.cas, key: o.positionals[0]) { return code }
        try NodeConnection.check(resp, allow: [.ok])
        printOut("stored \(value.count) bytes, version \(resp.cas)")
        return 0
    },
    "get": ClientCommand(usage: """
                         strata get KEY [--ns NS] [--tiers memory|disk|all] [--meta] [--ext] [--allow-unverified]
                           --ext: print the item's extended data instead of its value (bytes as stored)
                           --allow-unverified: with --server, print an answer the node flagged UNVERIFIED (it has not
                           caught up with the key's other replicas) with a warning, instead of failing (exit 3)
                                strata get KEY --or-run 'COMMAND' [--ttl S] [--negative-ttl S] [--max-wait 10] [--refresh-ahead S]
                           --or-run: on a miss, run COMMAND (once among all callers, under the key's lease), store its
                           stdout with --ttl and print it; a failing command exits 1 and, with --negative-ttl, is
                           remembered (later calls exit 1 with "cached failure" without running it) until that expires
                         """,
                         valued: keyOpts.union(readThroughOptions).union(["--ttl"]), switches: ["--meta", "--ext", "--allow-unverified"],
                         positionals: 1) { o, c in
        let key = try keyArg(o, "strata get KEY")
        let f = try c.call(.get(GetRequest(key: key, namespace: try nsArg(o), tiers: try tiersOption(o), wantMeta: o.switches.contains("--meta"))))
        try refuseUnverified(f, c, o)
        if f.statusCode == .notFound {
            printErr("not found: \(o.positionals[0])")
            return 1
        }
        try NodeConnection.check(f, allow: [.ok, .negative])
        return printItem(try Responses.parseGet(f), o)
    },
    "invalidate": ClientCommand(usage: "strata invalidate KEY [--ns NS] [--tiers …]  (mark stale: served, flagged, until refreshed)",
                                valued: keyOpts, switches: [], positionals: 1) { o, c in
        let key = try keyArg(o, "strata invalidate KEY")
        return try finish(c.call(.invalidate(namespace: try nsArg(o), key: key, tiers: try tiersOption(o), version: nil)),
                          notFoundMessage: "not found: \(o.positionals[0])")
    },
    "del": ClientCommand(usage: "strata del KEY [--ns NS] [--tiers memory|disk|all] [--write-behind]  (removes from the tiers named only)",
                         valued: keyOpts, switches: ["--write-behind"], positionals: 1) { o, c in
        let key = try keyArg(o, "strata del KEY")
        return try finish(c.call(.delete(namespace: try nsArg(o), key: key, tiers: try tiersOption(o), version: nil,
                                         writeBehind: o.switches.contains("--write-behind"))),
                          notFoundMessage: "not found: \(o.positionals[0])")
    },
    "exists": ClientCommand(usage: "strata exists KEY [--ns NS] [--tiers …] [--allow-unverified]", valued: keyOpts, switches: ["--allow-unverified"],
                            positionals: 1) { o, c in
        let key = try keyArg(o, "strata exists KEY")
        let f = try c.call(.exists(namespace: try nsArg(o), key: key, tiers: try tiersOption(o)))
        try refuseUnverified(f, c, o)
        let code = try finish(f, notFoundMessage: "not found: \(o.positionals[0])")
        if code == 0 { printOut("exists") }
        return code
    },
    "touch": ClientCommand(usage: "strata touch KEY --ttl S [--ns NS] [--tiers …]", valued: keyOpts.union(["--ttl"]), switches: [], positionals: 1) { o, c in
        let key = try keyArg(o, "strata touch KEY --ttl S")
        guard let e = try ttlArg(o) else { throw UsageError(message: "--ttl is required") }
        return try finish(c.call(.touch(namespace: try nsArg(o), key: key, tiers: try tiersOption(o), expiry: e)),
                          notFoundMessage: "not found: \(o.positionals[0])")
    },
    "incr": counterCommand(decrement: false),
    "decr": counterCommand(decrement: true),
    "meta": ClientCommand(usage: "strata meta KEY [--ns NS] [--tiers …] [--allow-unverified]", valued: keyOpts, switches: ["--allow-unverified"], positionals: 1) { o, c in
        let key = try keyArg(o, "strata meta KEY")
        let f = try c.call(.meta(namespace: try nsArg(o), key: key, tiers: try tiersOption(o)))
        try refuseUnverified(f, c, o)
        if f.statusCode == .notFound { printErr("not found: \(o.positionals[0])"); return 1 }
        try NodeConnection.check(f, allow: [.ok])
        printMeta(try Responses.parseMeta(f))
        return 0
    },
    "keys": ClientCommand(usage: "strata keys [--ns NS] [--limit N]", valued: ["--ns", "--limit"], switches: [], positionals: 0) { o, c in
        let ns = try nsArg(o)
        let limit = try o.int("--limit", min: 1) ?? Int.max
        var cursor: [UInt8] = []
        var printed = 0
        repeat {
            let f = try c.call(.scan(namespace: ns, cursor: cursor, limit: UInt32(min(1000, limit - printed))))
            try NodeConnection.check(f, allow: [.ok])
            let page = try Responses.parseScan(f)
            for k in page.keys { printOut(String(decoding: k, as: UTF8.self)) }
            printed += page.keys.count
            cursor = page.next ?? []
        } while !cursor.isEmpty && printed < limit
        return 0
    },
    "image-info": ClientCommand(usage: "strata image-info KEY [--ns NS]", valued: ["--ns"], switches: [], positionals: 1) { o, c in
        let key = try keyArg(o, "strata image-info KEY")
        let f = try c.call(.imageInfo(namespace: try nsArg(o), key: key))
        if f.statusCode == .notFound { printErr("not found: \(o.positionals[0])"); return 1 }
        try NodeConnection.check(f, allow: [.ok])
        let e = f.extras
        guard e.count == 12 else { throw ClientError(.protocolViolation, "bad image_info answer") }
        let w = e[1...4].reduce(0) { $0 << 8 | Int($1) }, h = e[5...8].reduce(0) { $0 << 8 | Int($1) }
        printOut("format  \(imageFormatNames[Int(e[0])] ?? "?")")
        printOut("size    \(w)×\(h)")
        printOut("alpha   \(e[9] & 1 != 0 ? "yes" : "no")")
        printOut("frames  \(Int(e[10]) << 8 | Int(e[11]))\(e[9] & 2 != 0 ? " (animated)" : "")")
        return 0
    },
    "variant": ClientCommand(usage: "strata variant KEY --width W --height H [--fit contain|cover] [--format webp|png] [--quality 0-100|lossless (default 80)] [--ns NS] > out",
                             valued: ["--ns", "--width", "--height", "--fit", "--format", "--quality"], switches: [], positionals: 1) { o, c in
        let f = try c.call(.imageVariant(try variantRequest(o)))
        if f.statusCode == .notFound { printErr("not found: \(o.positionals[0])"); return 1 }
        try NodeConnection.check(f, allow: [.ok])
        let v = try Responses.parseImageVariant(f)
        printErr("\(v.width)×\(v.height), \(v.bytes.count) bytes\(v.cached ? " (cached)" : "")")
        writeBytes(v.bytes)
        return 0
    },
    "flush": ClientCommand(usage: """
                           strata flush (--ns NS | --all) [--tiers memory|disk|all]
                             --tiers memory: empty memory only (the disk keeps everything; later reads find it there)
                             --tiers disk: empty the disk only (memory copies stay until evicted)
                           """, valued: ["--ns", "--tiers"], switches: ["--all"], positionals: 0) { o, c in
        let all = try flushAllOption(o)
        let tiers = try tiersOption(o)
        let f = try c.call(.flush(namespace: try nsArg(o), all: all, tiers: tiers))
        try NodeConnection.check(f, allow: [.ok])
        printOut((all ? "flushed everything" : "flushed namespace '\(o.string("--ns")!)'") + tiersSuffix(tiers))
        return 0
    },
]

/// `strata variant`'s request from its options.
func variantRequest(_ o: ParsedOptions) throws -> VariantRequest {
    let key = try keyArg(o, "strata variant KEY --width W --height H")
    guard let w = try o.int("--width", min: 1), let h = try o.int("--height", min: 1) else {
        throw UsageError(message: "--width and --height (1…65535) are required")
    }
    guard w <= 65535, h <= 65535 else { throw UsageError(message: "--width and --height must be at most 65535, got \(w)×\(h)") }
    var r = VariantRequest(key: key, maxWidth: UInt16(w), maxHeight: UInt16(h), namespace: try nsArg(o))
    switch o.string("--fit") ?? "contain" {
    case "contain": r.fit = 0
    case "cover": r.fit = 1
    case let x: throw UsageError(message: "--fit must be contain or cover, got '\(x)'")
    }
    switch o.string("--format") ?? "webp" {
    case "webp": r.format = 0
    case "png": r.format = 1
    case let x: throw UsageError(message: "--format must be webp or png, got '\(x)'")
    }
    if let q = o.string("--quality") {
        if q == "lossless" { r.quality = 255 } else {
            guard let n = UInt8(q), n <= 100 else { throw UsageError(message: "--quality must be 0–100 or lossless, got '\(q)'") }
            r.quality = n
        }
    }
    return r
}

/// `strata flush`: true for `--all`, false for `--ns NS` (exactly one is given).
func flushAllOption(_ o: ParsedOptions) throws -> Bool {
    let all = o.switches.contains("--all")
    guard all != (o.string("--ns") != nil) else { throw UsageError(message: "say which: --ns NS or --all") }
    return all
}

/// `--initial N` of incr/decr (nil: not given).
func initialOption(_ o: ParsedOptions) throws -> UInt64? {
    guard let i = o.string("--initial") else { return nil }
    guard let n = UInt64(i) else { throw UsageError(message: "--initial must be a non-negative integer, got '\(i)'") }
    return n
}

/// PROTOCOL.md §7.10's image format codes, as `meta` and `image-info` print them.
let imageFormatNames = [1: "png", 2: "apng", 3: "webp (lossy)", 4: "webp (lossless)", 5: "webp (animated)", 6: "gif", 7: "jpeg"]

func counterCommand(decrement: Bool) -> ClientCommand {
    let name = decrement ? "decr" : "incr"
    return ClientCommand(usage: "strata \(name) KEY [BY] [--ns NS] [--initial N] [--tiers …]", valued: keyOpts.union(["--initial"]), switches: [], positionals: 2) { o, c in
        let key = try keyArg(o, "strata \(name) KEY [BY]")
        var by: UInt64 = 1
        if o.positionals.count > 1 {
            guard let n = UInt64(o.positionals[1]) else { throw UsageError(message: "BY must be a non-negative integer, got '\(o.positionals[1])'") }
            by = n
        }
        var r = CounterRequest(key: key, delta: by, namespace: try nsArg(o), decrement: decrement)
        r.tiers = try tiersOption(o)
        if let n = try initialOption(o) { r.initial = n }
        let f = try c.call(.counter(r))
        if f.statusCode == .notFound { printErr("not found: \(o.positionals[0])"); return 1 }
        try NodeConnection.check(f, allow: [.ok])
        printOut(String(try Responses.parseCounter(f)))
        return 0
    }
}

/// `strata meta`'s lines (one node's answer; with `--nodes` the newest copy's, after its nodes).
func printMeta(_ m: MetaInfo) {
    printOut("size          \(m.size)")
    printOut("stored size   \(m.storedSize < 0 ? "-" : String(m.storedSize))")
    printOut("encoding      \(m.encoding == 255 ? "-" : m.encoding == 1 ? "zstd" : "raw")")
    printOut("tiers         \(Tiers(rawValue: m.tiersPresent).description)")
    printOut("expires       \(formatExpiry(m.expiresAt))")
    printOut("version       \(m.version)")
    printOut("flags         \(m.flags)")
    printOut("extended      \(m.extendedSize) bytes")
    if m.imageFormat != 0 {
        var facts = ["\(imageFormatNames[Int(m.imageFormat)] ?? "format \(m.imageFormat)") \(m.imageWidth)×\(m.imageHeight)"]
        if m.imageFlags & 1 != 0 { facts.append("alpha") }
        // Frames are named for an animation, and for any image whose count is not 1 (a GIF
        // with no image descriptor has 0, as an APNG with acTL 0 does: said alike).
        if m.imageFlags & 2 != 0 { facts.append("animated, \(m.imageFrames) frames") } else if m.imageFrames != 1 { facts.append("\(m.imageFrames) frames") }
        printOut("image         \(facts.joined(separator: ", "))")
    }
}

func runClientCommand(_ name: String, _ spec: ClientCommand, _ args: [String]) throws -> Int32 {
    let o = try ParsedOptions(args, valued: spec.valued.union(["--server", "--auth-token-file", "--timeout", "--initial"]).union(clusterOptions).union(tlsValued),
                              switches: spec.switches.union(["--help", "--all", "--json", "--meta", "--tls"]), maxPositionals: spec.positionals)
    if o.switches.contains("--help") {
        printOut("usage: \(spec.usage)\n\n\(clusterCommandNames.contains(name) ? common : serverOnlyCommon)")
        return 0
    }
    if spec.usage.contains(" KEY") && o.positionals.isEmpty {
        throw UsageError(message: "a KEY is required (usage: \(spec.usage))")
    }
    for (opt, allowed) in [("--initial", spec.valued.contains("--initial")), ("--all", spec.switches.contains("--all")),
                           ("--json", spec.switches.contains("--json")), ("--meta", spec.switches.contains("--meta"))] where !allowed {
        if o.values[opt] != nil || o.switches.contains(opt) { throw UsageError(message: "unknown option '\(opt)'") }
    }
    if o.string("--nodes") != nil {
        if o.string("--server") != nil { throw UsageError(message: "give --server or --nodes, not both") }
        return try runClusterCommand(name, o)
    }
    for opt in clusterOptions where opt != "--nodes" && o.string(opt) != nil {
        throw UsageError(message: "\(opt) needs --nodes")
    }
    let server = o.string("--server") ?? ProcessInfo.processInfo.environment["STRATA_SERVER"] ?? "127.0.0.1:7400"
    guard let colon = server.lastIndex(of: ":"), let port = UInt16(server[server.index(after: colon)...]) else {
        let from = o.string("--server") != nil ? "--server" : "STRATA_SERVER"
        throw UsageError(message: "\(from) must be HOST:PORT, got '\(server)'")
    }
    var host = String(server[..<colon])
    if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
    let timeout = try timeoutOption(o, default: 5)
    let token = try o.string("--auth-token-file").map(readToken)
    let tls = try tlsOption(o)
    if name == "get" && o.string("--or-run") != nil {
        // Read-through lives in the cluster client: a cluster of this one node.
        var c = ClusterConfiguration(nodes: [NodeAddress(host: host, port: port)])
        c.replicas = 1
        c.timeout = timeout
        c.token = token
        c.tls = tls
        return try getOrRun(o, try ClusterClient(configuration: c))
    }
    for opt in readThroughOptions where opt != "--or-run" && o.string(opt) != nil {
        throw UsageError(message: "\(opt) needs --or-run")
    }
    // `get --ttl` is the TTL of what --or-run stores; alone it would do nothing (use touch).
    if name == "get" && o.string("--ttl") != nil {
        throw UsageError(message: "get --ttl needs --or-run (to change a key's TTL, use strata touch KEY --ttl S)")
    }
    try checkBeforeConnecting(name, o)
    let conn = try NodeConnection(host: host, port: port, timeout: timeout, token: token, tls: tls)
    defer { conn.close() }
    return try spec.run(o, conn)
}

/// The commands whose first argument is a KEY.
let keyedCommands: Set<String> = ["set", "get", "invalidate", "del", "exists", "touch", "meta", "image-info", "variant", "incr", "decr"]

/// The options the commands read once connected, checked before: a bad one is a usage error
/// (exit 2) whether the node is up or not — not "cannot connect" (exit 3) while it is down (an
/// outside review, nu4). The commands check them again where they use them.
func checkBeforeConnecting(_ name: String, _ o: ParsedOptions) throws {
    if keyedCommands.contains(name), !o.positionals.isEmpty { _ = try keyArg(o, "strata \(name) KEY") }
    _ = try tiersOption(o)
    _ = try ttlArg(o)
    _ = try nsArg(o)
    if let f = try o.int("--flags"), f > Int(UInt32.max) || f < 0 { throw UsageError(message: "--flags must fit in 32 bits") }
    if name == "set" { _ = try setModeArg(o) }
    if name == "incr" || name == "decr" {
        if o.positionals.count > 1, UInt64(o.positionals[1]) == nil {
            throw UsageError(message: "BY must be a non-negative integer, got '\(o.positionals[1])'")
        }
        _ = try initialOption(o)
    }
    switch name {
    case "set": _ = try extFileArg(o)
    case "touch": if try ttlArg(o) == nil { throw UsageError(message: "--ttl is required") }
    case "keys": _ = try o.int("--limit", min: 1)
    case "stats": try checkStatsOptions(o)
    case "variant": _ = try variantRequest(o)
    case "flush": _ = try flushAllOption(o)
    default: break
    }
}
