#if canImport(Glibc)
import Glibc
#endif
import Foundation
import StrataClient
import StrataCore
import StrataNet
import StrataWire

// What the client commands share: reading their options and arguments (TLS, tiers, keys,
// namespaces, set modes, TTLs, extended data) and printing answers (items, statuses, expiry).

let keyOpts: Set<String> = ["--ns", "--tiers"]
/// The TLS options every client command takes.
let tlsValued: Set<String> = ["--tls-ca", "--tls-cert", "--tls-key", "--tls-server-name"]

/// `--tls --tls-ca FILE [--tls-cert FILE --tls-key FILE] [--tls-server-name NAME]`, or nil
/// without `--tls`.
func tlsOption(_ o: ParsedOptions) throws -> TLSClientConfiguration? {
    guard o.switches.contains("--tls") else {
        if let opt = tlsValued.sorted().first(where: { o.string($0) != nil }) { throw UsageError(message: "\(opt) needs --tls") }
        return nil
    }
    guard let ca = o.string("--tls-ca") else { throw UsageError(message: "--tls needs --tls-ca FILE (the CA that signed the node's certificate)") }
    let cert = o.string("--tls-cert"), key = o.string("--tls-key")
    if (cert == nil) != (key == nil) { throw UsageError(message: "--tls-cert and --tls-key go together") }
    for (opt, path) in [("--tls-ca", ca), ("--tls-cert", cert), ("--tls-key", key)] {
        if let p = path, access(p, R_OK) != 0 { throw UsageError(message: "\(opt) \(p): \(String(cString: strerror(errno)))") }
    }
    // The files are loaded now, so a key that does not match its certificate is a usage error
    // (exit 2) as for `strata serve`, not a connection error (an outside review, nu3).
    do { _ = try TLSContext.client(ca: ca, certificate: cert, key: key) } catch { throw UsageError(message: "TLS: \(error)") }
    return TLSClientConfiguration(caFile: ca, certificateFile: cert, keyFile: key, serverName: o.string("--tls-server-name"))
}

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

/// `set --mode add|replace|cas [--cas VERSION]`: the SET mode and the version a cas needs.
func setModeArg(_ o: ParsedOptions) throws -> (mode: SetModeCode, cas: UInt64) {
    let cas = try o.string("--cas").map { text -> UInt64 in
        guard let v = UInt64(text), v > 0 else { throw UsageError(message: "--cas must be a version (1…2^64−1, as set prints or get --meta shows), got '\(text)'") }
        return v
    }
    switch o.string("--mode") ?? (cas != nil ? "cas" : "set") {
    case "set": return (.set, 0)
    case "add" where cas == nil: return (.add, 0)
    case "replace" where cas == nil: return (.replace, 0)
    case "cas":
        guard let v = cas else { throw UsageError(message: "--mode cas needs --cas VERSION (the version the item must have)") }
        return (.cas, v)
    case "add", "replace": throw UsageError(message: "--cas goes with --mode cas only")
    case let m: throw UsageError(message: "--mode must be set, add, replace or cas, got '\(m)'")
    }
}

/// Exit 1 and why, for a conditional set that stored nothing; nil when `status` is not one.
func notStored(_ status: Status, current: UInt64, key: String) -> Int32? {
    switch status {
    case .exists: printErr("not stored: \(key) exists (--mode add)")
    case .notFound: printErr("not stored: \(key) not found")
    case .casMismatch: printErr("not stored: \(key) has version \(current), not the one --cas named")
    default: return nil
    }
    return 1
}

func ttlArg(_ o: ParsedOptions) throws -> WireExpiry? {
    guard let v = o.string("--ttl") else { return nil }
    guard let n = Int64(v), n >= 0, n <= Int64(Int32.max) else { throw UsageError(message: "--ttl must be a whole number of seconds, 0…2147483647 (0: never expires), got '\(v)'") }
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

/// Refuses an answer the node flagged UNVERIFIED (PROTOCOL.md §7.19) — it may be old or
/// deleted, and one node cannot check its replicas — unless `--allow-unverified`, which prints
/// a warning on stderr instead.
func refuseUnverified(_ f: Frame, _ c: NodeConnection, _ o: ParsedOptions) throws {
    guard f.responseFlags & ResponseFlags.unverified.rawValue != 0 else { return }
    let why = "\(c.address) flagged its answer UNVERIFIED: it has not caught up with the key's other replicas since it restarted, paused or lost contact, so the answer may be old, or a deleted value"
    if o.switches.contains("--allow-unverified") {
        printErr("warning: \(why)")
        return
    }
    throw ClientError(.server, why + "; read with --nodes (which checks the replicas) or pass --allow-unverified")
}

/// Prints a GET's item: its bytes on stdout (exit 0), or for a negative entry its message on
/// stderr (exit 1). `--meta` adds a line on stderr; `--ext` prints the extended data instead
/// of the value.
func printItem(_ item: ItemPayload, _ o: ParsedOptions) -> Int32 {
    if item.negative {
        printErr("cached failure: \(String(decoding: item.value, as: UTF8.self))")
        return 1
    }
    if o.switches.contains("--meta") {
        printErr("version \(item.version), flags \(item.flags), \(item.value.count) bytes, from \(item.tier == 1 ? "memory" : "disk"), expires \(formatExpiry(item.expiresAt))\(item.stale ? ", stale" : "")")
    }
    if o.switches.contains("--ext") {
        if !item.extended.isEmpty { writeValue(item.extended) } // none: nothing at all, not even a newline
    } else {
        writeValue(item.value)
    }
    return 0
}

/// `--ext-file FILE`: the file's bytes as extended data (at most `Wire.maxExtended`).
func extFileArg(_ o: ParsedOptions) throws -> [UInt8] {
    guard let path = o.string("--ext-file") else { return [] }
    guard let data = FileManager.default.contents(atPath: path) else { throw UsageError(message: "cannot read --ext-file '\(path)'") }
    guard data.count <= Wire.maxExtended else {
        throw UsageError(message: "--ext-file '\(path)' is \(data.count) bytes; extended data is at most \(Wire.maxExtended)")
    }
    return [UInt8](data)
}

/// " (memory only)", " (disk only)" or "" for a tier mask.
func tiersSuffix(_ tiers: UInt8) -> String {
    switch tiers { case 1: " (memory only)"; case 2: " (disk only)"; default: "" }
}

func formatExpiry(_ micros: Int64) -> String {
    guard micros > 0 else { return "never" }
    let left = Double(micros) / 1e6 - Date().timeIntervalSince1970
    return String(format: "%.0f s left", max(0, left))
}
