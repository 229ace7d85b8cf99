#if canImport(Glibc)
import Glibc
#endif
import Foundation
import StrataClient
import StrataCore
import StrataWire

struct ClientCommand: Sendable {
    let usage: String
    let valued: Set<String>
    let switches: Set<String>
    let positionals: Int
    let run: @Sendable (ParsedOptions, NodeConnection) throws -> Int32
}

let common = "  --server HOST:PORT   the node (default 127.0.0.1:7400, or STRATA_SERVER)\n  --auth-token-file F  authenticate with the token in F\n  --timeout SECONDS    per request (default 5)"
let keyOpts: Set<String> = ["--ns", "--tiers"]

func tiersOption(_ o: ParsedOptions) throws -> UInt8 {
    guard let t = o.string("--tiers") else { return 0 }
    guard let tiers = Tiers(name: t) else { throw UsageError(message: "--tiers must be memory, disk or all, got '\(t)'") }
    return tiers.rawValue
}

func keyArg(_ o: ParsedOptions, _ usage: String) throws -> [UInt8] {
    guard let k = o.positionals.first else { throw UsageError(message: "a KEY is required (\(usage))") }
    let b = Array(k.utf8)
    guard !b.isEmpty, b.count <= Wire.maxKey else { throw UsageError(message: "KEY must be 1…\(Wire.maxKey) bytes") }
    return b
}

func nsArg(_ o: ParsedOptions) throws -> [UInt8] {
    let b = Array((o.string("--ns") ?? "").utf8)
    guard b.count <= Wire.maxNamespace else { throw UsageError(message: "--ns must be at most \(Wire.maxNamespace) bytes") }
    return b
}

func ttlArg(_ o: ParsedOptions) throws -> WireExpiry? {
    guard let v = o.string("--ttl") else { return nil }
    guard let n = Int64(v), n >= 0, n <= Int64(Int32.max) else { throw UsageError(message: "--ttl must be 0…2^31 seconds, got '\(v)'") }
    return n == 0 ? .never : .seconds(n)
}

/// Turns a non-OK status into exit 1 (not found) or an error (exit 3).
func finish(_ f: Frame, notFoundMessage: String? = nil) throws -> Int32 {
    if f.statusCode == .notFound {
        printErr(notFoundMessage ?? "not found")
        return 1
    }
    try NodeConnection.check(f, allow: [.ok])
    return 0
}

func formatExpiry(_ micros: Int64) -> String {
    guard micros > 0 else { return "never" }
    let left = Double(micros) / 1e6 - Date().timeIntervalSince1970
    return String(format: "%.0f s left", max(0, left))
}

