#if canImport(Glibc)
import Glibc
#endif
import Foundation
import StrataCore
import StrataServer

// `strata serve --config FILE`: the JSON settings file read strictly — each value by its JSON
// type, unknown keys and two spellings of one setting refused, every error naming the file
// and the key (a JSON syntax error its line).

/// One value of the config file, as JSON wrote it: `true` is not the number 1, and `1` is not
/// `true` (Foundation's JSONSerialization gives both as one NSNumber: an outside review's
/// `"port": true` bound port 1).
enum ConfigValue: Decodable {
    case bool(Bool), string(String), number(String), other

    init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        if let b = try? c.decode(Bool.self) { self = .bool(b) }
        else if let s = try? c.decode(String.self) { self = .string(s) }
        else if let i = try? c.decode(Int64.self) { self = .number(String(i)) }
        else if let d = try? c.decode(Double.self) { self = .number(String(d)) }
        else { self = .other }
    }
}

/// Why JSON could not be read, with the place when the decoder names it.
func describeJSONError(_ error: Error) -> String {
    switch error {
    case DecodingError.dataCorrupted(let c):
        if let u = c.underlyingError as NSError?, let d = u.userInfo[NSDebugDescriptionErrorKey] as? String { return d }
        return c.debugDescription
    case DecodingError.typeMismatch(_, let c): return c.debugDescription
    default: return "\(error)"
    }
}

/// Reads a JSON object whose keys are the serve flags' names (with - or _) plus `insecure`.
/// Switches take `true`/`false`; every other key a string or a number. Returns the settings by
/// flag name, whether `insecure` was set, and the key each setting was written as (for errors).
/// A setting written both ways (`max_connections` and `max-connections`) is refused.
func loadConfigFile(_ path: String) throws -> ([String: String], Bool?, [String: String]) {
    let data: Data
    var st = stat()
    if stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR {
        throw UsageError(message: "cannot read the config file '\(path)': it is a directory")
    }
    do { data = try Data(contentsOf: URL(fileURLWithPath: path)) } catch {
        let reason = access(path, R_OK) != 0 ? String(cString: strerror(errno)) : error.localizedDescription
        throw UsageError(message: "cannot read the config file '\(path)': \(reason)")
    }
    let obj: [String: ConfigValue]
    do { obj = try JSONDecoder().decode([String: ConfigValue].self, from: data) } catch {
        // JSONSerialization says where the JSON breaks; the decoder only that it does.
        var reason = describeJSONError(error)
        do { _ = try JSONSerialization.jsonObject(with: data) } catch { reason = jsonErrorReason(error, in: [UInt8](data)) }
        throw UsageError(message: "the config file '\(path)' is not a JSON object of settings: \(reason)")
    }
    var out: [String: String] = [:]
    var insecure: Bool? = nil
    var keys: [String: String] = [:]
    for (k, v) in obj.sorted(by: { $0.key < $1.key }) {
        let name = k.replacingOccurrences(of: "_", with: "-")
        if let other = keys[name] {
            throw UsageError(message: "config keys '\(other)' and '\(k)' in '\(path)' name the same setting: give it once")
        }
        keys[name] = k
        if name == "insecure" || name == "validate-images" || name == "memcached-memory-only" || name == "tls-only" || name == "metrics-tls"
            || name == "disk-reads-on-loop" {
            guard case .bool(let b) = v else { throw UsageError(message: "config '\(k)' in '\(path)' (--\(name)) must be true or false") }
            if name == "insecure" { insecure = b } else { out[name] = b ? "true" : "false" }
            continue
        }
        guard serveSettings.contains(name) else { throw UsageError(message: "unknown config key '\(k)' in '\(path)'") }
        switch v {
        case .string(let s), .number(let s): out[name] = s
        case .bool, .other: throw UsageError(message: "config '\(k)' in '\(path)' (--\(name)) must be a string or a number")
        }
    }
    return (out, insecure, keys)
}
