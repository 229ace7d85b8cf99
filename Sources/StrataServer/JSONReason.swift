import Foundation

/// Why JSONSerialization refused `bytes`: its reason, with the line and column (1-based) of
/// the character it names — "Invalid value around character 8." becomes "Invalid value around
/// character 8 (line 1, column 9)". Used for the config file and the credentials file.
public func jsonErrorReason(_ error: Error, in bytes: [UInt8]) -> String {
    let reason = ((error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String) ?? error.localizedDescription
    guard let r = reason.range(of: "character "), let n = Int(reason[r.upperBound...].prefix { $0.isNumber }), n <= bytes.count else {
        return reason
    }
    var line = 1, column = 1
    for b in bytes.prefix(n) { if b == 10 { line += 1; column = 1 } else { column += 1 } }
    let trimmed = reason.hasSuffix(".") ? String(reason.dropLast()) : reason
    return "\(trimmed) (line \(line), column \(column))"
}
