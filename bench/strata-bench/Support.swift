import Glibc
import StrataCore

struct UsageError: Error { let message: String }

func printErr(_ s: String) {
    let line = s + "\n"
    _ = line.withCString { write(2, $0, strlen($0)) }
}

func median(_ xs: [Double]) -> Double {
    guard !xs.isEmpty else { return 0 }
    let s = xs.sorted()
    return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
}

/// Resident memory of a process in bytes from /proc/PID/status: `field` is VmRSS (all),
/// RssAnon (memory the process allocated) or RssFile (mapped file pages, e.g. SQLite's mmap of
/// its database: page cache the kernel can drop). 0 when unknown.
func residentBytes(pid: Int32, field: String = "VmRSS") -> Int {
    guard let f = fopen("/proc/\(pid)/status", "r") else { return 0 }
    defer { fclose(f) }
    var line = [CChar](repeating: 0, count: 256)
    while fgets(&line, 256, f) != nil {
        let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if text.hasPrefix(field + ":") {
            return (Int(text.split(separator: " ").dropFirst().first ?? "") ?? 0) * 1024
        }
    }
    return 0
}

/// A JSON document of about `size` bytes shaped like an API response (repeated field names,
/// varied values) — what people cache most.
func jsonLikeValue(size: Int, seed: UInt64) -> [UInt8] {
    var rng = SplitMix(seed: seed)
    let words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
                 "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango"]
    var s = "{\"page\":1,\"items\":["
    var id = Int(rng.next() % 100_000)
    while s.utf8.count < size - 200 {
        id += 1 + Int(rng.next() % 7)
        let name = words[Int(rng.next() % 20)] + " " + words[Int(rng.next() % 20)]
        let score = Double(rng.next() % 100_000) / 100
        let tags = (0..<Int(rng.next() % 4)).map { _ in "\"" + words[Int(rng.next() % 20)] + "\"" }.joined(separator: ",")
        s += "{\"id\":\(id),\"name\":\"\(name)\",\"email\":\"\(name.replacingOccurrences(of: " ", with: "."))@example.com\","
        s += "\"active\":\(rng.next() % 2 == 0),\"score\":\(score),\"tags\":[\(tags)],\"created\":\"2026-11-\(10 + rng.next() % 19)T\(10 + rng.next() % 13):\(10 + rng.next() % 49):00Z\"},"
    }
    s.removeLast()
    s += "]}"
    return Array(s.utf8)
}

extension String {
    func replacingOccurrences(of a: String, with b: String) -> String {
        split(separator: Character(a), omittingEmptySubsequences: false).joined(separator: b)
    }
}

/// Parses `--flag value` and `--flag` options.
struct Options {
    var values: [String: String] = [:]
    var flags: Set<String> = []
    init(_ args: [String], valued: Set<String>, boolean: Set<String>) throws {
        var i = 0
        while i < args.count {
            let a = args[i]
            if valued.contains(a) {
                guard i + 1 < args.count else { throw UsageError(message: "\(a) needs a value") }
                values[a] = args[i + 1]
                i += 2
            } else if boolean.contains(a) {
                flags.insert(a)
                i += 1
            } else {
                throw UsageError(message: "unknown option '\(a)'")
            }
        }
    }
    func int(_ name: String, _ def: Int) throws -> Int {
        guard let v = values[name] else { return def }
        guard let n = Int(v), n > 0 else { throw UsageError(message: "\(name) must be a positive integer, got '\(v)'") }
        return n
    }
}
