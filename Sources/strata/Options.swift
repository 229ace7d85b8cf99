// The hand-written stand-in for swift-argument-parser: the only file that parses arguments.

struct UsageError: Error { let message: String }

/// A parsed command line: `--name value` options, `--flag` switches and positionals.
struct ParsedOptions {
    var values: [String: String] = [:]
    var switches: Set<String> = []
    var positionals: [String] = []

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
                    values[a] = args[i + 1]
                    i += 2
                    continue
                }
                if allowed.contains(a) && inline == nil {
                    switches.insert(a)
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

    func double(_ name: String) throws -> Double? {
        guard let v = values[name] else { return nil }
        guard let n = Double(v), n >= 0 else { throw UsageError(message: "\(name) must be a non-negative number, got '\(v)'") }
        return n
    }
}