let clientCommands: [String: ClientCommand] = [
    "ping": ClientCommand(usage: "strata ping", valued: [], switches: [], positionals: 0) { _, c in
        let t0 = monotonicSeconds()
        try c.ping()
        printOut(String(format: "PONG from %@ in %.2f ms", c.address.description, (monotonicSeconds() - t0) * 1000))
        return 0
    },
    "stats": ClientCommand(usage: "strata stats [--json]", valued: [], switches: ["--json"], positionals: 0) { o, c in
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
    },
    "set": ClientCommand(usage: "strata set KEY [VALUE] [--ttl S] [--ns NS] [--tiers memory|disk|all] [--flags N]",
                         valued: keyOpts.union(["--ttl", "--flags"]), switches: [], positionals: 2) { o, c in
        let key = try keyArg(o, "strata set KEY [VALUE]")
        var value: [UInt8]
        if o.positionals.count > 1 { value = Array(o.positionals[1].utf8) } else {
            value = [UInt8](FileHandle.standardInput.readDataToEndOfFile())
        }
        var s = SetRequest(key: key, value: value, namespace: try nsArg(o))
        s.tiers = try tiersOption(o)
        if let e = try ttlArg(o) { s.expiry = e }
        if let f = try o.int("--flags") {
            guard f <= Int(UInt32.max) else { throw UsageError(message: "--flags must fit in 32 bits") }
            s.flags = UInt32(f)
        }
        let resp = try c.set(s)
        try NodeConnection.check(resp, allow: [.ok])
        printOut("stored \(value.count) bytes, version \(resp.cas)")
        return 0
    },
    "get": ClientCommand(usage: "strata get KEY [--ns NS] [--tiers memory|disk|all] [--meta]",
                         valued: keyOpts, switches: ["--meta"], positionals: 1) { o, c in
        let key = try keyArg(o, "strata get KEY")
        guard let item = try c.get(key, namespace: try nsArg(o), tiers: try tiersOption(o), wantMeta: o.switches.contains("--meta")) else {
            printErr("not found: \(o.positionals[0])")
            return 1
        }
        if o.switches.contains("--meta") {
            printErr("version \(item.version), flags \(item.flags), \(item.value.count) bytes, from \(item.tier == 1 ? "memory" : "disk"), expires \(formatExpiry(item.expiresAt))")
        }
        writeBytes(item.value)
        return 0
    },
    "del": ClientCommand(usage: "strata del KEY [--ns NS] [--tiers …]", valued: keyOpts, switches: [], positionals: 1) { o, c in
        let key = try keyArg(o, "strata del KEY")
        return try finish(c.call(.delete(namespace: try nsArg(o), key: key, tiers: try tiersOption(o), version: nil, writeBehind: false)),
                          notFoundMessage: "not found: \(o.positionals[0])")
    },
    "exists": ClientCommand(usage: "strata exists KEY [--ns NS] [--tiers …]", valued: keyOpts, switches: [], positionals: 1) { o, c in
        let key = try keyArg(o, "strata exists KEY")
        let code = try finish(c.call(.exists(namespace: try nsArg(o), key: key, tiers: try tiersOption(o))),
                              notFoundMessage: "not found: \(o.positionals[0])")
        if code == 0 { printOut("exists") }
        return code
    },
    "touch": ClientCommand(usage: "strata touch KEY --ttl S [--ns NS]", valued: keyOpts.union(["--ttl"]), switches: [], positionals: 1) { o, c in
        let key = try keyArg(o, "strata touch KEY --ttl S")
        guard let e = try ttlArg(o) else { throw UsageError(message: "--ttl is required") }
        return try finish(c.call(.touch(namespace: try nsArg(o), key: key, tiers: try tiersOption(o), expiry: e)),
                          notFoundMessage: "not found: \(o.positionals[0])")
    },
    "incr": counterCommand(decrement: false),
    "decr": counterCommand(decrement: true),
    "meta": ClientCommand(usage: "strata meta KEY [--ns NS]", valued: keyOpts, switches: [], positionals: 1) { o, c in
        let key = try keyArg(o, "strata meta KEY")
        let f = try c.call(.meta(namespace: try nsArg(o), key: key, tiers: try tiersOption(o)))
        if f.statusCode == .notFound { printErr("not found: \(o.positionals[0])"); return 1 }
        try NodeConnection.check(f, allow: [.ok])
        let m = try Responses.parseMeta(f)
        let tiers = Tiers(rawValue: m.tiersPresent).description
        printOut("size          \(m.size)")
        printOut("stored size   \(m.storedSize < 0 ? "-" : String(m.storedSize))")
        printOut("encoding      \(m.encoding == 255 ? "-" : m.encoding == 1 ? "zstd" : "raw")")
        printOut("tiers         \(tiers)")
        printOut("expires       \(formatExpiry(m.expiresAt))")
        printOut("version       \(m.version)")
        printOut("flags         \(m.flags)")
        printOut("extended      \(m.extendedSize) bytes")
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
    "flush": ClientCommand(usage: "strata flush (--ns NS | --all)", valued: ["--ns"], switches: ["--all"], positionals: 0) { o, c in
        let all = o.switches.contains("--all")
        guard all != (o.string("--ns") != nil) else { throw UsageError(message: "say which: --ns NS or --all") }
        let f = try c.call(.flush(namespace: try nsArg(o), all: all))
        try NodeConnection.check(f, allow: [.ok])
        printOut(all ? "flushed everything" : "flushed namespace '\(o.string("--ns")!)'")
        return 0
    },
]

func counterCommand(decrement: Bool) -> ClientCommand {
    let name = decrement ? "decr" : "incr"
    return ClientCommand(usage: "strata \(name) KEY [BY] [--ns NS] [--initial N]", valued: keyOpts.union(["--initial"]), switches: [], positionals: 2) { o, c in
        let key = try keyArg(o, "strata \(name) KEY [BY]")
        var by: UInt64 = 1
        if o.positionals.count > 1 {
            guard let n = UInt64(o.positionals[1]) else { throw UsageError(message: "BY must be a non-negative integer, got '\(o.positionals[1])'") }
            by = n
        }
        var r = CounterRequest(key: key, delta: by, namespace: try nsArg(o), decrement: decrement)
        r.tiers = try tiersOption(o)
        if let i = o.string("--initial") {
            guard let n = UInt64(i) else { throw UsageError(message: "--initial must be a non-negative integer") }
            r.initial = n
        }
        let f = try c.call(.counter(r))
        if f.statusCode == .notFound { printErr("not found: \(o.positionals[0])"); return 1 }
        try NodeConnection.check(f, allow: [.ok])
        printOut(String(try Responses.parseCounter(f)))
        return 0
    }
}

func runClientCommand(_ name: String, _ spec: ClientCommand, _ args: [String]) throws -> Int32 {
    let o = try ParsedOptions(args, valued: spec.valued.union(["--server", "--auth-token-file", "--timeout"]),
                              switches: spec.switches.union(["--help"]), maxPositionals: spec.positionals)
    if o.switches.contains("--help") {
        printOut("usage: \(spec.usage)\n\n\(common)")
        return 0
    }
    if spec.usage.contains(" KEY") && o.positionals.isEmpty {
        throw UsageError(message: "a KEY is required (usage: \(spec.usage))")
    }
    let server = o.string("--server") ?? ProcessInfo.processInfo.environment["STRATA_SERVER"] ?? "127.0.0.1:7400"
    guard let colon = server.lastIndex(of: ":"), let port = UInt16(server[server.index(after: colon)...]) else {
        throw UsageError(message: "--server must be HOST:PORT, got '\(server)'")
    }
    var host = String(server[..<colon])
    if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
    let timeout = try o.double("--timeout") ?? 5
    let token = try o.string("--auth-token-file").map(readToken)
    let conn = try NodeConnection(host: host, port: port, timeout: timeout, token: token)
    defer { conn.close() }
    return try spec.run(o, conn)
}
