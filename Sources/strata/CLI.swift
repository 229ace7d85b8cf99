#if canImport(Glibc)
import Glibc
#endif
import Foundation
import StrataClient
import StrataCore
import StrataServer
import StrataStore
import StrataWire

let topUsage = """
usage: strata <command> [options]

commands:
  serve     start a node
  ping      check that a node answers
  stats     a node's counters (--json for JSON)
  set       store a value (from the argument, or stdin when omitted)
  get       print a value (exit 1 on a miss); --or-run 'COMMAND' loads a miss through COMMAND
  invalidate  mark a key stale (still served, flagged, until one reader refreshes it)
  del       delete a key
  exists    exit 0 if the key exists, 1 if not
  touch     give a key a new TTL
  incr      add to a counter
  decr      subtract from a counter
  meta      an item's metadata
  keys      list the keys of a namespace
  flush     empty a namespace (--ns) or everything (--all)
  image-info   an image's format, size, alpha and frames
  variant   a resized variant of a stored image (bytes to stdout)
  ring      where keys live on a set of nodes, or how evenly they share keys
  check     verify a stopped node's data directory offline
  credentials  hash a token for a --credentials file, or check such a file

Client commands talk to one node (--server) or a cluster (--nodes H:P,H:P,…).

`strata <command> --help` describes each command.
Exit codes: 0 ok, 1 not found (or a conditional set not stored; with --nodes, del and invalidate exit 0
when whether the key existed is unknown: README), 2 bad usage, 3 connection or server error.
"""

func printOut(_ s: String) {
    let line = s + "\n"
    line.withCString { _ = write(1, $0, strlen($0)) }
}

func printErr(_ s: String) {
    let line = s + "\n"
    line.withCString { _ = write(2, $0, strlen($0)) }
}

func writeBytes(_ b: [UInt8]) {
    var off = 0
    while off < b.count {
        let n = b.withUnsafeBytes { write(1, $0.baseAddress! + off, b.count - off) }
        if n <= 0 { return }
        off += n
    }
}

/// A value for a person or a pipe: the bytes as they are, plus a newline when stdout is a
/// terminal and the value does not end with one (so the shell's next prompt is not glued to
/// it). Redirected to a file or a pipe, the bytes are written exactly.
func writeValue(_ b: [UInt8]) {
    writeBytes(b)
    if isatty(1) != 0 && b.last != UInt8(ascii: "\n") { writeBytes([UInt8(ascii: "\n")]) }
}

func runCLI(_ args: [String]) -> Int32 {
    guard let command = args.first else {
        printErr(topUsage)
        return 2
    }
    let rest = Array(args.dropFirst())
    do {
        switch command {
        case "serve": return try serveCommand(rest)
        case "ring": return try ringCommand(rest)
        case "check": return try checkCommand(rest)
        case "credentials": return try credentialsCommand(rest)
        case "--help", "-h", "help":
            printOut(topUsage)
            return 0
        case "--version", "version":
            printOut("strata \(Node.version)")
            return 0
        default:
            guard let spec = clientCommands[command] else {
                throw UsageError(message: "unknown command '\(command)' (see strata --help)")
            }
            return try runClientCommand(command, spec, rest)
        }
    } catch let e as UsageError {
        printErr("strata \(command): \(e.message)")
        return 2
    } catch let e as ClientError {
        printErr("strata \(command): \(e.message)" + clientErrorHint(e, rest))
        return 3
    } catch let e as NodeError {
        printErr("strata \(command): \(e.message)")
        return e.exitCode
    } catch {
        printErr("strata \(command): \(error)")
        return 3
    }
}

/// `strata check --data DIR`: verifies a stopped node's database offline.
func checkCommand(_ args: [String]) throws -> Int32 {
    let o = try ParsedOptions(args, valued: ["--data"], switches: ["--help"], maxPositionals: 0)
    if o.switches.contains("--help") {
        printOut("""
        usage: strata check --data DIR

        Counts rows as live items (what a read could return now), tombstones, expired rows and
        rows of flushed namespaces (neither is served; the sweeps remove them; a node's
        --max-age is not known offline, so items older than it still count as live).
        Verifies a stopped node's data directory: SQLite's integrity check and schema version,
        every item's checksum and encoding, and every record of the durability log (log/). A
        write cut short by a crash at the log's end is reported but is not a problem (the next
        open cuts it). Exit 0 when clean, 3 when anything is wrong (or the directory is in use by
        a running node, or holds no database).
        """)
        return 0
    }
    guard let dir = o.string("--data") else { throw UsageError(message: "--data DIR is required") }
    let r: DiskCheckReport
    do { r = try TieredCache.check(directory: dir) } catch let e as StoreError {
        printErr("strata check: \(e.message)")
        return 3
    }
    printOut("rows          \(r.rows)")
    printOut("live items    \(r.liveItems)")
    printOut("tombstones    \(r.tombstones)")
    printOut("expired       \(r.expiredRows) (past their expiry: never served, removed by the next sweeps)")
    printOut("flushed       \(r.flushedRows) (of a flushed namespace: never served, collected by the sweeps)")
    printOut("namespaces    \(r.namespaces)")
    printOut("bad rows      \(r.badRows)")
    printOut("integrity     \(r.integrity.prefix(5).joined(separator: "; "))")
    printOut("schema        \(r.schemaVersion)\(r.schemaProblem.map { " — " + $0 } ?? "")\(r.note.map { " — " + $0 } ?? "")")
    // Records after damage cannot be read, so are not counted; the next open does not replay
    // them either (an outside review, dur15: "0 not yet in SQLite" read as nothing lost).
    printOut("log           \(r.logSegments) segments, \(r.logRecords) records, \(r.logUnapplied) not yet in SQLite (replayed at the next open)"
             + (r.logTornBytes > 0 ? ", \(r.logTornBytes) bytes of a write cut short by a crash at the end (cut at the next open)" : "")
             + (r.logDamage.isEmpty ? "" : "; records after the damage below are not counted and will not be replayed"))
    for d in r.logDamage.prefix(10) { printOut("log damage    \(d)") }
    if r.isClean { printOut("clean"); return 0 }
    printErr("strata check: problems found in \(dir)")
    return 3
}

/// What a CLI user can do about two common mistakes (an outside review, nu3: the messages named
/// HELLO, which the CLI sends itself, and a reset connection with no hint of TLS).
func clientErrorHint(_ e: ClientError, _ args: [String]) -> String {
    if e.status == .authRequired && !args.contains("--auth-token-file") {
        return " (give the node's token with --auth-token-file FILE)"
    }
    if e.kind == .connection && !args.contains("--tls") && (e.message.contains("reset by peer") || e.message.hasSuffix("closed the connection")) {
        return " (if that is the node's --tls-port, connect with --tls --tls-ca FILE)"
    }
    return ""
}
