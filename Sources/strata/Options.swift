#if canImport(Glibc)
import Glibc
#endif
import StrataClient
// The hand-written stand-in for swift-argument-parser: the only file that parses arguments.

struct UsageError: Error { let message: String }

/// A parsed command line: `--name value` options, `--flag` switches and positionals.
struct ParsedOptions {
    var values: [String: String] = [:]
    var switches: Set<String> = []
    /// Every switch given, with its value: `--flag` is true; `--flag=false` (any of
    /// true/false, 1/0, yes/no, on/off) turns off what the environment or a config file set.
    var switchValues: [String: Bool] = [:]
    var positionals: [String] = []

    func switchValue(_ name: String) -> Bool? { switchValues[name] }

    /// Parses `args` against the names a command accepts. `--name=value` works too.
    init(_ args: [String], valued: Set<String>, switches allowed: Set<String>, maxPositionals: Int) throws {
        var i = 0
        while i < args.count {
            var a = args[i]
            if a == "--" {
                positionals += args[(i + 1)...]
                break
            }
            if a.hasPrefix("--") {
                var inline: String? = nil
                if let eq = a.firstIndex(of: "=") {
                    inline = String(a[a.index(after: eq)...])
                    a = String(a[..<eq])
                }
                if valued.contains(a) {
                    if let v = inline { values[a] = v; i += 1; continue }
                    guard i + 1 < args.count else { throw UsageError(message: "\(a) needs a value") }
                    // `--data --validate-images` is a forgotten value, not a directory named so.
                    let next = args[i + 1], nextName = String(next.prefix { $0 != "=" })
                    if next == "--" || (next.hasPrefix("--") && (valued.contains(nextName) || allowed.contains(nextName))) {
                        throw UsageError(message: "\(a) needs a value, got the option '\(next)' (a value that starts with -- is written \(a)=VALUE)")
                    }
                    values[a] = next
                    i += 2
                    continue
                }
                if allowed.contains(a) {
                    let on = try inline.map { try parseBool($0, name: a) } ?? true
                    switchValues[a] = on
                    if on { switches.insert(a) } else { switches.remove(a) }
                    i += 1
                    continue
                }
                throw UsageError(message: "unknown option '\(a)'")
            }
            positionals.append(a)
            i += 1
        }
        if positionals.count > maxPositionals {
            throw UsageError(message: "unexpected argument '\(positionals[maxPositionals])'")
        }
    }

    func string(_ name: String) -> String? { values[name] }

    func int(_ name: String, min: Int = 0) throws -> Int? {
        guard let v = values[name] else { return nil }
        guard let n = Int(v), n >= min else { throw UsageError(message: "\(name) must be an integer ≥ \(min), got '\(v)'") }
        return n
    }

    /// A number of seconds: finite, 0 … `maxSeconds`.
    func double(_ name: String) throws -> Double? {
        guard let v = values[name] else { return nil }
        return try parseSeconds(v, name: name)
    }
}

/// The largest number of seconds any option takes (2^31 − 1, about 68 years): every duration
/// the node and the client turn into microseconds, milliseconds or timeouts stays in range.
let maxSeconds = Double(Int32.max)

/// `--timeout`: seconds, 0 meaning no limit (the connect, each send and each read).
func timeoutOption(_ o: ParsedOptions, default d: Double) throws -> Double {
    guard let t = try o.double("--timeout") else { return d }
    return t == 0 ? maxSeconds : t
}

/// `v` as a number of seconds (0 … `maxSeconds`, decimal digits with at most one point: no
/// sign, exponent or hexadecimal form), or a usage error naming `name`.
func parseSeconds(_ v: String, name: String) throws -> Double {
    let decimal = v.utf8.contains { $0 >= 0x30 && $0 <= 0x39 }
        && v.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2E }
        && v.utf8.filter { $0 == 0x2E }.count <= 1
    guard decimal, let n = Double(v), n.isFinite, n >= 0, n <= maxSeconds else {
        throw UsageError(message: "\(name) must be a number of seconds from 0 to 2147483647, got '\(v)'")
    }
    return n
}

/// A boolean setting from the environment or the config file: true/false, 1/0, yes/no, on/off
/// (any case); anything else is a usage error (a misread value must not leave, say,
/// plaintext on).
func parseBool(_ v: String, name: String) throws -> Bool {
    switch v.lowercased() {
    case "true", "1", "yes", "on": return true
    case "false", "0", "no", "off", "": return false
    default: throw UsageError(message: "\(name) must be true or false (1/0, yes/no, on/off), got '\(v)'")
    }
}

/// The largest value any node takes (`--max-item` at most 4,294,901,759 B, 4 GiB less 64 KiB and one byte: a frame's length is 32
/// bits and frames may be 64 KiB larger than the value).
let largestValue = Int(UInt32.max) - (64 << 10)

/// `set`'s value from standard input, read until its end: exit 2 (nothing sent) once it is
/// larger than any node takes — a 4 GiB value used to be sent with its length truncated.
/// `limit`: the node's own `--max-item` when known (STATS `max_item_bytes`): past it the read
/// stops and the set is refused as the node would refuse it (TOO_LARGE, exit 3) without holding
/// more of the input in memory.
func readValueFromStdin(limit: Int? = nil) throws -> [UInt8] {
    var value: [UInt8] = []
    let chunk = 1 << 20
    var buf = [UInt8](repeating: 0, count: chunk)
    while true {
        let n = buf.withUnsafeMutableBytes { read(0, $0.baseAddress, chunk) }
        if n < 0 {
            if errno == EINTR { continue }
            throw UsageError(message: "reading the value from standard input failed: \(String(cString: strerror(errno)))")
        }
        if n == 0 { return value }
        if let limit, value.count + n > limit {
            throw ClientError(.server, "TOO_LARGE: the value on standard input is larger than the node's --max-item (\(limit) bytes); nothing was sent", status: .tooLarge)
        }
        guard value.count + n <= largestValue else {
            throw UsageError(message: "the value on standard input is larger than \(largestValue) bytes (4 GiB less 64 KiB and one byte), the most any node takes (its --max-item); nothing was sent")
        }
        value.append(contentsOf: buf[0..<n])
    }
}
