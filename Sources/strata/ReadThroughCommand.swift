#if canImport(Glibc)
import Glibc
#endif
import Foundation
import StrataClient
import StrataWire

// `strata get KEY --or-run 'COMMAND'`: a shared memoizer for shell scripts and cron jobs. On a
// miss, COMMAND runs under the key's lease (once across every caller), its standard output
// is stored with --ttl and printed — exactly its bytes, nothing else on stdout.

let readThroughOptions: Set<String> = ["--or-run", "--negative-ttl", "--max-wait", "--refresh-ahead"]

func getOrRun(_ o: ParsedOptions, _ cluster: ClusterClient) throws -> Int32 {
    let key = try keyArg(o, "strata get KEY --or-run COMMAND")
    guard let command = o.string("--or-run"), !command.isEmpty else { throw UsageError(message: "--or-run needs a COMMAND") }
    var options = LoadOptions()
    if let n = try o.double("--negative-ttl") {
        guard n > 0 else { throw UsageError(message: "--negative-ttl must be more than 0 seconds") }
        options.negativeTTL = n
    }
    if let w = try o.double("--max-wait") {
        guard w >= 0 else { throw UsageError(message: "--max-wait must be 0 or more seconds") }
        options.maxWait = w
    }
    if let r = try o.double("--refresh-ahead") {
        guard r >= 0 else { throw UsageError(message: "--refresh-ahead must be 0 or more seconds") }
        options.refreshAhead = r
    }
    do {
        let v = try cluster.getOrLoad(key, namespace: try nsArg(o), ttl: try ttlArg(o) ?? .storeDefault, options: options) {
            try runShell(command)
        }
        writeValue(v.value)
        if let why = v.notStored { printErr("strata get: the output was printed but not stored: \(why)") }
        return 0
    } catch let f as LoadFailure {
        printErr(f.cached ? "cached failure (a negative entry; the command is not run again until it expires): \(f.message)"
                          : "command failed: \(f.message)")
        return 1
    }
}

/// Runs `/bin/sh -c command`; its standard output is the value. Output goes through temporary
/// files, not pipes, so a command that leaves a background child holding a pipe cannot hang
/// this process. A nonzero exit is a `LoadFailure` carrying the last line of its stderr
/// (which is also passed on to this process's stderr).
func runShell(_ command: String) throws -> [UInt8] {
    let dir = NSTemporaryDirectory() + "strata-or-run-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let outPath = dir + "/stdout", errPath = dir + "/stderr"
    FileManager.default.createFile(atPath: outPath, contents: nil)
    FileManager.default.createFile(atPath: errPath, contents: nil)
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/bin/sh")
    p.arguments = ["-c", command]
    p.standardInput = FileHandle.nullDevice
    guard let out = FileHandle(forWritingAtPath: outPath), let err = FileHandle(forWritingAtPath: errPath) else {
        throw LoadFailure(message: "could not create temporary files in \(dir)", cached: false)
    }
    p.standardOutput = out
    p.standardError = err
    do { try p.run() } catch { throw LoadFailure(message: "could not run /bin/sh: \(error)", cached: false) }
    p.waitUntilExit()
    try? out.close(); try? err.close()
    let errText = (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? ""
    if !errText.isEmpty { FileHandle.standardError.write(Data(errText.utf8)) }
    guard p.terminationReason == .exit && p.terminationStatus == 0 else {
        let last = errText.split(separator: "\n").last.map(String.init) ?? ""
        let how = p.terminationReason == .exit ? "exit status \(p.terminationStatus)" : "signal \(p.terminationStatus)"
        throw LoadFailure(message: "'\(command)' failed (\(how))" + (last.isEmpty ? "" : ": " + last), cached: false)
    }
    return [UInt8](FileManager.default.contents(atPath: outPath) ?? Data())
}
