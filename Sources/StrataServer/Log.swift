#if canImport(Glibc)
import Glibc
#endif
import StrataCore

/// Structured log lines on stderr: `ts=… level=… event=… key=value…`. Thread-safe (one write
/// per line).
public struct Logger: Sendable {
    public let level: LogLevel
    public init(level: LogLevel) { self.level = level }

    public func log(_ l: LogLevel, _ event: String, _ fields: [(String, String)] = []) {
        guard l >= level else { return }
        var line = "ts=\(isoNow()) level=\(l.name) event=\(event)"
        for (k, v) in fields { line += " \(k)=" + Self.value(v) }
        line += "\n"
        line.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
    }

    /// An audit line (`level=audit event=audit action=… user=… peer=…`): written whatever the
    /// log level, since it records who did what (admin operations, credential reloads,
    /// membership changes).
    public func audit(_ action: String, user: String, peer: String, _ fields: [(String, String)] = []) {
        var line = "ts=\(isoNow()) level=audit event=audit"
        for (k, v) in [("action", action), ("user", user), ("peer", peer)] + fields { line += " \(k)=" + Self.value(v) }
        line += "\n"
        line.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
    }

    /// A line the store made (`level=… event=… key=value…`, StoreConfiguration.log), written
    /// as the node's own lines are: stamped, and kept or dropped by its level (a line without
    /// one counts as warn and gets `level=warn event=store detail=…`).
    public func storeLine(_ line: String) {
        let parts = line.split(separator: " ", maxSplits: 1)
        guard let first = parts.first, first.hasPrefix("level="), let l = LogLevel(name: String(first.dropFirst(6))),
              parts.count == 2, parts[1].hasPrefix("event=") else {
            log(.warn, "store", [("detail", line)])
            return
        }
        guard l >= level else { return }
        var out = "ts=\(isoNow()) " + Self.oneLine(line) + "\n"
        out.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
    }

    /// A field's value as written: quoted when it holds a space, `=` or nothing (`"` inside
    /// becomes `'`), control characters escaped (`\n`, `\r`, `\t`, `\xNN`) so every event is one line.
    static func value(_ v: String) -> String {
        let flat = oneLine(v)
        let needsQuotes = flat.contains(" ") || flat.contains("=") || flat.isEmpty || flat != v
        return needsQuotes ? "\"" + flat.replacingQuotes() + "\"" : flat
    }

    /// `text` with its control characters escaped (a SQLite quick_check report spans lines).
    static func oneLine(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f }) else { return text }
        var out = ""
        for u in text.unicodeScalars {
            switch u {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where u.value < 0x20 || u.value == 0x7f:
                let h = String(u.value, radix: 16)
                out += "\\x" + (h.count < 2 ? "0" : "") + h
            default: out.unicodeScalars.append(u)
            }
        }
        return out
    }

    public func info(_ e: String, _ f: [(String, String)] = []) { log(.info, e, f) }
    public func warn(_ e: String, _ f: [(String, String)] = []) { log(.warn, e, f) }
    public func error(_ e: String, _ f: [(String, String)] = []) { log(.error, e, f) }
    public func debug(_ e: String, _ f: [(String, String)] = []) { log(.debug, e, f) }
}

func isoNow() -> String {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    var t = ts.tv_sec
    var tm = tm()
    gmtime_r(&t, &tm)
    func p(_ v: Int32, _ w: Int) -> String { let s = String(v); return String(repeating: "0", count: max(0, w - s.count)) + s }
    return "\(p(tm.tm_year + 1900, 4))-\(p(tm.tm_mon + 1, 2))-\(p(tm.tm_mday, 2))T\(p(tm.tm_hour, 2)):\(p(tm.tm_min, 2)):\(p(tm.tm_sec, 2)).\(p(Int32(ts.tv_nsec / 1_000_000), 3))Z"
}

extension String {
    func replacingQuotes() -> String { String(self.map { $0 == "\"" ? "'" : $0 }) }
}

